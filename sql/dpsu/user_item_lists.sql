-- DPSU input as per-user lists (vocabulary, DP-SIPS; docs/dpne.md, "DP-SIPS"): one row per user with
-- its DISTINCT items of {schema}.{source}(user_id, item), built once and read by every round
-- (dpsu/histogram_lists.sql, dpsu/histogram_lists_remaining.sql) instead of one GROUP BY over every
-- token occurrence per round. The same lists as the CTE of dpsu/_user_items.sql.
-- Private working table: it never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT user_id, list_distinct(list(item)) AS items
FROM {schema}.{source}
WHERE item IS NOT NULL AND user_id IS NOT NULL
GROUP BY user_id
