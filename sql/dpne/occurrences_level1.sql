-- Level-1 occurrences: one row per token position whose token is in S_1. Tokens outside S_1 have
-- no row, so they break n-grams. loc = sentence_no * $sentence_stride + position: consecutive
-- inside a sentence, with a gap between sentences, so "next position" is the single-column join
-- loc + 1 and an n-gram can never cross a sentence boundary. Positions at or beyond the stride
-- (sentences longer than $sentence_stride - 1 tokens) are dropped. sentence_no is globally
-- unique (1..number of sentences) without a global window: the user's first_sentence offset
-- from {users} (user_numbering.sql) plus the sentence's rank among the user's own sentences.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
-- include: dpne/_sentence_positions
SELECT p.uid, p.sentence_no * $sentence_stride + p.pos AS loc, v.gid
FROM positions AS p
JOIN {schema}.{vocabulary} AS v ON v.input_tid = p.tokens[p.pos]
WHERE p.pos < $sentence_stride
