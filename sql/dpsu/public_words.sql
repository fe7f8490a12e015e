-- The vocabulary's public domain (docs/dpne.md, "The public domain of the vocabulary"): the public
-- corpus's most frequent words, distinct, in the run schema. Public data only.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT DISTINCT item
FROM {words}
WHERE item IS NOT NULL
