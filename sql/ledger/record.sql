-- Charge one stage of one run. events: JSON list of mechanism parameters (no data statistics).
-- status: 'pending' (an upper bound, before the noise is drawn) or 'final'.
INSERT INTO ledger.privacy_spend (dataset, run_id, stage, epsilon, delta, events, recorded_at, status)
VALUES ($dataset, $run_id, $stage, $epsilon, $delta, $events, now(), $status);
