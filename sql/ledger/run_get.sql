-- A run's identity, reservation and staging directory (no row: a new run).
SELECT dataset, fingerprint, reserved_epsilon, reserved_delta, state, staging FROM ledger.runs WHERE run_id = $run_id;
