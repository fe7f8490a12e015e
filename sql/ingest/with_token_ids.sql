-- Replace a sentences table {schema}.{table} written with tokens only (the run's sentences in a
-- test, or another sentence relation of a test) and the token dictionary by registered frames that
-- hold them with their token ids (dpngram.engines.ingest.add_token_ids).
CREATE OR REPLACE TABLE {schema}.{table} AS
SELECT CAST(user_id AS VARCHAR) AS user_id,
       CAST(doc_id AS BIGINT) AS doc_id,
       CAST(sent_id AS INTEGER) AS sent_id,
       CAST(tokens AS VARCHAR[]) AS tokens,
       CAST(tids AS INTEGER[]) AS tids
FROM {sentence_rows};
CREATE OR REPLACE TABLE {schema}.token_ids AS
SELECT CAST(token AS VARCHAR) AS token, CAST(tid AS INTEGER) AS tid
FROM {token_rows};
