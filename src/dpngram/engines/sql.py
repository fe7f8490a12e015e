"""DuckDB warehouse, the SQL loader, and atomic publication of releases.

* :class:`Warehouse` is the DuckDB engine (:class:`pipeline.engine.Engine`; the Spark one is
  :class:`pipeline.spark_engine.SparkEngine`). It opens the warehouse database file with bounded memory
  (``memory_limit``, ``temp_directory`` for spilling, ``preserve_insertion_order=false``). Private
  working tables of a run live in its own schema (:meth:`Warehouse.run_schema`); only DP outputs
  are ever copied out of it. One writer at a time: DuckDB locks the file for a read-write
  connection, so Airflow tasks that open it run in a one-slot pool.
* SQL lives in ``sql/*.sql``. :func:`load_sql` reads a file; identifiers (schema and table names)
  are substituted with ``{name}`` placeholders after validation, values are bound as ``$name``
  parameters, never formatted in.
* :class:`Release` stages a run's outputs under ``OUT/runs/RUN_ID.staging`` and publishes them by
  one ``rename`` to ``OUT/runs/RUN_ID`` followed by an atomic swap of the ``OUT/latest`` symlink,
  so a failed run never leaves a partial release and the previous one stays ``latest``.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

SQL_PACKAGE = "dpngram.sql"


_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def safe_identifier(name: str) -> str:
    """Validate a schema/table identifier before it is substituted into SQL text."""
    if not _IDENT_RE.match(name):
        raise ValueError(f"not a safe SQL identifier: {name!r}")
    return name


def load_sql(name: str, **identifiers: str) -> str:
    """Text of ``sql/NAME.sql`` with ``{identifier}`` placeholders filled (validated names only)."""
    text = _sql_text(name)
    return text.format(**{k: safe_identifier(v) for k, v in identifiers.items()}) if identifiers else text


@functools.cache
def _sql_text(name: str) -> str:
    """``sql/NAME.sql`` (``NAME`` is ``stage/statement``) from the installed package data."""
    return resources.files(SQL_PACKAGE).joinpath(f"{name}.sql").read_text(encoding="utf-8")


def run_schema_name(run_id: str) -> str:
    """Schema holding one run's private working tables."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", run_id)[:50]
    return safe_identifier(f"run_{cleaned}")
