-- A run's identity and reservation (no row: a new run).
SELECT dataset, fingerprint, reserved_epsilon, reserved_delta, state FROM ledger.runs WHERE run_id = $run_id;
