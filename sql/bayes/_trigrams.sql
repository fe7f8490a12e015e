-- Fragment: the CTEs padded(user_id, p) and trigrams(user_id, w1, w2, w3) shared by
-- bayes/occurrences.sql and lm_counts/weighted.sql: every sentence of {schema}.{source}(user_id,
-- tokens) padded with one NULL before and after (a token never is NULL), then one row per
-- trigram, its three positions unnested in lockstep from three slices of the padded list (no
-- window and no sort over every token). A NULL w1 / w3 is the sentence's start / end; the
-- including statement turns them into the markers. bayes/occurrences.sql states the semantics.
padded AS (
    SELECT user_id, list_concat([CAST(NULL AS VARCHAR)], tokens, [CAST(NULL AS VARCHAR)]) AS p
    FROM {schema}.{source}
    WHERE user_id IS NOT NULL AND tokens IS NOT NULL AND array_length(tokens) > 0
),
trigrams AS (
    SELECT user_id,
           unnest(list_slice(p, 1, array_length(p) - 2)) AS w1,
           unnest(list_slice(p, 2, array_length(p) - 1)) AS w2,
           unnest(list_slice(p, 3, array_length(p))) AS w3
    FROM padded
)
