-- Scalable variant (supplement Alg. 1): drawn valid k-grams that are NOT in supp(H_k), in draw
-- order (rejection sampling from V_k \ supp(H_k)).
SELECT c.draw
FROM {drawn} AS c
WHERE NOT EXISTS (
    SELECT 1 FROM {schema}.{histogram} AS h WHERE h.item = c.item
)
ORDER BY c.draw
