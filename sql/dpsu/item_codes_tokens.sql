-- dpsu/item_codes.sql for the vocabulary, from the run's token dictionary: each distinct token of
-- the sentences with code = hash(token). The dictionary holds exactly the sentences' distinct
-- tokens (ingest builds it from them), so this is item_codes.sql over dpsu/vocabulary_source.sql
-- without unnesting every sentence. Exact private keys: never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT token AS item, hash(token) AS code
FROM {schema}.token_ids
