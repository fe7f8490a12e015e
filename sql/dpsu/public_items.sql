-- The vocabulary's public domain's keys (public data), for DP-SIPS admission: public words are
-- admitted to the later rounds whatever their round-1 noise (docs/dpne.md, "Admission by the first
-- round").
SELECT item FROM {schema}.{table}
