-- DP-SIPS round r >= 2 with admission from per-user lists {schema}.{lists}(user_id, items)
-- (dpsu/user_item_lists.sql): the same histogram as dpsu/histogram_admitted.sql over the relation
-- the lists were built from. Exact private statistics: never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH
user_items AS (
    SELECT user_id, items FROM {schema}.{lists}
),
-- include: dpsu/_user_kept
,
-- include: dpsu/_admitted_weights
