-- Exact counts of the private input (operator console only: stored in ingest_stats, never released).
SELECT
    (SELECT count(*) FROM {schema}.raw_text)                 AS rows_loaded,
    (SELECT count(*) FROM {schema}.quarantine)               AS rows_quarantined,
    (SELECT count(DISTINCT user_id) FROM {schema}.sentences) AS users,
    (SELECT count(DISTINCT doc_id) FROM {schema}.sentences)  AS documents,
    (SELECT count(*) FROM {schema}.sentences)                AS sentences,
    (SELECT coalesce(sum(array_length(tids)), 0) FROM {schema}.sentences) AS tokens;
