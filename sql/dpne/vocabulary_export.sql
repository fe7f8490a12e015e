-- released/vocabulary.parquet: every released word (token) and whether it seeds the k-gram levels
-- (kgram_seed: false for the words released by the public domain's threshold only; docs/dpne.md).
-- Keys and a post-processing of the noisy values only. Sorted by token.
SELECT v.item AS token,
       NOT EXISTS (SELECT 1 FROM {schema}.{public_only} AS p WHERE p.item = v.item) AS kgram_seed
FROM {schema}.{vocabulary} AS v
ORDER BY token
