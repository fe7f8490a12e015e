-- Rebuild a level's keys from its released file (post-processing of a DP output), e.g. when a
-- retried task finds the private level tables gone. {released}(left_text, right_text) holds each
-- released k-gram's left part (first k-1 tokens, in S_(k-1)) and right part (tokens
-- right_start..k: S_(k-1) both-side, the last token in S_1 single-side), split on the driver.
SELECT CAST(a.gid AS BIGINT) * 4294967296 + b.gid AS item, a.gid AS l, b.gid AS r
FROM {released} AS g
JOIN {schema}.{previous} AS a ON a.ngram = g.left_text
JOIN {schema}.{right_level} AS b ON b.ngram = g.right_text
