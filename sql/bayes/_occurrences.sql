-- Fragment: the CTEs padded, trigrams, occurrences shared by bayes/occurrences.sql (which stores
-- them) and lm_counts/weighted.sql (which counts them in the same statement: no 100M-row table
-- written at 1M users). Reads the source and vocabulary identifiers and the map_unk parameter;
-- bayes/occurrences.sql states the semantics.
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
),
occurrences AS (
    SELECT t.user_id,
           CASE WHEN t.w1 IS NULL THEN '<s>' WHEN $map_unk AND v1.token IS NULL THEN '<unk>' ELSE t.w1 END AS w1,
           CASE WHEN $map_unk AND v2.token IS NULL THEN '<unk>' ELSE t.w2 END AS w2,
           CASE WHEN t.w3 IS NULL THEN '</s>' WHEN $map_unk AND v3.token IS NULL THEN '<unk>' ELSE t.w3 END AS w3
    FROM trigrams AS t
    LEFT JOIN {schema}.{vocabulary} AS v1 ON v1.token = t.w1
    LEFT JOIN {schema}.{vocabulary} AS v2 ON v2.token = t.w2
    LEFT JOIN {schema}.{vocabulary} AS v3 ON v3.token = t.w3
)
