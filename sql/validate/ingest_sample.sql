-- Validation (PRIVATE run schema): a bounded random sample of the token view for row-level
-- checks (non-null, non-empty user_id and token, non-negative pos). Results are reported as
-- pass/fail only (BOOLEAN_ONLY), so no sampled value ever leaves the schema.
SELECT CAST(t.user_id AS VARCHAR) AS user_id,
       t.token                    AS token,
       t.pos                      AS pos
FROM (SELECT user_id, token, pos FROM {schema}.tokens) AS t TABLESAMPLE (200000 ROWS);
