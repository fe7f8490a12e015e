-- Per-user bounded trigram counts from an occurrence table {schema}.{occurrences}(user_id, w1, w2,
-- w3) (bayes/occurrences.sql; public tuning's pseudo-users, bayes/pseudo_users.sql). Occurrences
-- outside V = {schema}.{space} are dropped; the bounding (clamp to C, at most W trigrams per user)
-- is the fragment bayes/_bounded_counts.sql, shared with bayes/private_user_counts.sql (the run's
-- private path, which reads the sentences directly). Output {target}(user_id, tid, user_count).
-- PRIVATE when the occurrences are.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH matched AS (
    SELECT o.user_id, s.tid
    FROM {schema}.{occurrences} AS o
    JOIN {schema}.{space} AS s
      ON o.w1 = s.w1 AND o.w2 = s.w2 AND o.w3 = s.w3
),
-- include: bayes/_sort_keys
,
-- include: bayes/_bounded_counts
