-- An empty (item) result with the item type of a DPSU relation {source}(user_id, item): the
-- release of a DP-SIPS run in which no round released anything.
SELECT item
FROM {schema}.{source}
WHERE 1 = 0
