"""SQL statements, one folder per stage, run on DuckDB or (transpiled by sqlglot) on Spark.

Shipped inside the installed package as ``dpngram.sql`` data; read with
:func:`dpngram.engines.sql.load_sql` (``load_sql("dpne/level_table", ...)``).

Owns: the SQL text of every stage (``sql/<stage>/<statement>.sql``, DuckDB dialect); no code.
Imports: nothing.
"""
