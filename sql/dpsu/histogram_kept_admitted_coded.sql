-- dpsu/histogram_kept_admitted.sql over coded kept lists {schema}.{kept_lists}(user_id, kept,
-- kept_count) (dpsu/user_kept_lists_coded.sql): {schema}.{admitted}(item) holds the admitted
-- items' codes (dpsu/item_codes_of.sql), and each code is mapped back to its item through
-- {schema}.{codes}(item, code) (one-to-one): the same (item, weight) table as the plain statement.
-- Exact private statistics: never leaves the run schema.
-- On SOTU-like corpora DuckDB's build_side_probe_side optimizer builds its hash table on the
-- unnested (user, code) pairs rather than on the admitted codes: the vocabulary's round 2 took
-- 0.96 s against 0.17 s with it off (docs/engines.md, "SQL written once"). At 1M users the time
-- is the same either way (3.19 and 2.65 s against 2.46 and 2.57 s, alternating).
-- duckdb-set: disabled_optimizers = 'build_side_probe_side'
CREATE OR REPLACE TABLE {schema}.{histogram} AS
WITH
-- include: dpsu/_kept_lists
coded AS (
    WITH
-- include: dpsu/_admitted_weights
)
-- include: dpsu/_decoded
