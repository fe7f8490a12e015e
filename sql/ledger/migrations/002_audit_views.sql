-- Read-only views for auditors (docs/accounting.md, "Auditing the ledger"): every charge, and per
-- dataset its lifetime budget, what counts against it and what is left. An auditor's role needs
-- SELECT on these views only (PostgreSQL: GRANT USAGE ON SCHEMA ledger, then GRANT SELECT ON
-- ledger.audit_charges, ledger.audit_datasets).
CREATE VIEW ledger.audit_charges AS
SELECT s.dataset, s.run_id, s.stage, s.epsilon, s.delta, s.status, s.recorded_at,
       r.state AS run_state, s.events
FROM ledger.privacy_spend s LEFT JOIN ledger.runs r ON r.run_id = s.run_id;
CREATE VIEW ledger.audit_datasets AS
WITH charged AS (
    SELECT dataset, run_id, sum(epsilon) AS e, sum(delta) AS d
    FROM ledger.privacy_spend GROUP BY dataset, run_id
), per_run AS (
    SELECT coalesce(c.dataset, r.dataset) AS dataset,
           greatest(coalesce(c.e, 0), CASE WHEN r.state = 'open' THEN r.reserved_epsilon ELSE 0 END) AS e,
           greatest(coalesce(c.d, 0), CASE WHEN r.state = 'open' THEN r.reserved_delta ELSE 0 END) AS d,
           coalesce(c.e, 0) AS charged_e, coalesce(c.d, 0) AS charged_d
    FROM charged c FULL OUTER JOIN ledger.runs r ON c.run_id = r.run_id
), totals AS (
    SELECT dataset, sum(e) AS committed_epsilon, sum(d) AS committed_delta,
           sum(charged_e) AS charged_epsilon, sum(charged_d) AS charged_delta, count(*) AS runs
    FROM per_run GROUP BY dataset
)
SELECT coalesce(t.dataset, b.dataset) AS dataset,
       b.lifetime_epsilon, b.lifetime_delta,
       coalesce(t.charged_epsilon, 0) AS charged_epsilon, coalesce(t.charged_delta, 0) AS charged_delta,
       coalesce(t.committed_epsilon, 0) AS committed_epsilon,
       coalesce(t.committed_delta, 0) AS committed_delta,
       b.lifetime_epsilon - coalesce(t.committed_epsilon, 0) AS remaining_epsilon,
       b.lifetime_delta - coalesce(t.committed_delta, 0) AS remaining_delta,
       coalesce(t.runs, 0) AS runs
FROM totals t FULL OUTER JOIN ledger.lifetime_budget b ON b.dataset = t.dataset;
