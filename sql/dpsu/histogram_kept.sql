-- DP-SIPS round 1 with admission from the kept lists {schema}.{kept_lists}(user_id, kept,
-- kept_count) (dpsu/user_kept_lists.sql): the same histogram as dpsu/histogram.sql with that
-- salt (every kept item gets weight 1/sqrt(kept_count); l2-sensitivity 1). Exact private
-- statistics: this table never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH
-- include: dpsu/_kept_lists
-- include: dpsu/_kept_weights
