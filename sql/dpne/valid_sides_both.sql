-- Both-side valid k-grams as an overlap join (DPNE Alg. 1): w = a_1..a_k is valid iff its left
-- (k-1)-gram g and right (k-1)-gram h are in S_(k-1) and suffix_(k-2)(g) = prefix_(k-2)(h).
-- Level tables store l = prefix (k-2)-gram id and r = suffix (k-2)-gram id (0 for k-1 = 1).
CREATE OR REPLACE VIEW {schema}.{left_side} AS
SELECT r AS overlap, gid AS id FROM {schema}.{previous};
CREATE OR REPLACE VIEW {schema}.{right_side} AS
SELECT l AS overlap, gid AS id FROM {schema}.{previous};
