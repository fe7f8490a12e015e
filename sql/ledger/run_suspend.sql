-- Release the reservation of an open run that has no ledger entry (it drew no noise): it counts
-- for nothing until a resume reserves again.
UPDATE ledger.runs SET state = 'suspended' WHERE run_id = $run_id AND state = 'open';
