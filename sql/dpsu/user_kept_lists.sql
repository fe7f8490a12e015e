-- DP-SIPS with admission (docs/dpne.md, "Admission by the first round"): every round ranks a
-- user's items with the same salt, so every round's kept set is round 1's. This table holds that
-- set, computed once: one row per user with the at most $max_contribution items it keeps of its
-- DISTINCT items of {schema}.{source}(user_id, item) (dpsu/_user_items.sql, dpsu/_user_kept.sql,
-- the rule every DPSU histogram shares) and their number. Round 1 reads it through
-- dpsu/histogram_kept.sql, later rounds through dpsu/histogram_kept_admitted.sql, instead of
-- collecting and re-ranking every user's items per round. Private working table: it never
-- leaves the run schema.
-- The source can be level 2's candidate view (dpne/candidates_level2.sql: every sentence position
-- joined with S_1 twice). On SOTU-like corpora (12,800 users, long sentences), DuckDB's
-- build_side_probe_side optimizer then builds its hash tables on the 1.9M positions, each
-- carrying its sentence's token list, rather than on S_1: 4.8-5.2 s against 0.6-0.9 s for the
-- statement. At 1M users the time is the same within the host's noise (38.4 and 39.0 s against
-- 38.2 and 41.5 s, alternating; docs/engines.md).
-- duckdb-set: disabled_optimizers = 'build_side_probe_side'
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
-- include: dpsu/_user_items
-- include: dpsu/_user_kept
SELECT user_id, kept, kept_count
FROM user_kept
