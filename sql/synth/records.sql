-- Chen et al. (CCS 2012) Algorithm 1 line 1, at user level: one record per user, the user's
-- sentences in (doc_id, sent_id) order, each followed by the end symbol (item id 0), mapped to item
-- ids through {vocabulary}(token, item_id) (other tokens -> <unk>, item id 1), truncated to the
-- first $l_max items. Private table (exact items); it never leaves the run schema.
-- Plan: reads the sentences' token ids ({sentences}.tids, ingest's integer ids: docs/engines.md,
-- "Integer token ids from ingest"), never their text. item_map holds, at position t, the item id
-- of input token t, built once from the dictionary {schema}.token_ids. Only the items that can fall
-- within a user's first $l_max are built: a window over the user's SENTENCES (not tokens) gives
-- each sentence the number of items before it (its tokens plus its end symbol: length + 1 each),
-- sentences starting at or past $l_max are dropped and the others cut to the items left and
-- mapped by one list lookup per id; those items are unnested with their positions (in lockstep)
-- and one GROUP BY user_id orders each user's items and keeps the first $l_max. At the default
-- $l_max = 20 and ~100 tokens a user this maps a fifth of the tokens. No window over every token
-- (the row_number() plan took ~74 s at 1M users).
-- The dictionary's list (item_map, one row) must meet the head sentences, not be copied onto
-- another side by the join-order optimizer (docs/engines.md, "Integer token ids from ingest").
-- duckdb-set: disabled_optimizers = 'join_order'
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH item_map AS (
    SELECT list(CAST(coalesce(v.item_id, 1) AS INTEGER) ORDER BY d.tid) AS items
    FROM {schema}.token_ids AS d
    LEFT JOIN {schema}.{vocabulary} AS v ON v.token = d.token
),
numbered AS (
    SELECT s.user_id, s.doc_id, s.sent_id, s.tids, array_length(s.tids) AS n_tokens,
           coalesce(sum(array_length(s.tids) + 1) OVER (
               PARTITION BY s.user_id ORDER BY s.doc_id, s.sent_id
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
           ), 0) AS items_before
    FROM {schema}.{sentences} AS s
    WHERE array_length(s.tids) > 0
),
heads AS (
    -- the sentences that start within the first $l_max items, cut to the items left, as item ids
    SELECT h.user_id, h.doc_id, h.sent_id, h.n_tokens,
           list_transform(list_slice(h.tids, 1, $l_max - h.items_before), lambda x: m.items[x]) AS items
    FROM numbered AS h
    CROSS JOIN item_map AS m
    WHERE h.items_before < $l_max
),
words AS (
    SELECT user_id, doc_id, sent_id,
           unnest(items) AS item,
           unnest(generate_series(1, array_length(items))) AS pos
    FROM heads
),
stream AS (
    SELECT user_id, doc_id, sent_id, pos, item
    FROM words
    UNION ALL
    -- the end symbol after the sentence's last token (past $l_max when the sentence was cut: the
    -- final slice drops it then)
    SELECT user_id, doc_id, sent_id, n_tokens + 1 AS pos, 0 AS item
    FROM heads
)
SELECT user_id, list_slice(list(item ORDER BY doc_id, sent_id, pos), 1, $l_max) AS items
FROM stream
GROUP BY user_id;
