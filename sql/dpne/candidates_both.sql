-- Level-k occurrences of VALID k-grams, both-side pruning (DPNE Alg. 1 "V_k <- (S_1 x S_(k-1)) n
-- (S_(k-1) x S_1)"; supplement Alg. 4 PruneInvalid). A k-gram starting at loc is valid iff the
-- (k-1)-grams starting at loc and loc+1 were both released, i.e. both positions survived level
-- k-1 (their tokens are all in S_1 by construction). Only surviving positions are extended, so
-- the cost follows the released sets. Key = left_gid * 2^32 + right_gid (unique per k-gram).
-- The neighbour at loc + 1 is found with lead() over each user's positions in loc order rather
-- than a self-join on loc + 1: at 1M users the join's build side (every surviving position, ~100M
-- rows at level 2) spilled and cost half again as much CPU (docs/engines.md, "Scale").
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT uid, loc, CAST(gid AS BIGINT) * 4294967296 + next_gid AS key
FROM (
    SELECT uid,
           loc,
           gid,
           lead(gid) OVER (PARTITION BY uid ORDER BY loc) AS next_gid,
           lead(loc) OVER (PARTITION BY uid ORDER BY loc) AS next_loc
    FROM {schema}.{previous}
) AS neighbours
WHERE next_loc = loc + 1
