-- Register a new run: its fingerprint, its staging directory and the budget it reserves until it
-- is closed.
INSERT INTO ledger.runs (run_id, dataset, fingerprint, reserved_epsilon, reserved_delta, state, created_at, staging)
VALUES ($run_id, $dataset, $fingerprint, $epsilon, $delta, 'open', now(), $staging);
