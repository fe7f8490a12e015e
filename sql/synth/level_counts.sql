-- Exact counts |g(u)| of the children u of the expanded nodes of one level of the exploration
-- tree (Chen et al. §4.2, Algorithm 1 line 9): every occurrence of an n-gram (n = $n) in the
-- truncated records whose (n-1)-item prefix is an expanded node in {parents}(node_id, prefix).
-- Only children with a non-zero count appear; zero-count children are handled implicitly by the
-- caller. Private result (exact counts): read into the noise step only.
WITH grams AS (
    SELECT list_slice(r.items, p.j, p.j + $n - 2) AS prefix, r.items[p.j + $n - 1] AS child
    FROM {schema}.{records} AS r,
         unnest(generate_series(1, array_length(r.items) - $n + 1)) AS p(j)
    WHERE array_length(r.items) >= $n  -- Spark's sequence(1, 0) is [1, 0], not empty
)
SELECT e.node_id, g.child, count(*) AS n_occurrences
FROM grams AS g
JOIN {schema}.{parents} AS e ON e.prefix = g.prefix
GROUP BY e.node_id, g.child
ORDER BY e.node_id, g.child;
