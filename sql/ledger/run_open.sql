-- Register a new run: its fingerprint, its staging directory, the directory of its private tables
-- and the budget it reserves until it is closed.
INSERT INTO ledger.runs (run_id, dataset, fingerprint, reserved_epsilon, reserved_delta, state, created_at, staging, warehouse)
VALUES ($run_id, $dataset, $fingerprint, $epsilon, $delta, 'open', now(), $staging, $warehouse);
