-- A level's released k-grams: keys only (k, n-gram), sorted by n-gram, so spurious and real
-- k-grams are interleaved.
SELECT CAST($k AS INTEGER) AS k, ngram
FROM {schema}.{level}
ORDER BY ngram
