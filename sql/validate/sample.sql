-- Validation: a bounded random sample (at most 200,000 rows) of a table or view, for row-level
-- Great Expectations checks. Row-level checks never need the whole table in memory; whole-table
-- properties are computed in SQL by the validate_*_aggregates queries instead.
SELECT *
FROM {source} TABLESAMPLE (200000 ROWS);
