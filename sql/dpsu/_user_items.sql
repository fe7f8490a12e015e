-- Fragment: the CTE user_items(user_id, items) shared by dpsu/histogram.sql (weighted policy) and
-- dpsu/policy_items.sql (policy Gaussian): per user, one list of its DISTINCT items of
-- {schema}.{source}(user_id, item) (duplicates and NULLs allowed there). A GROUP BY user_id: no
-- window and no global DISTINCT over every (user, item) pair, which at 1M users x ~70 items spilled
-- tens of GB. Followed by dpsu/_user_kept.sql, which reads user_items.
user_items AS (
    SELECT user_id, list_distinct(list(item)) AS items
    FROM {schema}.{source}
    WHERE item IS NOT NULL AND user_id IS NOT NULL
    GROUP BY user_id
),
