-- A resume of a suspended run: it reserves its budget again.
UPDATE ledger.runs SET state = 'open', reserved_epsilon = $epsilon, reserved_delta = $delta WHERE run_id = $run_id;
