-- DP-SIPS round input (docs/dpne.md, "DP-SIPS"): the DPSU relation {source}(user_id, item) minus
-- the items {released}(item) released by the earlier rounds of the same release (public: they are
-- DP outputs), as an anti-join. The round's histogram is the shared weighted one
-- (dpsu/histogram.sql) over this view, so every user keeps at most Delta of its REMAINING distinct
-- items and spreads weight 1/sqrt(#kept) over them. No window: one filter over the pairs.
CREATE OR REPLACE VIEW {schema}.{target} AS
SELECT s.user_id, s.item
FROM {schema}.{source} AS s
WHERE NOT EXISTS (
    SELECT 1 FROM {schema}.{released} AS r WHERE r.item = s.item
)
