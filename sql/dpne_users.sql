-- Integer user ids for the DPNE level tables (keys only; the mapping stays in the run schema).
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT user_id, CAST(row_number() OVER (ORDER BY user_id) AS INTEGER) AS uid
FROM (
    SELECT DISTINCT user_id
    FROM {schema}.sentences
    WHERE user_id IS NOT NULL
) AS distinct_users
