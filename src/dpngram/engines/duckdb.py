"""The DuckDB engine: :class:`Warehouse`, a connection to the warehouse database file.

:class:`Warehouse` implements :class:`dpngram.engines.base.Engine` (the Spark one is
:class:`dpngram.engines.spark.SparkEngine`) and adds the DuckDB-only helpers ingest uses
(``run_sql``/``query`` by statement name, ``registered`` in-memory frames). It opens the file with
bounded memory (``memory_limit``, ``temp_directory`` for spilling,
``preserve_insertion_order=false``). Private working tables of a run live in its own schema
(:meth:`Warehouse.run_schema`); only DP outputs are ever copied out of it. One writer at a time:
DuckDB locks the file for a read-write connection, so Airflow tasks that open it run in a one-slot
pool.

Statement profile: with ``DPNGRAM_SQL_PROFILE=PATH`` in the environment, every statement the
warehouse runs appends one JSON line to PATH: the ``stage/statement`` it was loaded from
(:func:`dpngram.engines.sql.statement_name`), the operation, its start (Unix time) and its seconds
(a streamed fetch: until its last batch). Names and times only, never a value: the profile is how
the 1M-user plans were checked statement by statement (docs/engines.md, "Scale").

Owns: :class:`Warehouse` (the DuckDB connection and its resource settings, run schemas).
Imports: dpngram.engines.sql, dpngram.core.errors; duckdb, pyarrow.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from dpngram.core.errors import WarehouseBusy
from dpngram.engines.sql import load_sql, run_schema_name, safe_identifier, statement_name

#: A planner setting for one statement, written in its SQL file as a comment line
#: ``-- duckdb-set: NAME = VALUE`` (NAME a DuckDB setting, VALUE a SQL literal): this engine applies
#: it while that statement runs and restores the previous value after; other engines read a comment.
#: For plans DuckDB gets wrong from its cardinality estimates (say so beside the line, with the
#: measurement).
DUCKDB_SETTING_RE = re.compile(r"^-- duckdb-set: ([a-z_]+) = ('[^'\n]*'|[0-9A-Za-z_.]+)[ \t]*$", re.MULTILINE)

PROFILE_ENV = "DPNGRAM_SQL_PROFILE"

_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}  # DuckDB's meaning

#: Of a run's ``memory_limit`` (the PROCESS budget), this fraction is kept for the Python side
#: (Arrow batches, numpy arrays, the interpreter and its imports); DuckDB gets the rest. Bounded
#: below by :data:`PYTHON_RESERVE_MIN` and above by :data:`PYTHON_RESERVE_MAX`.
PYTHON_RESERVE_FRACTION = 0.3
PYTHON_RESERVE_MIN = 0
PYTHON_RESERVE_MAX = 3 * 1024**3


def memory_bytes(value: str) -> int:
    """``'4GB'`` -> 4_000_000_000 (DuckDB's units: KB/MB/GB powers of 1000, KiB/MiB/GiB of 1024)."""
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*$", value)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"memory_limit: must look like '4GB' or '512MB' (got {value!r})")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def duckdb_memory_limit(process_limit: str) -> str:
    """DuckDB's share of a process memory budget: the budget minus a reserve for the Python side
    (docs/engines.md, "Memory"). DuckDB obeys its own limit (it spills to ``temp_directory``); the
    reserve is what the rest of the process may use, so the peak RSS stays near the budget."""
    total = memory_bytes(process_limit)
    reserve = min(max(int(total * PYTHON_RESERVE_FRACTION), PYTHON_RESERVE_MIN), PYTHON_RESERVE_MAX)
    return f"{max(total - reserve, 128 * 1024**2) // 1024**2}MiB"


def drop_run_schema(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Drop one run's private schema and every table in it (idempotent), on any connection to the
    warehouse file (the ledger's, too)."""
    con.execute(f"DROP SCHEMA IF EXISTS {run_schema_name(run_id)} CASCADE")


class Warehouse:
    """A DuckDB connection to the warehouse file with the project's resource settings.

    ``memory_limit`` is the budget of the whole process: DuckDB is given
    :func:`duckdb_memory_limit` of it, the rest is left to Python."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        memory_limit: str = "4GB",
        threads: int | None = None,
        temp_directory: str | os.PathLike[str] | None = None,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        spill = Path(temp_directory) if temp_directory else self.path.with_name(self.path.name + ".tmp")
        config: dict[str, Any] = {
            "memory_limit": duckdb_memory_limit(memory_limit),
            "preserve_insertion_order": False,
        }
        if str(path) != ":memory:":
            spill.mkdir(parents=True, exist_ok=True)
            config["temp_directory"] = str(spill)
        if threads:
            config["threads"] = threads
        try:
            self.con = duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.IOException as err:
            first = (str(err).splitlines() or [""])[0]
            if "lock" in first.lower():
                pid = re.search(r"\(PID (\d+)\)", first)
                holder = f"process {pid.group(1)}" if pid else "another process"
                raise WarehouseBusy(
                    f"warehouse {path} is in use by {holder}; wait for it to finish or use another "
                    "--warehouse"
                ) from None
            raise RuntimeError(f"cannot open the warehouse {path}: {first}") from None
        # DuckDB's progress bar writes to stdout (a session-level option); stages report their own.
        self.con.execute("SET enable_progress_bar = false")
        self._profile = os.environ.get(PROFILE_ENV) or None

    @contextmanager
    def _timed(self, sql: str, op: str) -> Iterator[None]:
        """Append the statement's name and seconds to the profile (module docstring), if any, with
        the statement's DuckDB settings (:data:`DUCKDB_SETTING_RE`) in force while it runs."""
        with self._statement_settings(sql):
            if self._profile is None:
                yield
                return
            yield from self._profiled(sql, op)

    @contextmanager
    def _statement_settings(self, sql: str) -> Iterator[None]:
        """``SET`` each ``-- duckdb-set: NAME = VALUE`` line of ``sql`` for the block, then restore it."""
        settings = DUCKDB_SETTING_RE.findall(sql)
        if not settings:
            yield
            return
        previous = {name: self.scalar("SELECT current_setting(?)", [name]) for name, _ in settings}
        for name, value in settings:
            self.con.execute(f"SET {name} = {value}")
        try:
            yield
        finally:
            for name, value in previous.items():
                if value is None or value == "":
                    self.con.execute(f"RESET {name}")
                else:
                    quoted = "'" + str(value).replace("'", "''") + "'"
                    self.con.execute(f"SET {name} = {quoted}")

    def _profiled(self, sql: str, op: str) -> Iterator[None]:
        started = time.time()
        clock = time.perf_counter()
        try:
            yield
        finally:
            line = {
                "statement": statement_name(sql),
                "op": op,
                "start": round(started, 3),
                "seconds": round(time.perf_counter() - clock, 4),
            }
            with open(self._profile, "a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")

    # -- SQL ----------------------------------------------------------------------------------
    def run_sql(self, name: str, params: dict[str, Any] | None = None, **identifiers: str) -> None:
        """Execute every statement of ``sql/NAME.sql``."""
        sql = load_sql(name, **identifiers)
        with self._timed(sql, "execute"):
            self.con.execute(sql, params or {})

    def query(
        self, name: str, params: dict[str, Any] | None = None, **identifiers: str
    ) -> duckdb.DuckDBPyConnection:
        """Execute ``sql/NAME.sql`` (one statement) and return the cursor to fetch from."""
        sql = load_sql(name, **identifiers)
        with self._timed(sql, "query"):
            return self.con.execute(sql, params or {})

    def scalar(self, sql: str, params: dict[str, Any] | list[Any] | None = None) -> Any:
        rows = self.con.execute(sql, params or []).fetchall()  # fetchall: leave no result open
        return rows[0][0] if rows else None

    @contextmanager
    def registered(self, **views: Any) -> Iterator[None]:
        """Expose in-memory tables (Arrow tables, polars/pandas frames) to SQL under the given
        view names for the duration of the block; they are unregistered however it exits."""
        for name, data in views.items():
            self.con.register(safe_identifier(name), data)
        try:
            yield
        finally:
            for name in views:
                self.con.unregister(name)

    def table_exists(self, schema: str, table: str) -> bool:
        return bool(
            self.scalar(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                [schema, table],
            )
        )

    # -- the Engine interface (engines/base.py): SQL text from load_sql, $name parameters ------
    name = "duckdb"

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        """Run every statement of ``sql``."""
        with self._timed(sql, "execute"):
            self.con.execute(sql, params or {})

    def fetch_arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table:
        with self._timed(sql, "fetch_arrow"):
            return self.con.sql(sql, params=params or None).to_arrow_table()

    def fetch_batches(
        self, sql: str, params: dict[str, Any] | None = None, batch_rows: int = 1 << 20
    ) -> Iterator[pa.RecordBatch]:
        """Record batches of the result; at least one (empty if no row), so the schema is known."""
        with self._timed(sql, "fetch_batches"):
            reader = self.con.sql(sql, params=params or None).to_arrow_reader(batch_rows)
            empty = True
            for batch in reader:
                empty = False
                yield batch
            if empty:
                yield pa.RecordBatch.from_pylist([], schema=reader.schema)

    def fetch_numpy(self, sql: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        with self._timed(sql, "fetch_numpy"):
            return self.con.sql(sql, params=params or None).fetchnumpy()

    def fetch_scalar(self, sql: str, params: dict[str, Any] | None = None) -> Any:
        """First value of a one-row query, fully consumed (an open DuckDB 2 result would block
        the next ``con.sql`` on the connection)."""
        with self._timed(sql, "fetch_scalar"):
            rows = self.con.sql(sql, params=params or None).fetchall()
        return rows[0][0] if rows else None

    def object_type(self, schema: str, name: str) -> str | None:
        return self.fetch_scalar(load_sql("dpne/object_type"), {"schema": schema, "name": name})

    def drop(self, schema: str, *names: str) -> None:
        """Drop private working tables or views (whichever each name is)."""
        for table in names:
            kind = self.object_type(schema, table)
            if kind is not None:
                self.con.execute(
                    f"DROP {'VIEW' if kind == 'VIEW' else 'TABLE'} "
                    f"{safe_identifier(schema)}.{safe_identifier(table)}"
                )

    def create_schema(self, schema: str) -> None:
        self.con.execute(f"CREATE SCHEMA IF NOT EXISTS {safe_identifier(schema)}")

    def write_parquet(self, sql: str, path: str, params: dict[str, Any] | None = None) -> None:
        with self._timed(sql, "write_parquet"):
            self.con.sql(sql, params=params or None).write_parquet(str(path))

    def load_table(self, schema: str, table: str, batches: Iterable[pa.Table], columns: pa.Schema) -> None:
        target = f"{safe_identifier(schema)}.{safe_identifier(table)}"
        with self.registered(load_table_batch=columns.empty_table()):
            self.con.execute(f"CREATE OR REPLACE TABLE {target} AS SELECT * FROM load_table_batch")
        for batch in batches:
            with self.registered(load_table_batch=batch.select(columns.names).cast(columns)):
                self.con.execute(f"INSERT INTO {target} SELECT * FROM load_table_batch")

    # -- run schemas --------------------------------------------------------------------------
    def run_schema(self, run_id: str) -> str:
        schema = run_schema_name(run_id)
        self.con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        return schema

    def drop_run_schema(self, run_id: str) -> None:
        drop_run_schema(self.con, run_id)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
