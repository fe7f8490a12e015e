-- The run's sentences {schema}.{source}(user_id, tids), as token ids, with each user's integer id from
-- {schema}.{users}(user_id, uid) (numbering/users.sql) as user_id, for
-- bayes/private_user_counts.sql: its per-user GROUP BY and window then key on an integer instead of
-- the VARCHAR id (at 1M users 42 s against 59 s for that statement, docs/engines.md "Scale").
-- PRIVATE: a view inside the run schema.
CREATE OR REPLACE VIEW {schema}.{target} AS
SELECT u.uid AS user_id, s.tids
FROM {schema}.{source} AS s
JOIN {schema}.{users} AS u ON u.user_id = s.user_id
