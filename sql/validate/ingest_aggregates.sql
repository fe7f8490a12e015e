-- Validation (PRIVATE run schema): whole-table consistency of ingest, as 0/1 violation flags
-- (never counts of the private input). Every column must be 0.
WITH stats AS (
    SELECT
        max(CASE WHEN metric = 'rows_read' THEN value END)        AS rows_read,
        max(CASE WHEN metric = 'rows_loaded' THEN value END)      AS rows_loaded,
        max(CASE WHEN metric = 'rows_quarantined' THEN value END) AS rows_quarantined
    FROM {schema}.ingest_stats
),
counted AS (
    SELECT
        (SELECT count(*) FROM {schema}.raw_text)   AS loaded,
        (SELECT count(*) FROM {schema}.quarantine) AS quarantined
)
SELECT
    -- rows read = rows loaded + rows quarantined, and the stored counts match the tables
    CASE WHEN s.rows_read IS NULL
           OR s.rows_read <> c.loaded + c.quarantined
           OR s.rows_loaded <> c.loaded
           OR s.rows_quarantined <> c.quarantined
         THEN 1 ELSE 0 END AS read_identity_broken,
    -- every loaded document (hence every user) has at least one sentence
    CASE WHEN EXISTS (
            SELECT 1 FROM {schema}.raw_text AS r
            WHERE NOT EXISTS (SELECT 1 FROM {schema}.sentences AS x
                              WHERE x.user_id = r.user_id AND x.doc_id = r.doc_id))
         THEN 1 ELSE 0 END AS document_without_sentence,
    -- every sentence belongs to a loaded document of the same user
    CASE WHEN EXISTS (
            SELECT 1 FROM {schema}.sentences AS x
            WHERE NOT EXISTS (SELECT 1 FROM {schema}.raw_text AS r
                              WHERE r.user_id = x.user_id AND r.doc_id = x.doc_id))
         THEN 1 ELSE 0 END AS sentence_without_document,
    -- no sentence is an empty token list
    CASE WHEN EXISTS (SELECT 1 FROM {schema}.sentences WHERE array_length(tids) = 0)
         THEN 1 ELSE 0 END AS empty_sentence,
    -- no user id is null or blank
    CASE WHEN EXISTS (SELECT 1 FROM {schema}.sentences WHERE user_id IS NULL OR trim(user_id) = '')
         THEN 1 ELSE 0 END AS blank_user_id,
    -- the token dictionary numbers its distinct tokens 1..n (the stages look ids up by position:
    -- a gap or a repeat would give a sentence other tokens)
    CASE WHEN (SELECT count(*) <> count(DISTINCT token) OR count(*) <> count(DISTINCT tid)
                      OR min(tid) <> 1 OR max(tid) <> count(*)
               FROM {schema}.token_ids)
         THEN 1 ELSE 0 END AS token_dictionary_broken
FROM stats AS s CROSS JOIN counted AS c;
