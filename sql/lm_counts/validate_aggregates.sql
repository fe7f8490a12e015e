-- Validation of the lm_counts stage's released table (public data): whole-table violation counts,
-- each must be 0. Keys are unique per order; every n-gram has exactly n space-separated tokens;
-- orders are 1..3; noisy counts are finite (they may be negative at order 1: DP values as drawn);
-- <s> appears only first and </s> only last in an n-gram.
WITH tokens AS (
    SELECT c.n, c.ngram, t.token, t.pos
    FROM released_lm_counts AS c,
         unnest(string_split(c.ngram, ' ')) WITH ORDINALITY AS t(token, pos)
)
SELECT
    (SELECT count(*) FROM released_lm_counts
      WHERE ngram IS NULL OR n IS NULL OR noisy_count IS NULL OR isnan(noisy_count)
         OR isinf(noisy_count))                                                 AS missing_or_nonfinite,
    (SELECT count(*) FROM released_lm_counts WHERE n < 1 OR n > 3)              AS bad_orders,
    (SELECT count(*) - count(DISTINCT (n, ngram)) FROM released_lm_counts)      AS duplicate_keys,
    (SELECT count(*) FROM released_lm_counts
      WHERE len(string_split(ngram, ' ')) <> n)                                 AS wrong_token_counts,
    (SELECT count(*) FROM tokens
      WHERE (token = '<s>' AND pos <> 1) OR (token = '</s>' AND pos <> n))     AS misplaced_markers;
