-- Stage lm_counts on the DuckDB engine (docs/lm.md, "Noisy n-gram counts"; docs/engines.md,
-- "lm_counts: counting each user's ids in the process"): each counting user's domain ids, one
-- list per user (with repeats, in no order), streamed to the run's process, which counts, clips
-- and sums them (dpngram.mechanisms.lm_counts.weighted_counts) to the same sums as
-- lm_counts/weighted.sql. PRIVATE (per-user data): the lists never leave the process; only the
-- sums, with Gaussian noise, are released. Parameters as in lm_counts/weighted.sql.
-- The dictionary's id list (id_map, one row) must meet the sentences, not another table: DuckDB's
-- join-order optimizer may otherwise move that cross product onto a larger side and copy the
-- list onto every row of it (bayes at 200k users: out of memory at 4 GB). join_order is off, so
-- the joins run as written (the large side probes, the small side is built).
-- duckdb-set: disabled_optimizers = 'build_side_probe_side,join_order'
WITH
word_ids AS (
    SELECT token, tid AS wid FROM {schema}.{vocabulary}
),
-- include: bayes/_trigram_ids
,
-- include: lm_counts/_user_gids
SELECT s
FROM user_ids
