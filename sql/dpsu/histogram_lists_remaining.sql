-- DP-SIPS round r >= 2 from per-user lists {schema}.{lists}(user_id, items) (docs/dpne.md,
-- "DP-SIPS"): each user's list minus the items {released}(item) of the earlier rounds (public: DP
-- outputs), then the weighted histogram exactly as dpsu/histogram.sql over dpsu/sips_remaining.sql
-- (at most $max_contribution of the REMAINING distinct items, weight 1/sqrt(#kept)). A user with no
-- remaining item contributes nothing. Unnesting the lists (distinct items) is cheaper than
-- re-reading every token occurrence. Exact private statistics: never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH
user_items AS (
    SELECT user_id, list(item) AS items
    FROM (SELECT user_id, unnest(items) AS item FROM {schema}.{lists}) AS pairs
    WHERE NOT EXISTS (
        SELECT 1 FROM {schema}.{released} AS r WHERE r.item = pairs.item
    )
    GROUP BY user_id
),
-- include: dpsu/_user_kept
,
-- include: dpsu/_kept_weights
