"""Layer ``engines``: where the heavy SQL runs (DuckDB embedded, or Apache Spark).

``base.py`` the :class:`~dpngram.engines.base.Engine` protocol; ``duckdb.py``
:class:`~dpngram.engines.duckdb.Warehouse`; ``spark.py`` ``SparkEngine`` and the sqlglot
transpilation; ``sql.py`` :func:`~dpngram.engines.sql.load_sql`; ``ingest.py`` loading records into
the run schema; ``select.py`` :func:`~dpngram.engines.select.open_engine`.

Owns: the engine protocol and its implementations, SQL loading, loading ingested records.
Imports: dpngram.text, dpngram.config, dpngram.core.
"""
