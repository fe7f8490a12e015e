-- The support of a policy input (every item some user kept), sorted: item i of this list has dense
-- id i in the sequential update's weight array (the driver maps each user's kept items to these
-- ids itself, so no (user, item) pair is joined or re-grouped in SQL: at 1M users that join and
-- regrouping cost about 40 CPU-seconds at level 2). Private: it sizes the driver's weight array
-- and never leaves the driver's memory.
SELECT item
FROM (SELECT unnest(kept) AS item FROM {schema}.{pairs}) AS kept_items
GROUP BY item
ORDER BY item
