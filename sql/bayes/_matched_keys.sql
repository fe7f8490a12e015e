-- Fragment: the CTEs token_ids, space_keys, occurrence_keys and matched(user_id, tid) of
-- bayes/private_user_counts.sql (which states their semantics and parameters), after the CTE
-- trigrams of bayes/_trigrams.sql: one row per occurrence of a trigram of V, matched by integer
-- keys. Shared with bayes/user_tid_lists.sql (the DuckDB engine's in-process bounding).
token_ids AS (
    SELECT v.token, coalesce(w.wid, 0) AS wid
    FROM {schema}.{vocabulary} AS v
    LEFT JOIN {schema}.{words} AS w ON w.word = v.token
    WHERE $map_unk
    UNION ALL
    SELECT word AS token, wid
    FROM {schema}.{words}
    WHERE NOT $map_unk
),
space_keys AS (
    SELECT s.tid, (a.wid * $word_shift + b.wid) * $word_shift + c.wid AS k
    FROM {schema}.{space} AS s
    JOIN {schema}.{words} AS a ON a.word = s.w1
    JOIN {schema}.{words} AS b ON b.word = s.w2
    JOIN {schema}.{words} AS c ON c.word = s.w3
),
occurrence_keys AS (
    SELECT t.user_id,
           (CAST(CASE WHEN t.w1 IS NULL THEN $bos_id ELSE coalesce(m1.wid, $unk_id) END AS BIGINT) * $word_shift
            + coalesce(m2.wid, $unk_id)) * $word_shift
           + CASE WHEN t.w3 IS NULL THEN $eos_id ELSE coalesce(m3.wid, $unk_id) END AS k
    FROM trigrams AS t
    LEFT JOIN token_ids AS m1 ON m1.token = t.w1
    LEFT JOIN token_ids AS m2 ON m2.token = t.w2
    LEFT JOIN token_ids AS m3 ON m3.token = t.w3
),
matched AS (
    SELECT o.user_id, s.tid
    FROM occurrence_keys AS o
    JOIN space_keys AS s ON s.k = o.k
)
