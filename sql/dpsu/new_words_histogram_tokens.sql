-- dpsu/new_words_histogram.sql for the vocabulary's new-words round, read from the sentences'
-- token ids (docs/engines.md, "Integer token ids from ingest"): the same histogram, with each
-- user's uses counted per id (integers grouped instead of strings). The ids only say which
-- dictionary entry ({schema}.token_ids) a token is; the ranking reads each token's text hash
-- hash(token) and its text from the dictionary, so the order (uses, salted hash of the text, the
-- text) and the kept set are the plain statement's, and depend on the user's own rows only
-- (ids are numbered over the whole input: nothing here orders or hashes by them).
-- Exact private statistics: this table never leaves the run schema.
-- The dictionary's lists (one row) must meet the counted (user, id) rows, not the excluded words:
-- join_order is off so that DuckDB does not move that cross product onto another side and copy
-- the lists onto every row of it; the joins run as written.
-- duckdb-set: disabled_optimizers = 'join_order'
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH dictionary AS (
    SELECT list(token ORDER BY tid) AS words, list(hash(token) ORDER BY tid) AS codes
    FROM {schema}.token_ids
),
excluded_ids AS (
    SELECT d.tid
    FROM {schema}.token_ids AS d
    JOIN {schema}.{excluded} AS e ON e.item = d.token
),
occurrences AS (
    SELECT user_id, unnest(tids) AS tid
    FROM {schema}.sentences
    WHERE user_id IS NOT NULL
),
user_counts AS (
    SELECT o.user_id, o.tid, count(*) AS uses
    FROM occurrences AS o
    LEFT JOIN excluded_ids AS e ON o.tid = e.tid
    WHERE e.tid IS NULL AND o.tid IS NOT NULL
    GROUP BY o.user_id, o.tid
),
keyed AS (
    -- the sort keys first, so that the window below buffers these columns, not the dictionary
    -- lists (which it would otherwise carry on every row)
    SELECT u.user_id, u.tid, u.uses,
           hash(xor(d.codes[u.tid], CAST($salt AS UBIGINT))) AS text_key,
           d.words[u.tid] AS word
    FROM user_counts AS u
    CROSS JOIN dictionary AS d
),
ranked AS (
    SELECT user_id, tid,
           row_number() OVER (PARTITION BY user_id ORDER BY uses DESC, text_key, word) AS user_rank
    FROM keyed
),
kept AS (
    SELECT user_id, tid, count(*) OVER (PARTITION BY user_id) AS kept_count
    FROM ranked
    WHERE user_rank <= $per_user
),
weights AS (
    SELECT tid, sum(1.0 / sqrt(kept_count)) AS weight
    FROM kept
    GROUP BY tid
)
SELECT d.words[w.tid] AS item, w.weight
FROM weights AS w
CROSS JOIN dictionary AS d
