-- Fragment: the CTEs user_items, keyed, ranked shared by dpsu/histogram.sql (weighted policy) and
-- dpsu/policy_items.sql (policy Gaussian), so both keep exactly the same items per user.
-- Input {schema}.{source}(user_id, item). Each user's DISTINCT items are ranked by
-- hash(hash(item) XOR $salt), a pseudo-random order keyed by a secret per-run salt (DuckDB's
-- two-argument hash(item, salt) mixes the salt in too weakly: the kept subset then depends mostly
-- on the item, which tests/test_dpsu.py detects); a user keeps the items with
-- item_rank <= $max_contribution. The rule depends only on the user's own items, so a user's kept
-- set is unchanged by adding or removing other users. item_count: the user's distinct items.
user_items AS (
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
