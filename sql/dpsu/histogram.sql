-- DPSU weighted-Gaussian histogram (Gopi et al. 2020; DPNE supplement Alg. 5, lines 1-6).
-- Input {source}(user_id, item): any relation of items held by users (duplicates allowed).
-- Each user keeps at most $max_contribution of their DISTINCT items (sql/dpsu/_user_items.sql, _user_kept.sql: a
-- pseudo-random subset keyed by a secret per-run salt, depending only on the user's own items), so
-- the histogram's l2-sensitivity stays 1: each kept item gets weight 1/sqrt(|kept|).
-- The weights are exact private statistics: this table never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH
-- include: dpsu/_user_items
-- include: dpsu/_user_kept
,
-- include: dpsu/_kept_weights
