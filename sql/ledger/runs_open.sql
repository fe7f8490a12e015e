-- Runs not closed (oldest first), for `dpngram gc`: 'open' ones hold a reservation, 'suspended'
-- ones released it (they failed before drawing); with what they charged and their age in seconds.
SELECT r.run_id, r.dataset, r.reserved_epsilon, r.reserved_delta, r.state, r.staging,
       date_diff('second', r.created_at, now()::TIMESTAMP) AS age_seconds,
       coalesce(sum(s.epsilon), 0) AS charged_epsilon, coalesce(sum(s.delta), 0) AS charged_delta,
       count(s.stage) AS entries, r.warehouse
FROM ledger.runs r LEFT JOIN ledger.privacy_spend s ON s.dataset = r.dataset AND s.run_id = r.run_id
WHERE r.state <> 'closed'
GROUP BY r.run_id, r.dataset, r.reserved_epsilon, r.reserved_delta, r.state, r.staging, r.created_at,
         r.warehouse
ORDER BY r.created_at, r.run_id;
