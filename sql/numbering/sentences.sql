-- Step 1 of the two-level user numbering (docs/engines.md "Numbering without a global window"):
-- every user of {schema}.{sentences} (the run's sentences, or any relation with a user_id
-- column), its number of sentences, and a hash bucket. The bucket is only a label that spreads
-- users over $buckets groups (hash(user_id) is unsigned on DuckDB and a signed xxhash64 on Spark,
-- so it may be negative there; the numbering only needs it to be a function of user_id). The
-- per-user numbers never leave the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT user_id,
       CAST(hash(user_id) % $buckets AS BIGINT) AS bucket,
       count(*) AS sentences
FROM {schema}.{sentences}
WHERE user_id IS NOT NULL
GROUP BY user_id
