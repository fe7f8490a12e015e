-- Level-2 occurrences of VALID bigrams, both-side pruning, straight from the sentences (DPNE
-- Alg. 1 "V_2 <- S_1 x S_1"): a bigram starting at position pos is valid iff the tokens at pos and
-- pos + 1 are both in S_1. Rows (uid, loc, key) as dpne/candidates_both.sql gives from
-- dpne_occ1, with the same loc = sentence_no * $sentence_stride + pos (sentence_no from
-- dpne/_sentence_positions.sql) and key = left_gid * 2^32 + right_gid. Reading each pair's two
-- tokens from the sentence's list (two joins with the small S_1 table) replaces building every
-- level-1 position (~100M rows at 1M users) and then a window over all of them to find each
-- position's neighbour: 21 s against 34 s at 1M users (docs/engines.md, "Scale"). Positions at or
-- beyond the stride are dropped, as there. Both engines: the pair's end (pos + 1) is kept inside
-- the list by the WHERE clause, never by reading past it.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
-- include: dpne/_sentence_positions
SELECT p.uid,
       p.sentence_no * $sentence_stride + p.pos AS loc,
       CAST(a.gid AS BIGINT) * 4294967296 + b.gid AS key
FROM positions AS p
JOIN {schema}.{vocabulary} AS a ON a.ngram = p.tokens[p.pos]
JOIN {schema}.{vocabulary} AS b ON b.ngram = p.tokens[p.pos + 1]
WHERE p.pos < array_length(p.tokens) AND p.pos + 1 < $sentence_stride
