-- Fragment: the CTEs numbered(uid, tokens, sentence_no) and positions(uid, sentence_no, tokens,
-- pos) shared by dpne/occurrences_level1.sql and dpne/candidates_level2.sql: every sentence of
-- {schema}.sentences with its user's integer id from {users} (numbering/users.sql) and a
-- globally unique sentence_no without a global window (the user's first_sentence offset plus the
-- sentence's rank among the user's own sentences, in (doc_id, sent_id) order), then one row per
-- token position pos = 1..len; tokens holds the sentence's token ids (sentences.tids, joined to S_1 by
-- its input_tid). The including statement turns (sentence_no, pos) into
-- loc = sentence_no * $sentence_stride + pos and drops positions at or beyond the stride.
numbered AS (
    SELECT u.uid,
           s.tids AS tokens,
           CAST(u.first_sentence + row_number() OVER (PARTITION BY s.user_id ORDER BY s.doc_id, s.sent_id)
                AS BIGINT) AS sentence_no
    FROM {schema}.sentences AS s
    JOIN {schema}.{users} AS u ON u.user_id = s.user_id
),
positions AS (
    SELECT uid, sentence_no, tokens, unnest(generate_series(1, array_length(tokens))) AS pos
    FROM numbered
)
