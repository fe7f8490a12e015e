-- Level-k occurrences of VALID k-grams, both-side pruning (DPNE Alg. 1 "V_k <- (S_1 x S_(k-1)) n
-- (S_(k-1) x S_1)"; supplement Alg. 4 PruneInvalid). A k-gram starting at loc is valid iff the
-- (k-1)-grams starting at loc and loc+1 were both released, i.e. both positions survived level
-- k-1 (their tokens are all in S_1 by construction). Only surviving positions are extended, so
-- the cost follows the released sets. Key = left_gid * 2^32 + right_gid (unique per k-gram).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT a.uid, a.loc, CAST(a.gid AS BIGINT) * 4294967296 + b.gid AS key
FROM {schema}.{previous} AS a
JOIN {schema}.{previous} AS b ON b.loc = a.loc + 1
