-- Stream a DPSU histogram to the noisy threshold (supplement Alg. 5, lines 7-10). Sorted by item
-- so a seeded test run is reproducible; the noise draws are i.i.d., so order does not change
-- the output distribution.
SELECT item, weight
FROM {schema}.{histogram}
ORDER BY item
