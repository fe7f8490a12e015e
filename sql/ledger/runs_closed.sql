-- Runs the ledger has closed (published, or released by `dpngram gc --delete`), with the
-- directory of their private tables, for `dpngram gc`: those tables can no longer be used.
SELECT run_id, warehouse FROM ledger.runs WHERE state = 'closed' ORDER BY created_at, run_id;
