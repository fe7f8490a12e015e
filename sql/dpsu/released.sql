-- The items that crossed the DPSU threshold (keys only, no weights).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT item
FROM {released}
