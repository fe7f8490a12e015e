-- Validation of the released TrieHH words (public data): whole-table violation counts, each must be
-- 0. {known} holds the public known vocabulary (empty when not in OOV mode).
SELECT
    (SELECT count(*) FROM released_oov_words WHERE word IS NULL)                      AS null_words,
    (SELECT count(*) - count(DISTINCT word) FROM released_oov_words
      WHERE word IS NOT NULL)                                                          AS duplicate_words,
    (SELECT count(*) FROM released_oov_words
      WHERE length(word) = 0 OR length(word) > $max_length)                            AS words_empty_or_too_long,
    (SELECT count(*) FROM released_oov_words AS r
      JOIN {known} AS k ON k.word = r.word)                                            AS words_in_known_vocabulary
