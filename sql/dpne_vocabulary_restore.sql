-- Rebuild the released S_1 items from released/vocabulary.parquet (post-processing of a DP output).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT token AS item
FROM read_parquet($path)
