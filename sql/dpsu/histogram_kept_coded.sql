-- dpsu/histogram_kept.sql over coded kept lists {schema}.{kept_lists}(user_id, kept, kept_count)
-- (dpsu/user_kept_lists_coded.sql): the weights are summed per code, then each code is mapped back
-- to its item through {schema}.{codes}(item, code) (dpsu/item_codes.sql, one-to-one): the same
-- (item, weight) table as the plain statement. Exact private statistics: never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH
-- include: dpsu/_kept_lists
coded AS (
    WITH
-- include: dpsu/_kept_weights
)
-- include: dpsu/_decoded
