-- c_i (sum of bounded counts) and N_i (users holding trigram i) per trigram of V
-- (Ramadan et al. Alg. 1 lines 3-4). Exact private statistics: read into memory by
-- pipeline/bayes.py (one row per trigram of V, never per user) and never released.
SELECT tid, sum(user_count) AS total_count, count(*) AS users
FROM {schema}.{user_counts}
GROUP BY tid
ORDER BY tid
