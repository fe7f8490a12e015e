-- DP-SIPS round r >= 2 with admission (docs/dpne.md, "Admission by the first round") over the DPSU
-- relation {schema}.{source}(user_id, item): each user's kept set by the shared rule with round 1's
-- salt (dpsu/_user_items.sql, _user_kept.sql), restricted to the admitted items
-- (dpsu/_admitted_weights.sql). Exact private statistics: never leaves the run schema.
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH
-- include: dpsu/_user_items
-- include: dpsu/_user_kept
,
-- include: dpsu/_admitted_weights
