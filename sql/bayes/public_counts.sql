-- Public trigram counts alpha (Ramadan et al. eq. 1) from public occurrences
-- {occurrences}(user_id, w1, w2, w3). Rows whose user_id (the public sentence number) is in
-- [$first, $last) are counted, so one public corpus can be split into tuning folds.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT w1, w2, w3, count(*) AS public_count
FROM {schema}.{occurrences}
WHERE CAST(user_id AS BIGINT) >= $first AND CAST(user_id AS BIGINT) < $last
GROUP BY w1, w2, w3
