-- Step bayes on the DuckDB engine (docs/engines.md, "bayes: bounding each user's trigrams in the
-- process"): each user's list of matched trigram ids of V (one per occurrence, with repeats, in no
-- order), from the run's sentences {schema}.{source}(user_id, tids) through the same occurrences
-- and keys as bayes/private_user_counts.sql (fragments bayes/_word_ids.sql, bayes/_trigram_ids.sql,
-- bayes/_matched_keys.sql;
-- same parameters). The run's process clamps, bounds to W trigrams and sums them
-- (dpngram.mechanisms.bayes_user_counts.private_count_sums) to the same (c, N) as bayes/aggregate.sql over
-- bayes/private_user_counts.sql. PRIVATE (per-user data): the lists never leave the process.
-- The dictionary's id list (id_map, one row) must meet the sentences, not another table: DuckDB's
-- join-order optimizer may otherwise move that cross product onto a larger side and copy the
-- list onto every row of it (bayes at 200k users: out of memory at 4 GB). join_order is off, so
-- the joins run as written (the large side probes, the small side is built).
-- duckdb-set: disabled_optimizers = 'join_order'
WITH
-- include: bayes/_word_ids
,
-- include: bayes/_trigram_ids
,
-- include: bayes/_matched_keys
SELECT list(tid) AS tids
FROM matched
GROUP BY user_id
