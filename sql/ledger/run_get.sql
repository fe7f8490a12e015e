-- A run's identity, reservation, staging directory and warehouse (no row: a new run).
SELECT dataset, fingerprint, reserved_epsilon, reserved_delta, state, staging, warehouse
FROM ledger.runs WHERE run_id = $run_id;
