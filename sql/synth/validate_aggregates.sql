-- Validation of the synth stage's released tables (public data): whole-table violation counts,
-- each must be 0. Every token of a synthetic sequence and of a released n-gram is in the item
-- universe I (released vocabulary or <unk>; '&' only as the last item of an n-gram); sequences are
-- non-empty; noisy counts are non-negative after consistency (Chen et al. §4.3.4).
WITH seq_tokens AS (
    SELECT unnest(string_split(text, ' ')) AS token FROM released_synthetic_sequences
),
gram_tokens AS (
    SELECT g.ngram, t.token, t.pos, len(string_split(g.ngram, ' ')) AS n
    FROM released_ngram_counts_noisy AS g,
         unnest(string_split(g.ngram, ' ')) WITH ORDINALITY AS t(token, pos)
)
SELECT
    (SELECT count(*) FROM released_synthetic_sequences
      WHERE text IS NULL OR trim(text) = '' OR seq_id IS NULL)                 AS empty_sequences,
    (SELECT count(*) - count(DISTINCT seq_id) FROM released_synthetic_sequences) AS duplicate_seq_ids,
    (SELECT count(*) FROM seq_tokens
      WHERE token <> '<unk>' AND token NOT IN (SELECT token FROM released_vocabulary))
                                                                               AS sequence_tokens_outside_items,
    (SELECT count(*) FROM released_ngram_counts_noisy
      WHERE ngram IS NULL OR noisy_count IS NULL OR isnan(noisy_count) OR noisy_count < 0)
                                                                               AS negative_or_missing_counts,
    (SELECT count(*) - count(DISTINCT ngram) FROM released_ngram_counts_noisy)  AS duplicate_ngrams,
    (SELECT count(*) FROM gram_tokens
      WHERE NOT (token = '<unk>' OR (token = '&' AND pos = n)
                 OR token IN (SELECT token FROM released_vocabulary)))         AS ngram_tokens_outside_items;
