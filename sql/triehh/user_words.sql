-- TrieHH local datasets D_u (Sun et al. 2024, §3): per user, each eligible word and how often the
-- user typed it. Eligible: not in the known vocabulary {known}(word) (OOV mode), 1..$max_length
-- characters (the word plus its end symbol fits in the trie's max depth), every character in the
-- public alphabet $alphabet (translate() deletes those characters; nothing may remain).
-- Plan: the sentences' token ids ({schema}.sentences.tids, ingest's integer ids: docs/engines.md,
-- "Integer token ids from ingest"), never their text: eligibility is decided once per distinct
-- token of the dictionary {schema}.token_ids, and each occurrence only probes the (small) table
-- of eligible ids. The same rows as checking every occurrence's text (an id is one token).
-- duckdb-set: disabled_optimizers = 'join_order'
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH eligible AS (
    SELECT d.tid, d.token AS word
    FROM {schema}.token_ids AS d
    LEFT JOIN {schema}.{known} AS k
        ON k.word = d.token
    WHERE k.word IS NULL
      AND length(d.token) BETWEEN 1 AND $max_length
      AND length(translate(d.token, $alphabet, '')) = 0
)
SELECT
    u.uidx,
    e.word,
    count(*) AS cnt
FROM (
    SELECT user_id, unnest(tids) AS tid
    FROM {schema}.sentences
) AS t
JOIN eligible AS e
    ON e.tid = t.tid
JOIN {schema}.{users} AS u
    ON u.user_id = t.user_id
GROUP BY u.uidx, e.word
