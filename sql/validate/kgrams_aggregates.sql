-- Validation of the released k-grams (public data): whole-table violation counts, each must be 0.
-- A k-gram is its k tokens joined by single spaces. Downward closure (DPNE §2, pruning): with
-- both-side pruning, the (k-1)-prefix and (k-1)-suffix of every released k-gram were released at
-- level k-1 (level 1 = the vocabulary); with single-side pruning, the prefix was, and the last
-- token is in the vocabulary. $both_sides is true for both-side pruning.
WITH levels AS (
    SELECT 1 AS k, token AS ngram FROM released_vocabulary
    UNION ALL
    SELECT k, ngram FROM released_kgrams
),
parts AS (
    SELECT k,
           ngram,
           left(ngram, length(ngram) - strpos(reverse(ngram), ' ')) AS prefix,
           substr(ngram, strpos(ngram, ' ') + 1)                     AS suffix
    FROM released_kgrams
    WHERE ngram IS NOT NULL AND strpos(ngram, ' ') > 0
),
unclosed AS (
    SELECT p.k, p.ngram
    FROM parts AS p
    LEFT JOIN levels AS pre ON pre.k = p.k - 1 AND pre.ngram = p.prefix
    LEFT JOIN levels AS suf ON suf.k = p.k - 1 AND suf.ngram = p.suffix
    WHERE pre.ngram IS NULL OR ($both_sides AND suf.ngram IS NULL)
),
kgram_tokens AS (
    SELECT g.token
    FROM released_kgrams AS r
    CROSS JOIN UNNEST(string_split(r.ngram, ' ')) AS g(token)
    WHERE r.ngram IS NOT NULL
)
SELECT
    (SELECT count(*) FROM released_kgrams WHERE ngram IS NULL OR k IS NULL)         AS null_values,
    (SELECT count(*) - count(DISTINCT ngram) FROM released_kgrams
      WHERE ngram IS NOT NULL)                                                      AS duplicate_ngrams,
    (SELECT count(*) FROM released_kgrams
      WHERE ngram IS NOT NULL
        AND (length(ngram) - length(replace(ngram, ' ', '')) + 1 <> k
             OR ngram <> trim(ngram) OR strpos(ngram, '  ') > 0))                 AS wrong_token_count,
    (SELECT count(*) FROM kgram_tokens AS t
      WHERE NOT EXISTS (SELECT 1 FROM released_vocabulary AS v WHERE v.token = t.token)) AS tokens_outside_vocabulary,
    (SELECT count(*) FROM unclosed)                                                 AS not_downward_closed;
