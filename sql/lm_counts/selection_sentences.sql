-- Stage lm_counts: the sentences of the selection users (keyed hash below $holdout_per_mille;
-- the complement of the users sql/lm_counts_weighted.sql counts), in user order, for scoring the
-- candidate mixture weights. PRIVATE: consumed in-process only.
SELECT user_id, tokens
FROM {schema}.sentences
WHERE user_id IS NOT NULL
  AND abs(hash(xor(hash(user_id), CAST($salt AS UBIGINT))) % 1000) < $holdout_per_mille
ORDER BY user_id, doc_id, sent_id
