-- Every run of one dataset, oldest first, with its reservation and state (for the budget forecast:
-- the latest run's (epsilon, delta) is the "current parameters"). Keys and budgets only.
SELECT run_id, reserved_epsilon, reserved_delta, state, created_at
FROM ledger.runs WHERE dataset = $dataset ORDER BY created_at, run_id;
