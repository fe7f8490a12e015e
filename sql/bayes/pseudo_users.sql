-- Public tuning (pipeline/bayes.py tune_on_public): the pseudo-private fold of the PUBLIC corpus,
-- sentences numbered >= $first, grouped into pseudo-users of $sentences_per_user consecutive
-- sentences. Public data only.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT CAST(floor((CAST(user_id AS BIGINT) - $first) / $sentences_per_user) AS BIGINT) AS user_id,
       w1, w2, w3
FROM {schema}.{occurrences}
WHERE CAST(user_id AS BIGINT) >= $first
