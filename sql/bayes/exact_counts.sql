-- Unbounded private trigram counts on V, for EVALUATION ONLY (benchmarks: KL(private || released)).
-- Never used by a mechanism and never released.
SELECT s.tid, count(*) AS exact_count
FROM {schema}.{occurrences} AS o
JOIN {schema}.{space} AS s
  ON o.w1 = s.w1 AND o.w2 = s.w2 AND o.w3 = s.w3
GROUP BY s.tid
ORDER BY s.tid
