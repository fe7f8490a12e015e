-- |V_k| exactly from the released S_(k-1) and S_1 only (post-processing of DP outputs):
-- sum over overlaps o of (#left grams with suffix o) * (#right grams with prefix o).
WITH left_counts AS (
    SELECT overlap, count(*) AS n FROM {schema}.{left_side} GROUP BY overlap
),
right_counts AS (
    SELECT overlap, count(*) AS n FROM {schema}.{right_side} GROUP BY overlap
)
SELECT coalesce(sum(CAST(a.n AS BIGINT) * CAST(b.n AS BIGINT)), 0) AS valid
FROM left_counts AS a
JOIN right_counts AS b ON a.overlap = b.overlap
