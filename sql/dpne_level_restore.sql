-- Rebuild a level's keys from its released file (post-processing of a DP output), e.g. when a
-- retried task finds the private level tables gone. left = first k-1 tokens in S_(k-1);
-- right = tokens $right_start..k in {right_level} (S_(k-1) both-side, S_1 single-side).
SELECT CAST(a.gid AS BIGINT) * 4294967296 + b.gid AS item, a.gid AS l, b.gid AS r
FROM (
    SELECT string_split(ngram, ' ') AS toks
    FROM read_parquet($path)
) AS g
JOIN {schema}.{previous} AS a ON a.ngram = array_to_string(list_slice(g.toks, 1, $k - 1), ' ')
JOIN {schema}.{right_level} AS b ON b.ngram = array_to_string(list_slice(g.toks, $right_start, $k), ' ')
