-- A vocabulary round's histogram with a public domain (docs/dpne.md, "The public domain of the
-- vocabulary"): each held item, its weight, and whether it is one of the public words (public
-- data), which decides its threshold. Sorted by item like histogram_scan.sql.
SELECT h.item, h.weight, (p.item IS NOT NULL) AS public
FROM {schema}.{histogram} AS h
LEFT JOIN {schema}.{public} AS p ON p.item = h.item
ORDER BY h.item
