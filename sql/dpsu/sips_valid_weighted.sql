-- DP-SIPS round of a DPNE level, exact variant (docs/dpne.md, "DP-SIPS"): every valid k-gram NOT
-- released by an earlier round, with this round's histogram weight (0 when no user holds it in
-- this round). Every not-yet-released valid k-gram is thresholded alike. Sorted by key for
-- reproducible seeded runs.
SELECT v.item, coalesce(h.weight, 0.0) AS weight
FROM (
    SELECT CAST(a.id AS BIGINT) * 4294967296 + b.id AS item
    FROM {schema}.{left_side} AS a
    JOIN {schema}.{right_side} AS b ON a.overlap = b.overlap
) AS v
LEFT JOIN {schema}.{histogram} AS h ON h.item = v.item
WHERE NOT EXISTS (
    SELECT 1 FROM {schema}.{released} AS r WHERE r.item = v.item
)
ORDER BY v.item
