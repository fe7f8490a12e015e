-- S_k as a level table from released keys {released}(item, l, r): ids in key order, the first and
-- last token ids, and the n-gram text = text(left (k-1)-gram) + ' ' + last token.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT CAST(row_number() OVER (ORDER BY k.item) AS INTEGER) AS gid,
       k.item AS key,
       k.l,
       k.r,
       a.first_tid,
       b.last_tid,
       a.ngram || ' ' || t.ngram AS ngram
FROM {released} AS k
JOIN {schema}.{previous} AS a ON a.gid = k.l
JOIN {schema}.{right_level} AS b ON b.gid = k.r
JOIN {schema}.{unigrams} AS t ON t.gid = b.last_tid
