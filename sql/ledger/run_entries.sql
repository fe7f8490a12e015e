-- How many ledger entries a run has (pending or final): none means it never drew noise.
SELECT count(*) FROM ledger.privacy_spend WHERE dataset = $dataset AND run_id = $run_id;
