-- The new-words round's weighted DPSU histogram (docs/dpne.md, "New words"; GGK+20's weighted
-- policy with Delta = $per_user) over {schema}.{source}(user_id, item), one row per occurrence:
-- per user, the items outside {schema}.{excluded}, ranked by how often the user wrote them (ties
-- in the order of a salted hash, $salt secret per run), the $per_user first kept, each with weight
-- 1/sqrt(#kept): l2 norm 1 per user, and the kept set depends on the user's own rows only.
-- Exact private statistics: this table never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH user_counts AS (
    SELECT s.user_id, s.item, count(*) AS uses
    FROM {schema}.{source} AS s
    LEFT JOIN {schema}.{excluded} AS e ON s.item = e.item
    WHERE e.item IS NULL AND s.item IS NOT NULL AND s.user_id IS NOT NULL
    GROUP BY s.user_id, s.item
),
ranked AS (
    SELECT user_id, item,
           row_number() OVER (
               PARTITION BY user_id
               ORDER BY uses DESC, hash(xor(hash(item), CAST($salt AS UBIGINT))), item
           ) AS user_rank
    FROM user_counts
),
kept AS (
    SELECT user_id, item, count(*) OVER (PARTITION BY user_id) AS kept_count
    FROM ranked
    WHERE user_rank <= $per_user
)
SELECT item, sum(1.0 / sqrt(kept_count)) AS weight
FROM kept
GROUP BY item
