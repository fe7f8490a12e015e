"""The engine abstraction: where the heavy SQL stages run (DuckDB embedded, or Apache Spark).

The stages and mechanisms (ingest, the DPSU vocabulary, every DPNE level, the Bayesian and Chen
count aggregations) talk to an :class:`Engine`: a small set of operations over SQL text loaded
from ``sql/<stage>/<statement>.sql`` (:func:`dpngram.engines.sql.load_sql`), so the SQL is written
once, in DuckDB's dialect. Two implementations:

* :class:`dpngram.engines.duckdb.Warehouse` — DuckDB (default): the warehouse file, run-scoped
  schemas.
* :class:`dpngram.engines.spark.SparkEngine` — a SparkSession (``local[*]`` or a cluster master);
  the same SQL text is transpiled once per statement with ``sqlglot`` (read="duckdb",
  write="spark") plus a few documented rewrites, and cached. See ``docs/engines.md``.

Noise never runs inside an engine: the aggregated, user-free histogram is streamed out of it
(``fetch_batches``) and the noise is drawn on the driver with :mod:`dpngram.core.noise`.

Owns: the :class:`Engine` protocol, ``ENGINES`` (the engine names), :func:`is_remote_path`,
:func:`resource_failure` (is an exception an engine's out-of-memory / disk / I/O failure),
:func:`list_arrays` (a streamed list column as numpy offsets and values).
Imports: nothing from dpngram; numpy, pyarrow.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

ENGINES = ("duckdb", "spark")


_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_remote_path(path: str) -> bool:
    """True for a Hadoop-style URI other than ``file://`` (``hdfs://``, ``s3a://``, ``gs://``,
    ...): only the Spark engine reads and writes those."""
    text = str(path)
    return bool(_URI_SCHEME.match(text)) and not text.startswith("file://")


def list_arrays(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A streamed batch's list column as (offsets, values), both int64 and rebased to the batch:
    row i's values are ``values[offsets[i]:offsets[i + 1]]`` (what the compiled per-user kernels
    take; a sliced batch's values buffer can start before its first row)."""
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = np.asarray(column.values, dtype=np.int64)[offsets[0] : offsets[-1]]
    return offsets - offsets[0], values


ObjectType = Literal["BASE TABLE", "VIEW"]


#: DuckDB's exception classes that mean "out of a resource" (``duckdb.OutOfMemoryException``,
#: ``duckdb.IOException``: e.g. the spill file could not be written), by class name.
_DUCKDB_RESOURCE = {"OutOfMemoryException": "memory", "IOException": "io"}


def resource_failure(err: BaseException) -> str | None:
    """'memory', 'disk' or 'io' when ``err`` (or an exception it was raised from) is a resource
    failure of an engine or of the driver: DuckDB's out-of-memory or I/O exception, a Java
    ``OutOfMemoryError`` reported by Spark, Python's :class:`MemoryError`, an :class:`OSError` for a
    full disk or quota. None otherwise. Classification only: the exception's message (which may
    quote sizes or values of the private data) is read here, never repeated."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        kind = _resource_kind(current)
        if kind is not None:
            return kind
        current = current.__cause__ or current.__context__
    return None


def _resource_kind(err: BaseException) -> str | None:
    if isinstance(err, MemoryError):
        return "memory"
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk"
    cls = type(err)
    module = (cls.__module__ or "").split(".")[0]
    if module in ("duckdb", "_duckdb"):
        return _DUCKDB_RESOURCE.get(cls.__name__)
    if module in ("pyspark", "py4j") and "java.lang.OutOfMemoryError" in str(err):
        return "memory"
    return None


@runtime_checkable
class Engine(Protocol):
    """What the heavy stages need from an engine. ``sql`` is text from :func:`load_sql`
    (identifiers already substituted and validated); values are bound from ``params`` ($name)."""

    name: str

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        """Run every statement of ``sql`` (DDL / CREATE TABLE AS / CREATE VIEW / DROP)."""

    def fetch_arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table:
        """Result of one SELECT as an Arrow table (for small, public or released results)."""

    def fetch_batches(
        self, sql: str, params: dict[str, Any] | None = None, batch_rows: int = 1 << 20
    ) -> Iterator[pa.RecordBatch]:
        """Stream a SELECT's result in Arrow record batches (bounded driver memory)."""

    def fetch_numpy(self, sql: str, params: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Result of one SELECT as numpy columns."""

    def fetch_scalar(self, sql: str, params: dict[str, Any] | None = None) -> Any:
        """First value of a one-row SELECT (None if no row)."""

    def registered(self, **views: Any) -> AbstractContextManager[None]:
        """Expose in-memory Arrow tables as views for the duration of a ``with`` block."""

    def object_type(self, schema: str, name: str) -> ObjectType | None:
        """'BASE TABLE', 'VIEW' or None: what ``schema.name`` is, if it exists."""

    def table_exists(self, schema: str, table: str) -> bool: ...

    def drop(self, schema: str, *names: str) -> None:
        """Drop tables or views (whichever each name is; missing names are ignored)."""

    def create_schema(self, schema: str) -> None: ...

    def write_parquet(self, sql: str, path: str, params: dict[str, Any] | None = None) -> None:
        """Write a SELECT's result to Parquet at ``path`` (a file for DuckDB, a directory for Spark)."""

    def load_table(self, schema: str, table: str, batches: Iterable[pa.Table], columns: pa.Schema) -> None:
        """Create (or replace) ``schema.table`` with ``columns`` from driver-side Arrow batches
        (public data or DP outputs the driver holds: a public corpus, a released vocabulary),
        streamed batch by batch; no batch gives an empty table."""

    def close(self) -> None: ...
