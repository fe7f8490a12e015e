-- Fragment: the CTEs id_map, padded(user_id, p) and trigrams(user_id, i1, i2, i3), read from the
-- sentences' token ids ({schema}.{source}(user_id, tids), ingest's integer ids; docs/engines.md,
-- "Integer token ids from ingest"), after a CTE word_ids(token, wid) of the including statement:
-- the word id each token of the text maps to (lm_counts: the model vocabulary's ids; bayes: V's
-- word ids, bayes/_word_ids.sql). id_map holds, at position t, the word id of input token t ($unk_id
-- for a token outside word_ids), built once from the dictionary {schema}.token_ids; each sentence's
-- ids are mapped by one list lookup per token and padded with $bos_id before and $eos_id after,
-- then one row per trigram unnests three slices of the padded list in lockstep, as
-- bayes/_trigrams.sql does with strings. The same (i1, i2, i3) as joining the three tokens of each
-- occurrence against word_ids by their text, without hashing a string per occurrence (~300M
-- occurrences at 1M users). A trigram whose i1 is $bos_id starts its sentence, one whose i3 is
-- $eos_id ends it.
id_map AS (
    SELECT list(CAST(coalesce(w.wid, $unk_id) AS BIGINT) ORDER BY d.tid) AS ids
    FROM {schema}.token_ids AS d
    LEFT JOIN (SELECT token, min(wid) AS wid FROM word_ids GROUP BY token) AS w ON w.token = d.token
),
padded AS (
    SELECT s.user_id,
           list_concat(
               [CAST($bos_id AS BIGINT)],
               list_transform(s.tids, lambda x: m.ids[x]),
               [CAST($eos_id AS BIGINT)]
           ) AS p
    FROM {schema}.{source} AS s
    CROSS JOIN id_map AS m
    WHERE s.user_id IS NOT NULL AND s.tids IS NOT NULL AND array_length(s.tids) > 0
),
trigrams AS (
    SELECT user_id,
           unnest(list_slice(p, 1, array_length(p) - 2)) AS i1,
           unnest(list_slice(p, 2, array_length(p) - 1)) AS i2,
           unnest(list_slice(p, 3, array_length(p))) AS i3
    FROM padded
)
