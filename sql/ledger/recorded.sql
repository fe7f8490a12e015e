-- Has this (dataset, run, stage) already been charged? (Retries must not charge twice.)
SELECT count(*) FROM ledger.privacy_spend
WHERE dataset = $dataset AND run_id = $run_id AND stage = $stage;
