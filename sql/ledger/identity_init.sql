-- Give the ledger its identity once.
INSERT INTO ledger.identity SELECT $id, $secret, now()
WHERE NOT EXISTS (SELECT 1 FROM ledger.identity);
