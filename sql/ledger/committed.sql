-- What counts against a dataset's lifetime budget, except run $exclude (NULL: every run): per run,
-- the larger of its charges and, while it is open, its reservation (basic composition across runs).
WITH charged AS (
    SELECT run_id, sum(epsilon) AS e, sum(delta) AS d
    FROM ledger.privacy_spend WHERE dataset = $dataset GROUP BY run_id
), reserved AS (
    SELECT run_id, reserved_epsilon AS e, reserved_delta AS d
    FROM ledger.runs WHERE dataset = $dataset AND state = 'open'
), per_run AS (
    SELECT coalesce(c.run_id, r.run_id) AS run_id,
           greatest(coalesce(c.e, 0), coalesce(r.e, 0)) AS e,
           greatest(coalesce(c.d, 0), coalesce(r.d, 0)) AS d
    FROM charged c FULL OUTER JOIN reserved r ON c.run_id = r.run_id
)
SELECT coalesce(sum(e), 0) AS epsilon, coalesce(sum(d), 0) AS delta
FROM per_run WHERE $exclude IS NULL OR run_id <> $exclude;
