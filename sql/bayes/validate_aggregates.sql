-- Validation of released/trigram_dist.parquet (public data): whole-table violation counts/flags,
-- each must be 0. V is checked structurally: every token is in the released vocabulary or one of
-- the markers <s> (first position only), </s> (last position only), <unk>; keys are unique.
SELECT
    (SELECT count(*) FROM released_trigram_dist
      WHERE w1 IS NULL OR w2 IS NULL OR w3 IS NULL OR prob IS NULL)            AS null_values,
    (SELECT count(*) FROM released_trigram_dist
      WHERE prob < 0 OR prob > 1 OR isnan(prob))                               AS probabilities_outside_0_1,
    (SELECT CASE WHEN abs(coalesce(sum(prob), 0) - 1) <= $sum_tolerance THEN 0 ELSE 1 END
       FROM released_trigram_dist)                                             AS probabilities_do_not_sum_to_1,
    (SELECT count(*) - count(DISTINCT (w1, w2, w3)) FROM released_trigram_dist) AS duplicate_trigrams,
    (SELECT count(*) FROM released_trigram_dist
      WHERE w2 IN ('<s>', '</s>') OR w3 = '<s>' OR w1 = '</s>')               AS misplaced_markers,
    (SELECT count(*) FROM released_trigram_dist AS t
      WHERE (t.w1 NOT IN ('<s>', '<unk>') AND t.w1 NOT IN (SELECT token FROM released_vocabulary))
         OR (t.w2 <> '<unk>' AND t.w2 NOT IN (SELECT token FROM released_vocabulary))
         OR (t.w3 NOT IN ('</s>', '<unk>') AND t.w3 NOT IN (SELECT token FROM released_vocabulary)))
                                                                               AS tokens_outside_vocabulary;
