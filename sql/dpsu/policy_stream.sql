-- The policy input in visiting order, one row per user: users by their salted order hash (ties
-- by id), each with the list of its kept items (a set: the update does not depend on the items'
-- order). Sorting users, not (user, item) pairs, keeps the sort small. The driver maps the items
-- to their dense ids (sql/dpsu/policy_support.sql) batch by batch.
SELECT kept
FROM {schema}.{pairs}
ORDER BY user_order, user_id
