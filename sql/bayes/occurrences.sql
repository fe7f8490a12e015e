-- Trigram occurrences of a sentence relation, sentence-bounded, with the KenLM markers
-- (Ramadan et al. §4.1: trigrams of the private and public data; one <s> before the first token,
-- one </s> after the last, so a sentence of n tokens has n trigrams: (<s>, w1, w2) ...
-- (w_(n-1), w_n, </s>); n = 1 gives (<s>, w1, </s>)).
-- Input {source}(user_id, tokens), one row per sentence, tokens a list (no NULL elements: the
-- ingest tokenizer never makes one); empty sentences give nothing.
-- The padding is NULL (a token never is) and becomes the marker at the end, so a text token that
-- reads '<s>' is treated like any other token.
-- Plan: the three positions of every trigram are three slices of the padded list, unnested in
-- lockstep (one row per trigram, no window and no sort over every token: at 1M users the
-- windowed plan took ~50 s and spilled), then each word is looked up in the vocabulary (three
-- hash joins against a small build side). Tokens not in {vocabulary}(token) become '<unk>' when
-- $map_unk is true (the vocabulary is the run's DP vocabulary, a released output); the markers
-- stay. Output {target}(user_id, w1, w2, w3), one row per occurrence. PRIVATE when the source is
-- private: stays in the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
-- include: bayes/_trigrams
,
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
SELECT user_id, w1, w2, w3
FROM occurrences
