-- TrieHH population (Sun et al. 2024, Alg. 2 line 7): every user of the run gets a dense integer
-- index 0..N-1, so groups can be drawn as disjoint index sets. Users without any eligible word are
-- part of the population too (they report only padding).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT
    user_id,
    row_number() OVER (ORDER BY user_id) - 1 AS uidx
FROM (
    SELECT DISTINCT user_id
    FROM {schema}.sentences
    WHERE user_id IS NOT NULL
) AS population
