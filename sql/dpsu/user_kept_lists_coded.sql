-- dpsu/user_kept_lists.sql over item codes (docs/dpne.md, "Coded kept lists"): the same kept set
-- for every user, as 64-bit codes c = hash(item) instead of strings, which DuckDB collects,
-- deduplicates and sorts for less (the vocabulary's lists at 1M users: 21.7-22.4 s against
-- 34.7-37.0 s for the plain statement, alternating on a saved warehouse).
-- Used only when the codes of {schema}.{source}'s items are one-to-one (dpsu/item_codes_distinct.sql),
-- so a user's distinct codes are its distinct items. The rule is dpsu/_user_kept.sql's with the
-- item's hash already taken: a user over $max_contribution keeps the codes with the smallest
-- hash(xor(c, $salt)), ties broken by c, which is the plain rule's order (sort key, then
-- hash(item)). It is written out here rather than included from dpsu/_user_kept.sql because the
-- expressions differ (the key of a code c, the code as the tie). Private working table: it never
-- leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
user_items AS (
    SELECT user_id, list_distinct(list(hash(item))) AS items
    FROM {schema}.{source}
    WHERE item IS NOT NULL AND user_id IS NOT NULL
    GROUP BY user_id
),
-- include: dpsu/_user_kept_coded
SELECT user_id, kept, kept_count
FROM user_kept
