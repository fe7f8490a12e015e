-- |S_k| (a released, DP count).
SELECT count(*) FROM {schema}.{level}
