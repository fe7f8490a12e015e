-- |supp(H_k)|: PRIVATE (used only inside the mechanism for B_k; never reported or logged).
SELECT count(*) FROM {schema}.{histogram}
