-- Stage lm_counts on the DuckDB engine (docs/lm.md, "Noisy n-gram counts"; docs/engines.md,
-- "lm_counts: counting each user's ids in the process"): each counting user's domain ids, one
-- list per user (with repeats, in no order), streamed to the run's process, which counts, clips
-- and sums them (dpngram.mechanisms.lm_counts.weighted_counts) to the same sums as
-- lm_counts/weighted.sql. PRIVATE (per-user data): the lists never leave the process; only the
-- sums, with Gaussian noise, are released. Parameters as in lm_counts/weighted.sql.
-- duckdb-set: disabled_optimizers = 'build_side_probe_side'
WITH
word_ids AS (
    SELECT token, tid AS wid FROM {schema}.{vocabulary}
),
-- include: bayes/_trigram_ids
,
-- include: lm_counts/_user_gids
SELECT s
FROM user_ids
