-- The migrations (sql/ledger/migrations/NNN_name.sql) this ledger has applied, in order.
SELECT version, name FROM ledger.schema_version ORDER BY version;
