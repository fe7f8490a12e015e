-- What the privacy ledger charged one run (read-only; for the run report).
SELECT coalesce(sum(epsilon), 0) AS epsilon,
       coalesce(sum(delta), 0)   AS delta,
       count(*)                  AS entries
FROM ledger.privacy_spend
WHERE dataset = $dataset AND run_id = $run_id;
