-- Replace a stage's pending charge (an upper bound) by its exact charge, once its noisy output
-- is persisted.
UPDATE ledger.privacy_spend
SET epsilon = $epsilon, delta = $delta, events = $events, status = 'final'
WHERE dataset = $dataset AND run_id = $run_id AND stage = $stage AND status = 'pending';
