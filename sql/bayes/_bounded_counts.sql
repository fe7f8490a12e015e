-- Fragment: the last steps of the per-user bounded trigram counts (Ramadan et al. Alg. 1 lines
-- 1-2, plus the per-user cap W of §3.1/§4.3), after the CTEs matched(user_id, tid): one row per
-- occurrence of a trigram tid of V, and sort_keys (bayes/_sort_keys.sql). Each user's count of a trigram is clamped to $clip_count (C);
-- each user keeps at most $max_trigrams (W) distinct trigrams: those with the smallest
-- hash(hash(w1 w2 w3) XOR $salt) for a secret per-run salt (the same keyed-hash idiom as
-- sql/dpsu/_user_kept.sql), keyed by the trigram itself so the choice does not depend on V's ids
-- (ties by tid). The kept set depends only on the user's own data and the salt, so adding or
-- removing another user never changes it: the sensitivity analysis in docs/bayes_sensitivity.md
-- relies on exactly this. Ends bayes/user_counts.sql and bayes/private_user_counts.sql, so both
-- keep exactly the same trigrams. Output (user_id, tid, user_count), 1 <= user_count <= C.
counted AS (
    SELECT user_id, tid, count(*) AS raw_count
    FROM matched
    GROUP BY user_id, tid
),
ranked AS (
    SELECT c.user_id, c.tid, c.raw_count,
           row_number() OVER (PARTITION BY c.user_id ORDER BY k.sort_key, c.tid) AS item_rank
    FROM counted AS c
    JOIN sort_keys AS k ON k.tid = c.tid
)
SELECT user_id, tid, CAST(least(raw_count, $clip_count) AS BIGINT) AS user_count
FROM ranked
WHERE item_rank <= $max_trigrams
