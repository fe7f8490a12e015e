-- dpsu/user_kept_lists_coded.sql for the vocabulary, read from the sentences' token ids: the same
-- kept lists, bit for bit, without hashing a string per token occurrence. Each user's distinct ids
-- (integers, grouped for less than strings) become the codes hash(token) of their tokens through
-- the dictionary {schema}.token_ids (one hash per distinct token, looked up by id), and the coded
-- rule (dpsu/_user_kept_coded.sql) picks the kept codes. The ids only select which dictionary
-- entry to read: a user's codes, and so its kept set, are functions of its own tokens' text.
-- Used only when the codes are one-to-one (dpsu/item_codes_tokens.sql, item_codes_distinct.sql),
-- as the list version. Private working table: it never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
dictionary AS (
    SELECT list(hash(token) ORDER BY tid) AS codes
    FROM {schema}.token_ids
),
user_tids AS (
    SELECT user_id, list_distinct(list(tid)) AS tids
    FROM (
        SELECT user_id, unnest(tids) AS tid
        FROM {schema}.sentences
        WHERE user_id IS NOT NULL
    ) AS occurrences
    WHERE tid IS NOT NULL
    GROUP BY user_id
),
user_items AS (
    SELECT u.user_id, list_transform(u.tids, lambda t: d.codes[t]) AS items
    FROM user_tids AS u
    CROSS JOIN dictionary AS d
),
-- include: dpsu/_user_kept_coded
SELECT user_id, kept, kept_count
FROM user_kept
