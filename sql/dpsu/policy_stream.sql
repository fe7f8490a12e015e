-- The policy input in visiting order, one row per user: users by their salted order hash (ties
-- by id), each with the list of its kept items' dense ids (a set: the update does not depend on
-- the items' order). Sorting users, not (user, item) pairs, keeps the sort small.
SELECT list(i.iid) AS iids
FROM {schema}.{pairs} AS p
JOIN {schema}.{item_ids} AS i ON p.item = i.item
GROUP BY p.user_order, p.user_id
ORDER BY p.user_order, p.user_id
