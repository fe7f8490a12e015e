-- S_1 as a level table (DPNE Alg. 1 line 1): token ids assigned in token order, so the ids are a
-- function of the released vocabulary only. The empty 0-gram has id 0, so l = r = 0 here: with
-- both-side pruning a 2-gram's two "(k-1)-grams overlap" in the empty gram, V_2 = S_1 x S_1.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT CAST(row_number() OVER (ORDER BY item) AS INTEGER) AS gid,
       CAST(0 AS BIGINT) AS key,
       0 AS l,
       0 AS r,
       CAST(row_number() OVER (ORDER BY item) AS INTEGER) AS first_tid,
       CAST(row_number() OVER (ORDER BY item) AS INTEGER) AS last_tid,
       item AS ngram
FROM {schema}.{released}
