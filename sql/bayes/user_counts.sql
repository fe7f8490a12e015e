-- Per-user bounded trigram counts (Ramadan et al. Alg. 1 lines 1-2, plus the per-user cap W of
-- §3.1/§4.3). Occurrences outside V are dropped; each user's count of a trigram is clamped to
-- $clip_count (C); each user keeps at most $max_trigrams (W) distinct trigrams: those with the
-- smallest hash(hash(w1 w2 w3) XOR $salt) for a secret per-run salt (the same keyed-hash idiom as
-- sql/dpsu_histogram.sql), keyed by the trigram itself so the choice does not depend on V's ids. The kept set depends only on the user's own data and the salt, so
-- adding or removing another user never changes it: the sensitivity analysis in
-- docs/bayes_sensitivity.md relies on exactly this.
-- Output {target}(user_id, tid, user_count) with 1 <= user_count <= C. PRIVATE.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH counted AS (
    SELECT o.user_id, s.tid, s.w1, s.w2, s.w3, count(*) AS raw_count
    FROM {schema}.{occurrences} AS o
    JOIN {schema}.{space} AS s
      ON o.w1 = s.w1 AND o.w2 = s.w2 AND o.w3 = s.w3
    GROUP BY o.user_id, s.tid, s.w1, s.w2, s.w3
),
keyed AS (
    SELECT user_id, tid, raw_count,
           hash(xor(hash(concat_ws(' ', w1, w2, w3)), CAST($salt AS UBIGINT))) AS sort_key
    FROM counted
),
ranked AS (
    SELECT user_id, tid, raw_count,
           row_number() OVER (PARTITION BY user_id ORDER BY sort_key, tid) AS item_rank
    FROM keyed
)
SELECT user_id, tid, CAST(least(raw_count, $clip_count) AS BIGINT) AS user_count
FROM ranked
WHERE item_rank <= $max_trigrams
