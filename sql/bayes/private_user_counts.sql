-- Per-user bounded trigram counts of the run's sentences {schema}.{source}(user_id, tokens), with
-- integer user ids (bayes/uid_sentences.sql): the same table bayes/user_counts.sql makes from
-- bayes/occurrences.sql's occurrence table (same markers, same '<unk>' mapping, same bounding: the
-- fragment bayes/_bounded_counts.sql), without building that table. Every trigram occurrence
-- (fragment bayes/_trigrams.sql) becomes one BIGINT key from its words' ids in
-- {schema}.{words}(word, wid) (bayes/space_words.sql, the words of V), a * $word_shift^2 +
-- b * $word_shift + c, and is matched against V's keys: no string is built per occurrence (~100M
-- at 1M users) and the join hashes one integer instead of three strings (docs/engines.md,
-- "Scale"). Ids: the padding before / after a sentence is $bos_id / $eos_id (the ids of '<s>' /
-- '</s>' in V, 0 if V has none); a token maps through token_ids below: when $map_unk, a token of
-- the run's vocabulary {schema}.{vocabulary}(token) to its word id (0 if no trigram of V has it)
-- and any other token to $unk_id (the id of '<unk>', 0 if V has none); else every token to its
-- word id, 0 outside V's words. Id 0 is in no key of V, so such an occurrence matches nothing, as
-- its string form would not. Output {target}(user_id, tid, user_count). PRIVATE: stays in the run
-- schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
-- include: bayes/_trigrams
,
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
),
-- include: bayes/_bounded_counts
