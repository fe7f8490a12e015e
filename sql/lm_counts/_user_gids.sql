-- Fragment: the CTEs occ, grams and user_ids(user_id, s) of the lm_counts counting (after the
-- CTE trigrams(user_id, i1, i2, i3) of bayes/_trigram_ids.sql, the words as model-vocabulary
-- ids with the markers): s holds every domain id (gid) of the user's counted n-gram
-- occurrences, with repeats and in no order. Included by lm_counts/weighted.sql (which counts,
-- clips and sums in the engine) and lm_counts/user_gid_lists.sql (whose lists the DuckDB engine's
-- process counts, clips and sums: dpngram.mechanisms.lm_counts.weighted_counts). weighted.sql
-- states the semantics and the parameters.
occ AS (
    SELECT t.user_id, t.i1, t.i2, t.i3
    FROM trigrams AS t
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
    -- each user's domain ids (with repeats, in no order) as ONE list: the counting and the
    -- clipping work inside the user's own row. Before, a GROUP BY (user_id, gid) over every pair
    -- did it; at 1M users that hash aggregate outgrew 4 GB and spilled 2.8-3.9 GB
    -- (docs/engines.md, "Scale").
    SELECT g.user_id, list(d.gid) AS s
    FROM grams AS g
    JOIN {schema}.{domain} AS d ON d.k = g.k
    GROUP BY g.user_id
)
