-- Take the dataset's lock inside a transaction: a concurrent check-and-spend on the same dataset
-- now conflicts (and is retried) instead of passing the same check.
UPDATE ledger.lifetime_budget SET version = version + 1 WHERE dataset = $dataset;
