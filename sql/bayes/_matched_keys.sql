-- Fragment: the CTEs space_keys, occurrence_keys and matched(user_id, tid) of
-- bayes/private_user_counts.sql (which states their semantics and parameters), after the CTE
-- trigrams(user_id, i1, i2, i3) of bayes/_trigram_ids.sql (the words as V's word ids, with the
-- markers): one row per occurrence of a trigram of V, matched by integer keys. Shared with
-- bayes/user_tid_lists.sql (the DuckDB engine's in-process bounding).
space_keys AS (
    SELECT s.tid, (a.wid * $word_shift + b.wid) * $word_shift + c.wid AS k
    FROM {schema}.{space} AS s
    JOIN {schema}.{words} AS a ON a.word = s.w1
    JOIN {schema}.{words} AS b ON b.word = s.w2
    JOIN {schema}.{words} AS c ON c.word = s.w3
),
occurrence_keys AS (
    SELECT t.user_id, (t.i1 * $word_shift + t.i2) * $word_shift + t.i3 AS k
    FROM trigrams AS t
),
matched AS (
    SELECT o.user_id, s.tid
    FROM occurrence_keys AS o
    JOIN space_keys AS s ON s.k = o.k
)
