-- Fragment: the CTE user_kept(user_id, kept, kept_count) of the coded kept lists
-- (dpsu/user_kept_lists_coded.sql, user_kept_lists_coded_tokens.sql), from a CTE
-- user_items(user_id, items) of each user's DISTINCT item codes c = hash(item). dpsu/_user_kept.sql's
-- rule with the item's hash already taken: a user over $max_contribution keeps the codes with the
-- smallest hash(xor(c, $salt)), ties broken by c, which is the plain rule's order (sort key, then
-- hash(item)). The codes are hashes of the items' text, never of token ids (ids depend on the
-- whole input; a kept set must depend on the user's own items only).
user_kept AS (
    SELECT user_id,
           CASE
               WHEN array_length(items) <= $max_contribution THEN items
               ELSE list_transform(
                   list_slice(
                       list_sort(list_transform(
                           items,
                           lambda c: struct_pack(sort_key := hash(xor(c, CAST($salt AS UBIGINT))), code := c)
                       )),
                       1,
                       $max_contribution
                   ),
                   lambda e: e.code
               )
           END AS kept,
           CAST(least(array_length(items), $max_contribution) AS BIGINT) AS kept_count
    FROM user_items
)
