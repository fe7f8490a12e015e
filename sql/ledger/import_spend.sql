-- `dpngram ledger import`: one charge from an older ledger (kept in a warehouse file), unless the
-- ledger already holds that (dataset, run, stage).
INSERT INTO ledger.privacy_spend (dataset, run_id, stage, epsilon, delta, events, recorded_at, status)
VALUES ($dataset, $run_id, $stage, $epsilon, $delta, $events, $recorded_at, $status)
ON CONFLICT DO NOTHING;
