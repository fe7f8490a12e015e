-- Fragment: the CTE user_kept(user_id, kept, kept_count) from a CTE user_items(user_id, items) of
-- DISTINCT items per user (dpsu/_user_items.sql, or a per-user list table: dpsu/histogram_lists.sql),
-- shared by every DPSU histogram and the policy Gaussian, so all keep exactly the same items per
-- user. A user with at most $max_contribution items keeps them all; a larger one keeps the
-- $max_contribution items with the smallest hash(hash(item) XOR $salt), a pseudo-random order keyed
-- by a secret per-run salt (DuckDB's two-argument hash(item, salt) mixes the salt in too weakly: the
-- kept subset then depends mostly on the item, which tests/test_dpsu.py detects); ties are broken
-- by hash(item), then by the item, so that the coded lists (dpsu/user_kept_lists_coded.sql, which
-- hold hash(item) and break ties by it) keep exactly the same items. The rule depends only on the
-- user's own items, so a user's kept set is unchanged by adding or removing other users.
-- kept_count: the number of items the user keeps (<= $max_contribution).
user_kept AS (
    SELECT user_id,
           CASE
               WHEN array_length(items) <= $max_contribution THEN items
               ELSE list_transform(
                   list_slice(
                       list_sort(list_transform(
                           items,
                           lambda x: struct_pack(
                               sort_key := hash(xor(hash(x), CAST($salt AS UBIGINT))), code := hash(x), item := x
                           )
                       )),
                       1,
                       $max_contribution
                   ),
                   lambda e: e.item
               )
           END AS kept,
           CAST(least(array_length(items), $max_contribution) AS BIGINT) AS kept_count
    FROM user_items
)
