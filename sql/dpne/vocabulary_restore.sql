-- Rebuild the released S_1 items from released/vocabulary.parquet (post-processing of a DP
-- output), exposed as the view {released}(token).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT token AS item
FROM {released}
