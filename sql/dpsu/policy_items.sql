-- DPSU policy input (Gopi et al. 2020, "policy" algorithms): one row per user, its kept DISTINCT
-- items as a list, and its place in the order the sequential update visits users.
-- Input {source}(user_id, item). Each user keeps at most $max_contribution of their distinct
-- items, chosen by the same fragment as sql/dpsu/histogram.sql (sql/dpsu/_user_items.sql, _user_kept.sql). Users
-- are visited in the order of a salted hash of their id ($order_salt, secret per run), so the order
-- is data-independent and adding or removing a user leaves the relative order of the others
-- unchanged (docs/dpne.md, "Policy Gaussian"); user_id breaks hash ties.
-- Private working table: it never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{target} AS
WITH
-- include: dpsu/_user_items
-- include: dpsu/_user_kept
SELECT hash(xor(hash(user_id), CAST($order_salt AS UBIGINT))) AS user_order, user_id, kept
FROM user_kept
