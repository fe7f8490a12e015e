-- TrieHH population (Sun et al. 2024, Alg. 2 line 7): every user of the run gets a dense integer
-- index 0..N-1, so groups can be drawn as disjoint index sets. Users without any eligible word are
-- part of the population too (they report only padding). The numbering is the shared one
-- ({numbering}(user_id, uid) from user_numbering.sql, uid = 1..N), shifted to start at 0.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT user_id, uid - 1 AS uidx
FROM {schema}.{numbering}
