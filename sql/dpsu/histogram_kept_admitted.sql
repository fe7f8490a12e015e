-- DP-SIPS round r >= 2 with admission from the kept lists {schema}.{kept_lists}(user_id, kept,
-- kept_count) (dpsu/user_kept_lists.sql, round 1's kept sets): the same histogram as
-- dpsu/histogram_admitted.sql over the relation the lists were built from. Exact private
-- statistics: never leaves the run schema.
-- On SOTU-like corpora DuckDB's build_side_probe_side optimizer builds its hash table on the
-- unnested (user, item) pairs rather than on the admitted items (docs/engines.md, "SQL written
-- once"; the coded twin, dpsu/histogram_kept_admitted_coded.sql, measures both sizes).
-- duckdb-set: disabled_optimizers = 'build_side_probe_side'
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH
-- include: dpsu/_kept_lists
-- include: dpsu/_admitted_weights
