-- Baseline DPSU input (DPNE §3.1.2): every n-gram of length $min_n..$max_n of every user,
-- as a token list, without pruning. N-grams never cross sentences.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH starts AS (
    SELECT user_id, tokens, unnest(generate_series(1, array_length(tokens))) AS start_pos
    FROM {schema}.sentences
    WHERE user_id IS NOT NULL
),
lengths AS (
    SELECT unnest(generate_series($min_n, $max_n)) AS n
)
SELECT DISTINCT s.user_id, list_slice(s.tokens, s.start_pos, s.start_pos + l.n - 1) AS item
FROM starts AS s
CROSS JOIN lengths AS l
WHERE s.start_pos + l.n - 1 <= array_length(s.tokens)
