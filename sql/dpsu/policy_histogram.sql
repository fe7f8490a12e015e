-- The policy histogram {histogram}(item, weight) from the weights the sequential update computed
-- per dense item id ({weights}(iid, weight), registered from the driver). Same shape as the
-- weighted histogram, so thresholding and DPNE's SQL read either. Private working table.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
SELECT i.item, w.weight
FROM {schema}.{item_ids} AS i
JOIN {weights} AS w ON i.iid = w.iid
