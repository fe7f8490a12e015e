-- `dpngram ledger import`: one run from an older ledger, unless the ledger already knows its id.
INSERT INTO ledger.runs (run_id, dataset, fingerprint, reserved_epsilon, reserved_delta, state, created_at, staging, warehouse)
VALUES ($run_id, $dataset, $fingerprint, $reserved_epsilon, $reserved_delta, $state, $created_at, $staging, $warehouse)
ON CONFLICT DO NOTHING;
