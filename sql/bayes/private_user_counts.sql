-- Per-user bounded trigram counts of the run's sentences {schema}.{source}(user_id, tids), with
-- integer user ids and token ids (bayes/uid_sentences.sql): the same table bayes/user_counts.sql makes from
-- bayes/occurrences.sql's occurrence table (same markers, same '<unk>' mapping, same bounding: the
-- fragment bayes/_bounded_counts.sql), without building that table. Every trigram occurrence
-- (fragment bayes/_trigram_ids.sql, from the token ids) becomes one BIGINT key from its words' ids in
-- {schema}.{words}(word, wid) (bayes/space_words.sql, the words of V), a * $word_shift^2 +
-- b * $word_shift + c, and is matched against V's keys: no string is built per occurrence (~100M
-- at 1M users) and the join hashes one integer instead of three strings (docs/engines.md,
-- "Scale"). Ids: the padding before / after a sentence is $bos_id / $eos_id (the ids of '<s>' /
-- '</s>' in V, 0 if V has none); a token maps through word_ids (bayes/_word_ids.sql): when $map_unk, a token of
-- the run's vocabulary {schema}.{vocabulary}(token) to its word id (0 if no trigram of V has it)
-- and any other token to $unk_id (the id of '<unk>', 0 if V has none); else every token to its
-- word id, 0 outside V's words. Id 0 is in no key of V, so such an occurrence matches nothing, as
-- its string form would not. Output {target}(user_id, tid, user_count). PRIVATE: stays in the run
-- schema.
-- The dictionary's id list (id_map, one row) must meet the sentences, not another table: DuckDB's
-- join-order optimizer may otherwise move that cross product onto a larger side and copy the
-- list onto every row of it (bayes at 200k users: out of memory at 4 GB). join_order is off, so
-- the joins run as written (the large side probes, the small side is built).
-- duckdb-set: disabled_optimizers = 'join_order'
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
-- include: bayes/_word_ids
,
-- include: bayes/_trigram_ids
,
-- include: bayes/_matched_keys
,
-- include: bayes/_sort_keys
,
-- include: bayes/_bounded_counts
