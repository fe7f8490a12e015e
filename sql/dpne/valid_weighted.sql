-- Exact variant (DPNE Alg. 1): every valid k-gram with its histogram weight, 0 when no user
-- holds it after contribution bounding. Sorted by key for reproducible seeded runs.
SELECT v.item, coalesce(h.weight, 0.0) AS weight
FROM (
    SELECT CAST(a.id AS BIGINT) * 4294967296 + b.id AS item
    FROM {schema}.{left_side} AS a
    JOIN {schema}.{right_side} AS b ON a.overlap = b.overlap
) AS v
LEFT JOIN {schema}.{histogram} AS h ON h.item = v.item
ORDER BY v.item
