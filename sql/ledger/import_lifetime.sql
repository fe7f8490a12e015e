-- `dpngram ledger import`: a dataset's lifetime budget from an older ledger, where this ledger has
-- no limit for it yet (a limit it holds is kept: a limit is changed only by `dpngram budget`).
INSERT INTO ledger.lifetime_budget (dataset, lifetime_epsilon, lifetime_delta, updated_at, version)
VALUES ($dataset, $epsilon, $delta, $updated_at, 0)
ON CONFLICT (dataset) DO UPDATE SET
    lifetime_epsilon = coalesce(lifetime_budget.lifetime_epsilon, excluded.lifetime_epsilon),
    lifetime_delta = coalesce(lifetime_budget.lifetime_delta, excluded.lifetime_delta);
