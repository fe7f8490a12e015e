-- Ingest: (re)create the run's private input tables. Re-running ingest starts from scratch, and
-- ingest_stats (written last) doubles as the "ingest finished" marker, so it is dropped first.
CREATE OR REPLACE TABLE {schema}.raw_text (
    user_id  VARCHAR NOT NULL,
    doc_id   BIGINT  NOT NULL,   -- unique per input record: line/record/row number, or file index
    -- the text as read (before normalisation). Stored uncompressed: the run reads only its row
    -- count and ids back (ingest/counts.sql, validate/ingest_aggregates.sql), and compressing
    -- ~480 MB of text at 1M users took ~3 s of ingest's ~40 s on 2 cores, for a warehouse file
    -- ~200 MB smaller (docs/engines.md, "Scale")
    text     VARCHAR NOT NULL USING COMPRESSION uncompressed
);
-- The sentences are stored as token ids only (docs/engines.md, "Integer token ids from ingest"):
-- DuckDB inserts, scans and groups integer lists for less than string lists, and the stages that
-- only count or join tokens read the ids. sentences (below) is a view that adds each sentence's
-- tokens back through the dictionary, for the stages that need the text.
CREATE OR REPLACE TABLE {schema}.sentence_ids (
    user_id  VARCHAR   NOT NULL,
    doc_id   BIGINT    NOT NULL,
    sent_id  INTEGER   NOT NULL, -- 0-based sentence index within the document
    tids     INTEGER[] NOT NULL  -- never empty; n-grams never cross a sentence
);
-- The run's token dictionary (dpngram.text.token_ids): every distinct token of the input and its
-- dense id 1..n, numbered batch by batch as tokens first appear. PRIVATE: never leaves the run
-- schema. The ids depend on the whole input, so nothing that must depend on one user's data only
-- (the kept-items rule) may hash them: it hashes the token's text.
CREATE OR REPLACE TABLE {schema}.token_ids (
    token    VARCHAR NOT NULL,
    tid      INTEGER NOT NULL
);
-- Every sentence with its tokens (position by position, the dictionary's text of each id) and ids.
-- One list lookup per token: decoding the ~11M tokens of 100k users' sentences took 0.4 s on two
-- cores, about what reading stored string lists costs.
CREATE OR REPLACE VIEW {schema}.sentences AS
SELECT s.user_id, s.doc_id, s.sent_id,
       list_transform(s.tids, lambda t: d.words[t]) AS tokens,
       s.tids
FROM {schema}.sentence_ids AS s
CROSS JOIN (SELECT list(token ORDER BY tid) AS words FROM {schema}.token_ids) AS d;
CREATE OR REPLACE TABLE {schema}.quarantine (
    source   VARCHAR NOT NULL,   -- input file (or file inside a text directory)
    line_no  BIGINT,             -- 1-based line/row where the record starts; NULL for whole files
    reason   VARCHAR NOT NULL,
    raw      VARCHAR             -- the offending record, truncated (private: never leaves the schema)
);
DROP TABLE IF EXISTS {schema}.ingest_stats;
