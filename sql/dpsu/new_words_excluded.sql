-- The items the new-words round leaves out (docs/dpne.md, "New words"): the words the vocabulary
-- released already (DP output) and the public domain (public data); {public} is {released} again
-- when there is no public domain. Keys only.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT item FROM {schema}.{released} WHERE item IS NOT NULL
UNION
SELECT item FROM {schema}.{public} WHERE item IS NOT NULL
