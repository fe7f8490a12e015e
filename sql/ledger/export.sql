-- Every charge (of one dataset, or of all when $dataset is NULL), oldest first, as an auditor's
-- export (`dpngram ledger --export`): the same columns as the view ledger.audit_charges.
SELECT dataset, run_id, stage, epsilon, delta, status, recorded_at, run_state, events
FROM ledger.audit_charges
WHERE $dataset IS NULL OR dataset = $dataset
ORDER BY recorded_at, dataset, run_id, stage;
