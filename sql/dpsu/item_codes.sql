-- The vocabulary's item codes (docs/dpne.md, "Coded kept lists"): each distinct item of
-- {schema}.{source}(user_id, item) with code = hash(item), the 64-bit hash the kept-items rule
-- (dpsu/_user_kept.sql) already applies to every item. The coded kept lists
-- (dpsu/user_kept_lists_coded.sql) hold codes instead of strings, and the coded histograms map
-- the codes back through this table, which is used only when no two items share a code (checked
-- by dpsu/item_codes_distinct.sql). Exact private keys: never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT item, hash(item) AS code
FROM (
    SELECT DISTINCT item
    FROM {schema}.{source}
    WHERE item IS NOT NULL AND user_id IS NOT NULL
) AS items
