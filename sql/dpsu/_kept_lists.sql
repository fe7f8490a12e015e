-- Fragment: the CTE user_kept(user_id, kept, kept_count) read from a kept-lists table
-- {schema}.{kept_lists} (dpsu/user_kept_lists.sql or user_kept_lists_coded.sql), as the histograms
-- over those lists (dpsu/histogram_kept*.sql) start.
user_kept AS (
    SELECT user_id, kept, kept_count FROM {schema}.{kept_lists}
),
