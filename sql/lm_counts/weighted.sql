-- Stage lm_counts (docs/lm.md, "Noisy n-gram counts"): per-user bounded n-gram counts over a
-- public domain, summed. PRIVATE (exact weighted sums): the result never leaves the process
-- except with Gaussian noise added by pipeline/lm_counts.py.
-- Input {source}(user_id, tokens), the run's sentences: their sentence-bounded trigram
-- occurrences are built inline by the fragment bayes/_trigrams.sql (one <s> before and one </s>
-- after every sentence), each word as its integer id in {vocabulary}(token, tid), the model
-- vocabulary, with the ids $bos_id, $eos_id for the markers and $unk_id for a token outside it
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
-- duckdb-set: disabled_optimizers = 'build_side_probe_side'
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
-- include: bayes/_trigrams
,
occ AS (
    SELECT t.user_id,
           CAST(CASE WHEN t.w1 IS NULL THEN $bos_id ELSE coalesce(v1.tid, $unk_id) END AS BIGINT) AS i1,
           CAST(coalesce(v2.tid, $unk_id) AS BIGINT) AS i2,
           CAST(CASE WHEN t.w3 IS NULL THEN $eos_id ELSE coalesce(v3.tid, $unk_id) END AS BIGINT) AS i3
    FROM trigrams AS t
    LEFT JOIN {schema}.{vocabulary} AS v1 ON v1.token = t.w1
    LEFT JOIN {schema}.{vocabulary} AS v2 ON v2.token = t.w2
    LEFT JOIN {schema}.{vocabulary} AS v3 ON v3.token = t.w3
    WHERE abs(hash(xor(hash(t.user_id), CAST($salt AS UBIGINT))) % 1000) >= $holdout_per_mille
),
grams AS (
    -- one scan: every occurrence row unnests the keys of its n-grams as one list (the six-way
    -- UNION ALL re-read the occurrences six times; at 1M users 28 s against 9 s)
    SELECT user_id,
           unnest(CASE WHEN i1 = $bos_id THEN [
               (i1 * $word_shift + i2) * $word_shift + i3,
               (i2 * $word_shift + i3) * $word_shift,
               i3 * $word_shift * $word_shift,
               (i1 * $word_shift + i2) * $word_shift,
               i2 * $word_shift * $word_shift,
               i1 * $word_shift * $word_shift
           ] ELSE [
               (i1 * $word_shift + i2) * $word_shift + i3,
               (i2 * $word_shift + i3) * $word_shift,
               i3 * $word_shift * $word_shift
           ] END) AS k
    FROM occ
),
user_ids AS (
    -- each user's domain ids as ONE sorted list: the counting and the clipping below work inside
    -- the user's own row. Before, a GROUP BY (user_id, gid) over every pair did it; at 1M users
    -- that hash aggregate outgrew 4 GB and spilled 2.8-3.9 GB (docs/engines.md, "Scale").
    SELECT g.user_id, list_sort(list(d.gid)) AS s
    FROM grams AS g
    JOIN {schema}.{domain} AS d ON d.k = g.k
    GROUP BY g.user_id
),
runs AS (
    -- the positions where a run of equal ids starts in the sorted list
    SELECT s,
           list_filter(
               generate_series(1, array_length(s)),
               lambda i: i = 1 OR s[i] <> s[greatest(i - 1, 1)]
           ) AS starts
    FROM user_ids
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
