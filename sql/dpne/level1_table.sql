-- S_1 as a level table (DPNE Alg. 1 line 1): token ids assigned in token order, so the ids are a
-- function of the released vocabulary only. The empty 0-gram has id 0, so l = r = 0 here: with
-- both-side pruning a 2-gram's two "(k-1)-grams overlap" in the empty gram, V_2 = S_1 x S_1.
-- input_tid: the word's id in the run's token dictionary {schema}.token_ids (ingest), which the
-- sentences hold (sentences.tids), so the level-1 and level-2 positions join S_1 by an integer;
-- NULL for a released word the input never holds (a public one: it occurs nowhere).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT CAST(row_number() OVER (ORDER BY r.item) AS INTEGER) AS gid,
       CAST(0 AS BIGINT) AS key,
       0 AS l,
       0 AS r,
       CAST(row_number() OVER (ORDER BY r.item) AS INTEGER) AS first_tid,
       CAST(row_number() OVER (ORDER BY r.item) AS INTEGER) AS last_tid,
       r.item AS ngram,
       d.tid AS input_tid
FROM {schema}.{released} AS r
LEFT JOIN {schema}.token_ids AS d ON d.token = r.item
