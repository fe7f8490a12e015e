-- Private: exact input statistics for the operator. Written last; marks ingest as complete.
CREATE OR REPLACE TABLE {schema}.ingest_stats AS
SELECT CAST(metric AS VARCHAR) AS metric, CAST(value AS BIGINT) AS value
FROM {stats_batch};
