-- Runs still holding a reservation (oldest first), for `dpngram gc`.
SELECT run_id, dataset, reserved_epsilon, created_at FROM ledger.runs WHERE state = 'open' ORDER BY created_at;
