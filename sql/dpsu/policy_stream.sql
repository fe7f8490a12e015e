-- The policy input in visiting order: users by their salted order hash (ties by id), each user's
-- items in their kept order. Columns: item_rank (1 starts a user), iid (dense item id).
SELECT p.item_rank, i.iid
FROM {schema}.{pairs} AS p
JOIN {schema}.{item_ids} AS i ON p.item = i.item
ORDER BY p.user_order, p.user_id, p.item_rank
