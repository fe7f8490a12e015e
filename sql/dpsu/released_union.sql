-- More released items (keys only): {schema}.{target} with the items of {released} added (the
-- new-words round's words, none of them in {target} already). The statement reads the table it
-- replaces, which both engines allow (src/dpngram/engines/spark.py).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT item FROM {schema}.{target}
UNION ALL
SELECT item FROM {released}
