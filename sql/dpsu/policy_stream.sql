-- The policy input in visiting order, one row per user: users by their salted order hash (ties
-- by id), each with the list of its kept items' dense ids (a set: the update does not depend on
-- the items' order). Sorting users, not (user, item) pairs, keeps the sort small.
-- The join to the dense ids is MATERIALIZED before the grouping: DuckDB 2 otherwise runs the
-- join inside the list aggregation's pipeline, about 4× slower with a large support (200,000
-- users, level 2, 1.5M items: 7.5 s against 2 s, profiled; end to end: docs/dpne.md "Speed").
-- Spark has no MATERIALIZED CTEs: the Spark engine drops the keyword (same result).
WITH with_ids AS MATERIALIZED (
    SELECT p.user_order, p.user_id, i.iid
    FROM (SELECT user_order, user_id, unnest(kept) AS item FROM {schema}.{pairs}) AS p
    JOIN {schema}.{item_ids} AS i ON p.item = i.item
)
SELECT list(iid) AS iids
FROM with_ids
GROUP BY user_order, user_id
ORDER BY user_order, user_id
