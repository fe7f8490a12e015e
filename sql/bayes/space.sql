-- The trigram vocabulary V (issue 4): public trigrams plus the trigrams DPNE released in this run
-- ({released}(w1, w2, w3), a DP output), capped at $max_size by public count. Ties (and released
-- trigrams absent from the public corpus, public count 0) are ordered by released-first, then
-- lexicographically, so V depends on public data and DP outputs only.
-- Output {target}(tid, w1, w2, w3, public_count), tid = 1..|V| in that order.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH candidates AS (
    SELECT coalesce(p.w1, r.w1) AS w1,
           coalesce(p.w2, r.w2) AS w2,
           coalesce(p.w3, r.w3) AS w3,
           coalesce(p.public_count, 0) AS public_count,
           CASE WHEN r.w1 IS NULL THEN 0 ELSE 1 END AS released
    FROM {schema}.{public_counts} AS p
    FULL OUTER JOIN {schema}.{released} AS r
      ON p.w1 = r.w1 AND p.w2 = r.w2 AND p.w3 = r.w3
),
ranked AS (
    SELECT w1, w2, w3, public_count,
           row_number() OVER (ORDER BY public_count DESC, released DESC, w1, w2, w3) AS tid
    FROM candidates
)
SELECT CAST(tid AS INTEGER) AS tid, w1, w2, w3, CAST(public_count AS BIGINT) AS public_count
FROM ranked
WHERE tid <= $max_size
