-- Vocabulary S_1 with vocabulary_method triehh|both: the items already in {schema}.{target}
-- (DPSU's release, or nothing) united with the TrieHH words and the public known vocabulary
-- {extra}(word). All inputs are DP outputs or public, so this is post-processing.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT item FROM {schema}.{target}
UNION
SELECT word AS item FROM {extra} WHERE word IS NOT NULL AND length(word) > 0
