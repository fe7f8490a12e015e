-- DPSU input for the vocabulary (DPNE Alg. 1 line 1; supplement Alg. 5): one row per token
-- occurrence (user_id, item); the DPSU SQL keeps each user's DISTINCT items
-- (sql/dpsu/_user_items.sql), so no DISTINCT here (a second one over ~100M rows at 1M users).
-- Tokens never cross sentences; NULL tokens are ignored.
CREATE OR REPLACE VIEW {schema}.{target} AS
SELECT user_id, token AS item
FROM (
    SELECT user_id, unnest(tokens) AS token
    FROM {schema}.sentences
) AS sentence_tokens
WHERE token IS NOT NULL AND user_id IS NOT NULL
