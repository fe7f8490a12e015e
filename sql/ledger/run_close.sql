-- Close a run (published, or abandoned via `dpngram gc`): from now on it counts by its charges only.
UPDATE ledger.runs SET state = 'closed' WHERE run_id = $run_id;
