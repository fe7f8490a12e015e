-- Size of the TrieHH population (private: only used to check that every layer can get a fresh
-- group, never reported).
SELECT count(*) AS users FROM {schema}.{users}
