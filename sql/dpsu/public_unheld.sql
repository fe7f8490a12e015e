-- The public words of a vocabulary round with weight 0 (docs/dpne.md, "The public domain of the
-- vocabulary"): not in this round's private histogram and not released by an earlier round. The
-- driver draws Binomial(#, p) of them uniformly (the noised zero weights); the list is private
-- (it is the public domain minus the support) and is never written out. Sorted for seeded tests.
SELECT p.item
FROM {schema}.{public} AS p
WHERE NOT EXISTS (SELECT 1 FROM {schema}.{histogram} AS h WHERE h.item = p.item)
  AND NOT EXISTS (SELECT 1 FROM {schema}.{released} AS r WHERE r.item = p.item)
ORDER BY p.item
