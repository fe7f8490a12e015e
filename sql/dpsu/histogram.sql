-- DPSU weighted-Gaussian histogram (Gopi et al. 2020; DPNE supplement Alg. 5, lines 1-6).
-- Input {source}(user_id, item): any relation of items held by users (duplicates allowed).
-- Each user keeps at most $max_contribution of their DISTINCT items: the ones with the smallest
-- hash(hash(item) XOR $salt), a pseudo-random subset keyed by a secret per-run salt (DuckDB's
-- two-argument hash(item, salt) mixes the salt in too weakly: the kept subset then depends mostly on
-- the item, which tests/test_dpsu.py detects). The rule depends only
-- on the user's own items, so a user's kept set U_i is unchanged by adding/removing other users
-- and the histogram's l2-sensitivity stays 1: each kept item gets weight 1/sqrt(|U_i|).
-- The weights are exact private statistics: this table never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH user_items AS (
    SELECT DISTINCT user_id, item
    FROM {schema}.{source}
    WHERE item IS NOT NULL AND user_id IS NOT NULL
),
keyed AS (
    SELECT user_id, item, hash(xor(hash(item), CAST($salt AS UBIGINT))) AS sort_key
    FROM user_items
),
ranked AS (
    SELECT user_id,
           item,
           row_number() OVER (PARTITION BY user_id ORDER BY sort_key) AS item_rank,
           count(*) OVER (PARTITION BY user_id) AS item_count
    FROM keyed
)
SELECT item,
       sum(1.0 / sqrt(CAST(least(item_count, $max_contribution) AS DOUBLE))) AS weight
FROM ranked
WHERE item_rank <= $max_contribution
GROUP BY item
