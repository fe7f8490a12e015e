SELECT metric, value FROM {schema}.ingest_stats ORDER BY metric;
