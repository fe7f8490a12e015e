-- A one-column word list (known vocabulary, or words learned by earlier TrieHH passes) copied
-- from a registered in-memory table into the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT DISTINCT word
FROM {source}
WHERE word IS NOT NULL
