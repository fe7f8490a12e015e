-- Validation of the released vocabulary (public data): whole-table violation counts, each must be 0.
SELECT
    (SELECT count(*) FROM released_vocabulary WHERE token IS NULL)        AS null_tokens,
    (SELECT count(*) - count(DISTINCT token) FROM released_vocabulary
      WHERE token IS NOT NULL)                                            AS duplicate_tokens,
    (SELECT count(*) FROM released_vocabulary
      WHERE length(token) = 0 OR strpos(token, ' ') > 0)                  AS tokens_empty_or_with_space;
