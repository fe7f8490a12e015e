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
CREATE OR REPLACE TABLE {schema}.sentences (
    user_id  VARCHAR   NOT NULL,
    doc_id   BIGINT    NOT NULL,
    sent_id  INTEGER   NOT NULL, -- 0-based sentence index within the document
    tokens   VARCHAR[] NOT NULL, -- never empty; n-grams never cross a sentence
    tids     INTEGER[] NOT NULL  -- the tokens' ids in token_ids, position by position
);
-- The run's token dictionary (dpngram.text.token_ids): every distinct token of the input and its
-- dense id, in order of first appearance. PRIVATE: never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.token_ids (
    token    VARCHAR NOT NULL,
    tid      INTEGER NOT NULL
);
CREATE OR REPLACE TABLE {schema}.quarantine (
    source   VARCHAR NOT NULL,   -- input file (or file inside a text directory)
    line_no  BIGINT,             -- 1-based line/row where the record starts; NULL for whole files
    reason   VARCHAR NOT NULL,
    raw      VARCHAR             -- the offending record, truncated (private: never leaves the schema)
);
DROP TABLE IF EXISTS {schema}.ingest_stats;
