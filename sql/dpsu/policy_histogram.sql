-- The policy histogram {histogram}(item, weight): the support's items with the weights the
-- sequential update computed ({weights}(item, weight), registered from the driver). Same shape as
-- the weighted histogram, so thresholding and DPNE's SQL read either. Private working table.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
SELECT item, weight
FROM {weights}
