-- Dense ids 0..n-1 of the items in a policy input table (the support of the histogram), so the
-- sequential update can keep the histogram in one array. Private working table.
CREATE OR REPLACE TABLE {schema}.{target} AS
SELECT item, row_number() OVER (ORDER BY item) - 1 AS iid
FROM (
    SELECT item
    FROM (SELECT unnest(kept) AS item FROM {schema}.{pairs}) AS kept_items
    GROUP BY item
) AS support
