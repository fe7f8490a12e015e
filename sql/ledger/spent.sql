-- Total spend recorded for a dataset (basic composition across runs), optionally for one run only
-- ($run_id NULL = every run).
SELECT coalesce(sum(epsilon), 0) AS epsilon,
       coalesce(sum(delta), 0)   AS delta
FROM ledger.privacy_spend
WHERE dataset = $dataset AND ($run_id IS NULL OR run_id = $run_id);
