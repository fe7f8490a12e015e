-- Validation of a released DPSU baseline table (public data; columns k, ngram with k = 1..T):
-- whole-table violation counts, each must be 0. No downward closure: baselines release each
-- length independently (DPNE §3.1.2).
SELECT
    (SELECT count(*) FROM {source} WHERE ngram IS NULL OR k IS NULL)                AS null_values,
    (SELECT count(*) - count(DISTINCT ngram) FROM {source} WHERE ngram IS NOT NULL) AS duplicate_ngrams,
    (SELECT count(*) FROM {source}
      WHERE ngram IS NOT NULL
        AND (length(ngram) - length(replace(ngram, ' ', '')) + 1 <> k
             OR length(ngram) = 0 OR ngram <> trim(ngram) OR strpos(ngram, '  ') > 0)) AS wrong_token_count;
