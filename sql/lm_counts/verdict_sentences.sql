-- Stage lm_counts: the sentences of the verdict users (keyed hash in [$holdout_per_mille,
-- $verdict_per_mille): neither the selection users of selection_sentences.sql nor the users
-- weighted.sql counts, which start at $verdict_per_mille), in user order, for the private-domain
-- verdict (docs/lm_privacy.md, "The private-domain verdict"). PRIVATE: consumed in-process only.
SELECT user_id, tokens
FROM {schema}.sentences
WHERE user_id IS NOT NULL
  AND abs(hash(xor(hash(user_id), CAST($salt AS UBIGINT))) % 1000) >= $holdout_per_mille
  AND abs(hash(xor(hash(user_id), CAST($salt AS UBIGINT))) % 1000) < $verdict_per_mille
ORDER BY user_id, doc_id, sent_id
