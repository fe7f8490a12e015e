-- Fragment: the end of a coded histogram (dpsu/histogram_kept_coded.sql,
-- histogram_kept_admitted_coded.sql), after a CTE coded(item, weight) whose items are codes: each
-- code mapped back to its item through {schema}.{codes}(item, code) (dpsu/item_codes.sql, one-to-one).
SELECT c.item, w.weight
FROM coded AS w
JOIN {schema}.{codes} AS c ON c.code = w.item
