-- Fragment: the CTE word_ids(token, wid) of bayes/private_user_counts.sql and
-- bayes/user_tid_lists.sql (read by bayes/_trigram_ids.sql): when $map_unk, each token of the run's
-- vocabulary {schema}.{vocabulary}(token) with its word id in {schema}.{words}(word, wid) (0 if no
-- trigram of V has it; every other token becomes $unk_id); else every word of V with its id
-- (every other token becomes $unk_id, which is 0 then).
word_ids AS (
    SELECT v.token, coalesce(w.wid, 0) AS wid
    FROM {schema}.{vocabulary} AS v
    LEFT JOIN {schema}.{words} AS w ON w.word = v.token
    WHERE $map_unk
    UNION ALL
    SELECT word AS token, wid
    FROM {schema}.{words}
    WHERE NOT $map_unk
)
