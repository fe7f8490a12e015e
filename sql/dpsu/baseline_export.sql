-- Released baseline n-grams as (k, space-joined n-gram), keys only, sorted by (k, ngram).
SELECT CAST(array_length(item) AS INTEGER) AS k, array_to_string(item, ' ') AS ngram
FROM {schema}.{released}
ORDER BY k, ngram
