-- The words that seed the k-gram levels (docs/dpne.md, "The public domain of the vocabulary"): the
-- released S_1 minus the words released by the public threshold only ({public_only}, a registered
-- batch, also kept as {public_only_table} for the export). Released keys only.
CREATE OR REPLACE TABLE {schema}.{public_only_table} AS
SELECT DISTINCT CAST(item AS VARCHAR) AS item
FROM {public_only};

CREATE OR REPLACE TABLE {schema}.{seeds} AS
SELECT v.item
FROM {schema}.{vocabulary} AS v
WHERE NOT EXISTS (SELECT 1 FROM {schema}.{public_only_table} AS p WHERE p.item = v.item)
