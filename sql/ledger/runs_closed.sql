-- Runs the ledger has closed (published, or released by `dpngram gc --delete`), for `dpngram gc`:
-- their private run schemas can no longer be used by anything.
SELECT run_id FROM ledger.runs WHERE state = 'closed' ORDER BY created_at, run_id;
