-- TrieHH local datasets D_u (Sun et al. 2024, §3): per user, each eligible word and how often the
-- user typed it. Eligible: not in the known vocabulary {known}(word) (OOV mode), 1..$max_length
-- characters (the word plus its end symbol fits in the trie's max depth), every character in the
-- public alphabet $alphabet (translate() deletes those characters; nothing may remain).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT
    u.uidx,
    t.word,
    count(*) AS cnt
FROM (
    SELECT user_id, unnest(tokens) AS word
    FROM {schema}.sentences
) AS t
JOIN {schema}.{users} AS u
    ON u.user_id = t.user_id
LEFT JOIN {schema}.{known} AS k
    ON k.word = t.word
WHERE k.word IS NULL
  AND t.word IS NOT NULL
  AND length(t.word) BETWEEN 1 AND $max_length
  AND length(translate(t.word, $alphabet, '')) = 0
GROUP BY u.uidx, t.word
