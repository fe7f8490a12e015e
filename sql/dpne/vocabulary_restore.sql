-- Rebuild the level-1 seed words from released/vocabulary.parquet (post-processing of a DP
-- output: the words with kgram_seed, stages/dpne.py::vocabulary_seeds), exposed as {released}(token).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT token AS item
FROM {released}
