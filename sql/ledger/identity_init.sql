-- Give the warehouse its identity once.
INSERT INTO ledger.warehouse_identity SELECT $id, $secret, now()
WHERE NOT EXISTS (SELECT 1 FROM ledger.warehouse_identity);
