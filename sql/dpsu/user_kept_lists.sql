-- DP-SIPS with admission (docs/dpne.md, "Admission by the first round"): every round ranks a
-- user's items with the same salt, so every round's kept set is round 1's. This table holds that
-- set, computed once: one row per user with the at most $max_contribution items it keeps of its
-- DISTINCT items of {schema}.{source}(user_id, item) (dpsu/_user_items.sql, dpsu/_user_kept.sql,
-- the rule every DPSU histogram shares) and their number. Round 1 reads it through
-- dpsu/histogram_kept.sql, later rounds through dpsu/histogram_kept_admitted.sql, instead of
-- collecting and re-ranking every user's items per round. Private working table: it never
-- leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
-- include: dpsu/_user_items
-- include: dpsu/_user_kept
SELECT user_id, kept, kept_count
FROM user_kept
