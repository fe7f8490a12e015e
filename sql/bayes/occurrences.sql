-- Trigram occurrences of a token relation, sentence-bounded, with the KenLM markers
-- (Ramadan et al. §4.1: trigrams of the private and public data; one <s> before the first token,
-- one </s> after the last, so a sentence of n tokens has n trigrams: (<s>, w1, w2) ...
-- (w_(n-1), w_n, </s>); n = 1 gives (<s>, w1, </s>)).
-- Input {source}(user_id, doc_id, sent_id, pos, token), pos 0-based and contiguous per sentence.
-- Tokens not in {vocabulary}(token) become '<unk>' when $map_unk is true (the vocabulary is the
-- run's DP vocabulary, a released output). Output {target}(user_id, w1, w2, w3), one row per
-- occurrence. PRIVATE when the source is private: stays in the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH mapped AS (
    SELECT t.user_id,
           t.doc_id,
           t.sent_id,
           t.pos + 1 AS pos,
           CASE WHEN $map_unk AND v.token IS NULL THEN '<unk>' ELSE t.token END AS token
    FROM {schema}.{source} AS t
    LEFT JOIN {schema}.{vocabulary} AS v ON v.token = t.token
    WHERE t.token IS NOT NULL AND t.user_id IS NOT NULL
),
bounds AS (
    SELECT user_id, doc_id, sent_id, max(pos) AS last_pos
    FROM mapped
    GROUP BY user_id, doc_id, sent_id
),
padded AS (
    SELECT user_id, doc_id, sent_id, pos, token FROM mapped
    UNION ALL
    SELECT user_id, doc_id, sent_id, 0 AS pos, '<s>' AS token FROM bounds
    UNION ALL
    SELECT user_id, doc_id, sent_id, last_pos + 1 AS pos, '</s>' AS token FROM bounds
),
windowed AS (
    SELECT user_id,
           lag(token, 2) OVER (PARTITION BY user_id, doc_id, sent_id ORDER BY pos) AS w1,
           lag(token, 1) OVER (PARTITION BY user_id, doc_id, sent_id ORDER BY pos) AS w2,
           token AS w3
    FROM padded
)
SELECT user_id, w1, w2, w3
FROM windowed
WHERE w1 IS NOT NULL
