-- released/kgrams.parquet: every level's keys, sorted by (k, n-gram) (post-processing, no spend).
SELECT CAST(k AS INTEGER) AS k, CAST(ngram AS VARCHAR) AS ngram
FROM read_parquet($paths)
ORDER BY k, ngram
