-- Spend history of one dataset, oldest first (read-only; `dpngram ledger`). Mechanism parameters
-- only: the ledger holds no data-derived statistic.
SELECT run_id, stage, epsilon, delta, recorded_at
FROM ledger.privacy_spend
WHERE dataset = $dataset
ORDER BY recorded_at, run_id, stage;
