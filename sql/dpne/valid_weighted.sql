-- Exact variant (DPNE Alg. 1): every valid k-gram with its histogram weight, 0 when no user
-- holds it after contribution bounding. Sorted by key for reproducible seeded runs.
-- On SOTU-like corpora DuckDB's build_side_probe_side optimizer picks the larger side of the
-- joins to build on: SOTU's four calls took 1.34 s against 0.57 s with it off (a whole run with
-- the optimizer off, docs/engines.md, "SQL written once"). At 1M users the statement takes about
-- 0.5 s in all.
-- duckdb-set: disabled_optimizers = 'build_side_probe_side'
SELECT v.item, coalesce(h.weight, 0.0) AS weight
FROM (
    SELECT CAST(a.id AS BIGINT) * 4294967296 + b.id AS item
    FROM {schema}.{left_side} AS a
    JOIN {schema}.{right_side} AS b ON a.overlap = b.overlap
) AS v
LEFT JOIN {schema}.{histogram} AS h ON h.item = v.item
ORDER BY v.item
