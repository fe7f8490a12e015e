-- Set a dataset's lifetime budget (first run naming one, or `dpngram budget`).
UPDATE ledger.lifetime_budget
SET lifetime_epsilon = $epsilon, lifetime_delta = $delta, updated_at = now()
WHERE dataset = $dataset;
