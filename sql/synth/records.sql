-- Chen et al. (CCS 2012) Algorithm 1 line 1, at user level: one record per user, the user's
-- sentences in (doc_id, sent_id) order, each followed by the end symbol (item id 0), mapped to item
-- ids through {vocabulary}(token, item_id) (other tokens -> <unk>, item id 1), truncated to the
-- first $l_max items. Private table (exact items); it never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH stream AS (
    SELECT t.user_id, t.doc_id, t.sent_id, t.pos, coalesce(v.item_id, 1) AS item
    FROM {schema}.{tokens} AS t
    LEFT JOIN {schema}.{vocabulary} AS v ON v.token = t.token
    UNION ALL
    SELECT s.user_id, s.doc_id, s.sent_id, array_length(s.tokens) AS pos, 0 AS item
    FROM {schema}.{sentences} AS s
    WHERE array_length(s.tokens) > 0
),
numbered AS (
    SELECT user_id, item,
           row_number() OVER (PARTITION BY user_id ORDER BY doc_id, sent_id, pos) AS rn
    FROM stream
)
SELECT user_id, list(item ORDER BY rn) AS items
FROM numbered
WHERE rn <= $l_max
GROUP BY user_id;
