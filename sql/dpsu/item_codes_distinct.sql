-- Whether the item codes of {schema}.{codes}(item, code) (dpsu/item_codes.sql) are one-to-one:
-- the number of items and of distinct codes. Only the comparison of the two leaves the engine (it
-- picks coded or plain kept lists, which release the same histogram).
SELECT count(*) AS items, count(DISTINCT code) AS codes
FROM {schema}.{codes}
