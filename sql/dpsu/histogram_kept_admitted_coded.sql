-- dpsu/histogram_kept_admitted.sql over coded kept lists {schema}.{kept_lists}(user_id, kept,
-- kept_count) (dpsu/user_kept_lists_coded.sql): {schema}.{admitted}(item) holds the admitted
-- items' codes (dpsu/item_codes_of.sql), and each code is mapped back to its item through
-- {schema}.{codes}(item, code) (one-to-one): the same (item, weight) table as the plain statement.
-- Exact private statistics: never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH
user_kept AS (
    SELECT user_id, kept, kept_count FROM {schema}.{kept_lists}
),
coded AS (
    WITH
-- include: dpsu/_admitted_weights
)
SELECT c.item, w.weight
FROM coded AS w
JOIN {schema}.{codes} AS c ON c.code = w.item
