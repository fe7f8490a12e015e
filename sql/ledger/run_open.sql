-- Register a new run: its fingerprint and the budget it reserves until it is closed.
INSERT INTO ledger.runs VALUES ($run_id, $dataset, $fingerprint, $epsilon, $delta, 'open', now());
