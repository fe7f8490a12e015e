-- The words of V = {schema}.{space}(tid, w1, w2, w3, ...) (markers and '<unk>' included, as they
-- appear there), each with an integer id 1, 2, ... in word order: the digits of V's integer
-- trigram keys (bayes/private_user_counts.sql). Public: built from V, which is public data and DP
-- outputs only.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT word, CAST(row_number() OVER (ORDER BY word) AS BIGINT) AS wid
FROM (
    SELECT w1 AS word FROM {schema}.{space}
    UNION
    SELECT w2 AS word FROM {schema}.{space}
    UNION
    SELECT w3 AS word FROM {schema}.{space}
) AS words
