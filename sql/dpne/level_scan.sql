-- A released level's structure (ids only; public: a function of the released S_k), for
-- EstimateValidKgrams (supplement Alg. 2).
SELECT gid, l, r, first_tid, last_tid
FROM {schema}.{level}
ORDER BY gid
