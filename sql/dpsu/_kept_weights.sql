-- Fragment: the weighted-Gaussian histogram's last step, after the CTE user_kept
-- (dpsu/_user_kept.sql): every kept item gets weight 1/sqrt(|kept|) from its user, summed per item
-- (l2-sensitivity 1). Ends the statements dpsu/histogram.sql, histogram_lists.sql and
-- histogram_lists_remaining.sql.
kept_items AS (
    SELECT unnest(kept) AS item, kept_count
    FROM user_kept
)
SELECT item, sum(1.0 / sqrt(CAST(kept_count AS DOUBLE))) AS weight
FROM kept_items
GROUP BY item
