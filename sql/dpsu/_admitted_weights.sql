-- Fragment: the last step of a DP-SIPS round with admission (docs/dpne.md, "Admission by the first
-- round"), after the CTE user_kept (dpsu/_user_kept.sql, with the FIRST round's salt, so every
-- user's kept set is the one of round 1): each user keeps only its kept items that are in
-- {schema}.{admitted}(item) (the items whose round-1 noisy weight reached the admission floor and
-- that no round has released yet: a function of the round-1 Gaussian output only) and gives each
-- of them weight 1/sqrt(#admitted kept items). l2-sensitivity 1 given round 1's output.
kept_pairs AS (
    SELECT user_id, unnest(kept) AS item
    FROM user_kept
),
admitted_pairs AS (
    SELECT p.user_id, p.item
    FROM kept_pairs AS p
    WHERE EXISTS (SELECT 1 FROM {schema}.{admitted} AS a WHERE a.item = p.item)
),
admitted_counts AS (
    SELECT user_id, count(*) AS admitted_count
    FROM admitted_pairs
    GROUP BY user_id
)
SELECT p.item, sum(1.0 / sqrt(CAST(c.admitted_count AS DOUBLE))) AS weight
FROM admitted_pairs AS p
JOIN admitted_counts AS c ON c.user_id = p.user_id
GROUP BY p.item
