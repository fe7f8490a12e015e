-- The codes (dpsu/item_codes.sql: hash(item)) of the items of {schema}.{source}(item), as a table
-- {schema}.{target}(item) that the coded admitted round (dpsu/histogram_kept_admitted_coded.sql)
-- matches kept codes against. Round 1's admitted items: a function of round 1's noisy output.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT hash(item) AS item
FROM {schema}.{source}
