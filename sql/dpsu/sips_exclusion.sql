-- DP-SIPS round of a DPNE level, scalable variant (docs/dpne.md, "DP-SIPS"): the k-grams the
-- round's spurious sampler must reject, supp(H_r) (this round's private histogram) together with
-- the k-grams released by earlier rounds. The two are disjoint (the round's input excludes the
-- released ones). Private view: it never leaves the run schema.
CREATE OR REPLACE VIEW {schema}.{target} AS
SELECT item FROM {schema}.{histogram}
UNION ALL
SELECT item FROM {schema}.{released}
