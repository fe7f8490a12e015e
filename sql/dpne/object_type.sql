-- 'BASE TABLE', 'VIEW', or no row: what a working object of the run schema is, if it exists.
SELECT table_type
FROM information_schema.tables
WHERE table_schema = $schema AND table_name = $name
