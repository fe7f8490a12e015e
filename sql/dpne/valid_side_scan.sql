-- One side of the overlap join, grouped by overlap, for the uniform sampler over V_k.
SELECT overlap, id
FROM {schema}.{side}
ORDER BY overlap, id
