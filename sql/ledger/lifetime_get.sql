-- A dataset's lifetime budget (NULL: no limit set).
SELECT lifetime_epsilon, lifetime_delta, updated_at FROM ledger.lifetime_budget WHERE dataset = $dataset;
