-- NOT DIFFERENTIALLY PRIVATE. Ramadan et al. Alg. 1 "brute-force method": for every user n, the
-- exact ||mu_ps(D) - mu_ps(D_-n)||_2 / rho, and the maximum over the users actually present.
-- Calibrating noise to this maximum depends on the private data; it exists only for comparison
-- (RunConfig.bayes_calibration = 'brute-force-NOT-DP').
-- {stats}(tid, total_count, users, log_count, weight, centred) per trigram of V with users > 0;
-- $vocab_size = |V|, $mean_log = mean of log(1 + c) over V, $mean_clip = public clip L on that
-- mean, $centre = min($mean_log, $mean_clip), $weight_sq_total = sum of w_i^2 over V,
-- $slope = S / C.
WITH per_user AS (
    SELECT u.user_id, u.tid, u.user_count, s.total_count, s.users, s.log_count, s.weight, s.centred,
           s.log_count - ln(1 + s.total_count - u.user_count) AS log_drop,
           least(1.0, $slope * (s.users - 1)) AS weight_without
    FROM {schema}.{user_counts} AS u
    JOIN {stats} AS s ON s.tid = u.tid
),
per_user_mean AS (
    SELECT user_id, sum(log_drop) AS log_drop_sum, sum(weight * weight) AS weight_sq_in_set
    FROM per_user
    GROUP BY user_id
),
shifted AS (
    SELECT m.user_id,
           m.weight_sq_in_set,
           $centre - least($mean_log - m.log_drop_sum / $vocab_size, $mean_clip) AS centre_drop
    FROM per_user_mean AS m
),
inside AS (
    SELECT p.user_id,
           sum(power(p.weight * p.centred
                     - p.weight_without * ((p.log_count - p.log_drop) - ($centre - s.centre_drop)), 2)) AS sq
    FROM per_user AS p
    JOIN shifted AS s ON s.user_id = p.user_id
    GROUP BY p.user_id
)
SELECT max(sqrt(i.sq + s.centre_drop * s.centre_drop * ($weight_sq_total - s.weight_sq_in_set))) AS gamma
FROM inside AS i
JOIN shifted AS s ON s.user_id = i.user_id
