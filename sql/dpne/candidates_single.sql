-- Level-k occurrences of VALID k-grams, single-side pruning V_k = S_(k-1) x S_1 (DPNE §3.1.1):
-- the (k-1)-gram at loc was released and the token at loc + k - 1 ($offset) is in S_1.
-- Key = left_gid * 2^32 + last_token_id.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT a.uid, a.loc, CAST(a.gid AS BIGINT) * 4294967296 + b.gid AS key
FROM {schema}.{previous} AS a
JOIN {schema}.{unigrams} AS b ON b.loc = a.loc + $offset
