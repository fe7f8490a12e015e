-- Level-2 occurrences of VALID bigrams, both-side pruning, straight from the sentences (DPNE
-- Alg. 1 "V_2 <- S_1 x S_1"): a bigram starting at position pos is valid iff the tokens at pos and
-- pos + 1 are both in S_1. Rows (uid, loc, key) as dpne/candidates_both.sql gives from
-- dpne_occ1, with the same loc = sentence_no * stride + pos (sentence_no from
-- dpne/_sentence_positions.sql) and key = left_gid * 2^32 + right_gid. Reading each pair's two
-- tokens from the sentence's list (two joins with the small S_1 table) replaces building every
-- level-1 position (~100M rows at 1M users) and then a window over all of them to find each
-- position's neighbour: 21 s against 34 s at 1M users (docs/engines.md, "Scale"). Positions at or
-- beyond the stride are dropped, as there. Both engines: the pair's end (pos + 1) is kept inside
-- the list by the WHERE clause, never by reading past it.
-- A VIEW, not a table: its two readers (the kept lists of dpsu/user_kept_lists.sql and, after the
-- release, dpne/occurrences.sql) each compute it from the sentences, which at 1M users costs less
-- than writing its ~90M rows once (about 8 s to compute against 22 s to write). A view takes no
-- prepared parameters, so the stride is the literal 16777216 = 2^24, the code's SENTENCE_STRIDE
-- (dpngram.mechanisms.dpne_domain; tests/test_numbering.py checks the locs agree).
CREATE OR REPLACE VIEW {schema}.{target} AS
WITH
-- include: dpne/_sentence_positions
SELECT p.uid,
       p.sentence_no * 16777216 + p.pos AS loc,
       CAST(a.gid AS BIGINT) * 4294967296 + b.gid AS key
FROM positions AS p
JOIN {schema}.{vocabulary} AS a ON a.input_tid = p.tokens[p.pos]
JOIN {schema}.{vocabulary} AS b ON b.input_tid = p.tokens[p.pos + 1]
WHERE p.pos < array_length(p.tokens) AND p.pos + 1 < 16777216
