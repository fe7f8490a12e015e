-- Stage lm_counts (docs/lm.md, "Noisy n-gram counts"): per-user bounded n-gram counts over a
-- public domain, summed. PRIVATE (exact weighted sums): the result never leaves the process
-- except with Gaussian noise added by pipeline/lm_counts.py.
-- Input {source}(user_id, tokens), the run's sentences: their sentence-bounded trigram
-- occurrences are built inline by the fragment of sql/bayes/occurrences.sql (one <s> before and
-- one </s> after every sentence, tokens outside {vocabulary}, the model vocabulary, '<unk>' when
-- $map_unk). Every sentence's first row is (<s>, t1, t2 or </s>), so
-- the order-1 and order-2 occurrences are the last one / two tokens of every row plus, on first
-- rows, the leading <s> and (<s>, t1).
-- {domain}(gid, n, ngram) is public (public-corpus n-grams, released DP outputs).
-- Users whose keyed hash falls below $holdout_per_mille are left out: they are the disjoint
-- selection users of the mixture weight (parallel composition).
-- Each user's count vector x_u over the domain (all orders together) is scaled by
-- min(1, $clip / ||x_u||_2), so one user changes the summed vector by at most $clip in l2 norm.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
-- include: bayes/_occurrences
,
occ AS (
    SELECT user_id, w1, w2, w3
    FROM occurrences
    WHERE abs(hash(xor(hash(user_id), CAST($salt AS UBIGINT))) % 1000) >= $holdout_per_mille
),
grams AS (
    -- one scan: every occurrence row unnests its n-grams (n, ngram) as a list of structs (the
    -- six-way UNION ALL re-read the occurrences six times; at 1M users 28 s against 9 s)
    SELECT user_id,
           unnest(CASE WHEN w1 = '<s>' THEN [
               struct_pack(n := 3, ngram := concat_ws(' ', w1, w2, w3)),
               struct_pack(n := 2, ngram := concat_ws(' ', w2, w3)),
               struct_pack(n := 1, ngram := w3),
               struct_pack(n := 2, ngram := concat_ws(' ', w1, w2)),
               struct_pack(n := 1, ngram := w2),
               struct_pack(n := 1, ngram := w1)
           ] ELSE [
               struct_pack(n := 3, ngram := concat_ws(' ', w1, w2, w3)),
               struct_pack(n := 2, ngram := concat_ws(' ', w2, w3)),
               struct_pack(n := 1, ngram := w3)
           ] END) AS e
    FROM occ
),
user_ids AS (
    -- each user's domain ids as ONE sorted list: the counting and the clipping below work inside
    -- the user's own row. Before, a GROUP BY (user_id, gid) over every pair did it; at 1M users
    -- that hash aggregate outgrew 4 GB and spilled 2.8-3.9 GB (docs/engines.md, "Scale").
    SELECT g.user_id, list_sort(list(d.gid)) AS s
    FROM grams AS g
    JOIN {schema}.{domain} AS d ON d.n = g.e.n AND d.ngram = g.e.ngram
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
    -- (gid, c): each distinct id of the user and its count, the length of its run
    SELECT list_transform(
               generate_series(1, array_length(starts)),
               lambda j: struct_pack(
                   gid := s[starts[j]],
                   c := CAST(
                       CASE WHEN j < array_length(starts) THEN starts[least(j + 1, array_length(starts))]
                            ELSE array_length(s) + 1 END
                       - starts[j] AS DOUBLE)
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
