-- DPSU weighted-Gaussian histogram from per-user lists {schema}.{lists}(user_id, items)
-- (dpsu/user_item_lists.sql): the same histogram as dpsu/histogram.sql over the relation the
-- lists were built from (each user keeps at most $max_contribution of its distinct items by the
-- shared rule, weight 1/sqrt(|kept|); l2-sensitivity 1). Exact private statistics: this table
-- never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH
user_items AS (
    SELECT user_id, items FROM {schema}.{lists}
),
-- include: dpsu/_user_kept
,
-- include: dpsu/_kept_weights
