-- Charge one stage of one run. events: JSON list of mechanism parameters (no data statistics).
INSERT INTO ledger.privacy_spend
VALUES ($dataset, $run_id, $stage, $epsilon, $delta, $events, now());
