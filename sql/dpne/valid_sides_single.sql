-- Single-side valid k-grams V_k = S_(k-1) x S_1 (DPNE §3.1.1), as a join on a constant overlap.
CREATE OR REPLACE VIEW {schema}.{left_side} AS
SELECT 0 AS overlap, gid AS id FROM {schema}.{previous};
CREATE OR REPLACE VIEW {schema}.{right_side} AS
SELECT 0 AS overlap, gid AS id FROM {schema}.{unigrams};
