-- One stage's ledger entry (no row: the stage has not started drawing).
SELECT epsilon, delta, status FROM ledger.privacy_spend
WHERE dataset = $dataset AND run_id = $run_id AND stage = $stage;
