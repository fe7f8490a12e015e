-- The keyed sort key of every trigram of V = {schema}.{space} (bayes/_sort_keys.sql), in tid order:
-- the DuckDB engine's in-process bounding ranks each user's trigrams by it
-- (dpngram.mechanisms.bayes_user_counts.private_count_sums). PRIVATE (the salt is secret): never leaves the
-- process.
WITH
-- include: bayes/_sort_keys
SELECT tid, sort_key
FROM sort_keys
ORDER BY tid
