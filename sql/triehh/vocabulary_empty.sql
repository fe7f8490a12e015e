-- vocabulary_method = triehh: S_1 starts empty (no DPSU release); triehh_vocabulary_union.sql
-- then adds the TrieHH words and the public known vocabulary.
CREATE OR REPLACE TABLE {schema}.{target} (item VARCHAR)
