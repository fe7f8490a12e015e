-- Stage lm_counts (docs/lm.md, "Noisy n-gram counts"): per-user bounded n-gram counts over a
-- public domain, summed, in the engine (the Spark engine; the DuckDB engine streams the per-user
-- lists of lm_counts/user_gid_lists.sql to its process and sums them there, to the same sums). PRIVATE (exact weighted sums): the result never leaves the process
-- except with Gaussian noise added by pipeline/lm_counts.py.
-- Input {source}(user_id, tids), the run's sentences as token ids, and the run's dictionary
-- token_ids: their sentence-bounded trigram occurrences are built inline by the fragment
-- bayes/_trigram_ids.sql (one <s> before and one </s> after every sentence), each word as its
-- integer id in {vocabulary}(token, tid), the model vocabulary, with the ids $bos_id, $eos_id for the markers and $unk_id for a token outside it
-- (dpngram.mechanisms.lm_counts.counting_tables). Every sentence's first row is (<s>, t1, t2 or
-- </s>), so the order-1 and order-2 occurrences are the last one / two words of every row plus,
-- on first rows, the leading <s> and (<s>, t1).
-- {domain}(gid, k) is public (public-corpus n-grams, released DP outputs): k is the n-gram's key,
-- its word ids (a, b, c) left-aligned as a * $word_shift^2 + b * $word_shift + c (0 where it has
-- fewer words; ids start at 1, so the key also tells the order). Matching one integer instead of
-- an n-gram string: no string is built per occurrence (~300M at 1M users) and the join hashes a
-- BIGINT (docs/engines.md, "Scale").
-- Users whose keyed hash falls below $holdout_per_mille are left out: they are the disjoint
-- selection users of the mixture weight (parallel composition).
-- Each user's vector x_u over the domain (all orders together) holds c^$count_power for an n-gram
-- the user has c times (lm_count_power: 1 counts, 0.5 square roots, 0 presence) and is scaled by
-- min(1, $clip / ||x_u||_2), so one user changes the summed vector by at most $clip in l2 norm.
-- DuckDB estimates the unnested occurrences far below their size on a corpus of few, long
-- sentences and then builds its hash tables on them instead of on the vocabulary and the domain
-- (SOTU: 1.77M occurrences built, 2.9 s against 1.8 s; at 1M users the same plan either way).
-- The dictionary's id list (id_map, one row) must meet the sentences, not another table: DuckDB's
-- join-order optimizer may otherwise move that cross product onto a larger side and copy the
-- list onto every row of it (bayes at 200k users: out of memory at 4 GB). join_order is off, so
-- the joins run as written (the large side probes, the small side is built).
-- duckdb-set: disabled_optimizers = 'build_side_probe_side,join_order'
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
word_ids AS (
    SELECT token, tid AS wid FROM {schema}.{vocabulary}
),
-- include: bayes/_trigram_ids
,
-- include: lm_counts/_user_gids
,
sorted_ids AS (
    SELECT list_sort(s) AS s FROM user_ids
),
runs AS (
    -- the positions where a run of equal ids starts in the sorted list
    SELECT s,
           list_filter(
               generate_series(1, array_length(s)),
               lambda i: i = 1 OR s[i] <> s[greatest(i - 1, 1)]
           ) AS starts
    FROM sorted_ids
),
user_counts AS (
    -- (gid, c): each distinct id of the user and its count (the length of its run) to the power
    SELECT list_transform(
               generate_series(1, array_length(starts)),
               lambda j: struct_pack(
                   gid := s[starts[j]],
                   c := pow(CAST(
                       CASE WHEN j < array_length(starts) THEN starts[least(j + 1, array_length(starts))]
                            ELSE array_length(s) + 1 END
                       - starts[j] AS DOUBLE), $count_power)
               )
           ) AS counts
    FROM runs
),
scaled AS (
    -- min(1, clip / ||x_u||_2) for the user's count vector x_u
    SELECT counts, least(1.0, $clip / sqrt(list_sum(list_transform(counts, lambda e: e.c * e.c)))) AS scale
    FROM user_counts
),
entries AS (
    SELECT unnest(counts) AS e, scale
    FROM scaled
)
SELECT e.gid AS gid, sum(e.c * scale) AS weighted
FROM entries
GROUP BY e.gid
