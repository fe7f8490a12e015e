-- The ledger's identity (the first one, should two connections have raced to create it).
SELECT id, secret FROM ledger.identity ORDER BY created_at, id LIMIT 1;
