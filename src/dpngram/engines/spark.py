"""The Spark engine: the heavy stages on Apache Spark (PySpark 4.x), from the same ``sql/`` files.

Design (``docs/engines.md`` has the full argument):

* **SQL**: every statement loaded by :func:`dpngram.engines.sql.load_sql` (DuckDB dialect) is parsed
  and rewritten once with ``sqlglot`` (read="duckdb", write="spark") and cached by text
  (:func:`to_spark`). On top of sqlglot's translation, seven rewrites are applied, each because
  the dialects disagree on meaning, not just spelling:

  - ``list[i]`` -> ``element_at(list, i)``: DuckDB lists are 1-based, Spark's ``[]`` is 0-based
    (sqlglot 30 leaves the bracket unchanged), ``element_at`` is 1-based;
  - ``hash(x)`` -> ``xxhash64(x)``: DuckDB's 64-bit hash; Spark's ``hash`` is 32-bit murmur3.
    The values differ across engines (the salted Delta-subset of an over-contributing user is
    a different pseudo-random subset: both are data-independent selections, see
    :mod:`dpngram.mechanisms.dpsu`);
  - ``CAST(x AS UBIGINT)`` -> ``CAST(x AS BIGINT)`` (Spark has no unsigned types; salts are
    < 2^62);
  - ``list_slice(l, a, b)`` -> ``slice(l, a, b - a + 1)`` (Spark takes a length);
  - ``list(v ORDER BY k)`` -> ``transform(array_sort(collect_list(struct(k, v))), e -> e.v)``
    (sqlglot drops the ORDER BY, and Spark's collect_list keeps no order);
  - ``list_sum(l)`` -> ``aggregate(l, CAST(0 AS DOUBLE), (acc, v) -> acc + v)`` (Spark has no
    list sum; sqlglot leaves the name unchanged);
  - several aliased ``unnest(list) AS x`` in one SELECT (DuckDB unnests them in lockstep) ->
    one ``inline(arrays_zip(...)) AS (x, ...)`` (Spark allows one generator per SELECT).

  and one that only drops a planning hint: ``WITH t AS MATERIALIZED (...)`` -> ``WITH t AS (...)``
  (DuckDB's hint to run a CTE on its own; Spark has no such syntax, and the result is the same).

* **Tables**: a run schema is a Spark database in the session catalog; each table is a Parquet
  directory ``{root}/{schema}/{table}`` registered as an external table. ``CREATE OR REPLACE
  TABLE t AS SELECT`` writes the SELECT to a fresh directory first, then swaps it in, so a
  statement may read the table it replaces. Views are Spark views whose (transpiled) text is
  also saved under ``{root}/{schema}/_views/``. A new engine (a new Airflow task, a new
  process) re-registers both from ``{root}``, so stages hand tables to each other exactly as
  with DuckDB's file. ``root`` is any Hadoop-compatible URI (local, ``hdfs://``, ``s3a://``):
  files are moved with the Hadoop FileSystem API, never with Python file calls.

* **Noise**: never inside Spark. The histogram H(item, weight) is a function of the data in
  which every user's contribution is already bounded (l2 norm <= 1); it is streamed to the
  driver (:meth:`SparkEngine.fetch_batches`, bounded chunks) and :mod:`dpngram.core.noise` adds the
  noise there, from one CSPRNG-seeded source. No partition draws random numbers, so there is
  no per-partition seeding to get wrong, and retries of Spark tasks cannot change the release.

* **Ingest**: in :mod:`dpngram.engines.spark_ingest` (JSONL or Parquet from any Hadoop-compatible
  path, numbered, classified and tokenized by the same code as the DuckDB path).

* **Ledger**: the privacy ledger is its own store (:mod:`dpngram.release.ledger_store`), written by
  the driver, the same for DuckDB and Spark runs; a Spark run needs no DuckDB file.

Owns: :class:`SparkEngine`, the DuckDB -> Spark SQL transpilation (:func:`to_spark`), the Spark
session set-up.
Imports: dpngram.engines (duckdb, sql), dpngram.config; pyspark, sqlglot, pyarrow, numpy.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import sqlglot
from sqlglot import exp

from dpngram.config import RunConfig
from dpngram.engines.sql import run_schema_name, safe_identifier

_PARAM_RE = re.compile(r":([A-Za-z_][A-Za-z0-9_]*)")


VIEWS_DIR = "_views"


class SparkSqlError(RuntimeError):
    """A statement the Spark engine cannot run (one line; no data in the message)."""


# ----------------------------------------------------------------------------------------------
# SQL: DuckDB dialect -> Spark
# ----------------------------------------------------------------------------------------------
def _rewrite(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
        return exp.Anonymous(this="element_at", expressions=[node.this, node.expressions[0]])
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "hash" and len(node.expressions) == 1:
        return exp.Anonymous(this="xxhash64", expressions=list(node.expressions))
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "list_slice":
        arr, start, stop = node.expressions
        length = exp.Add(
            this=exp.Sub(this=stop.copy(), expression=start.copy()), expression=exp.Literal.number(1)
        )
        return exp.Anonymous(this="slice", expressions=[arr, start, exp.Paren(this=length)])
    if (
        isinstance(node, exp.Anonymous)
        and str(node.this).lower() == "list_sum"
        and len(node.expressions) == 1
    ):
        (values,) = node.expressions
        total = sqlglot.parse_one(
            "aggregate(list_sum_arg, CAST(0 AS DOUBLE), (acc, v) -> acc + v)", read="spark"
        )
        return total.transform(
            lambda n: values.copy() if isinstance(n, exp.Column) and n.name == "list_sum_arg" else n
        )
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.UBIGINT:
        return exp.DataType.build("BIGINT")
    if isinstance(node, exp.ArrayAgg) and isinstance(node.this, exp.Order):
        return _ordered_list(node.this)
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)  # a DuckDB planning hint; Spark has no MATERIALIZED CTEs
    if isinstance(node, exp.Select):
        return _lockstep_unnests(node)
    return node


def _lockstep_unnests(select: exp.Select) -> exp.Select:
    """DuckDB ``SELECT k, unnest(a) AS x, unnest(b) AS y`` (lists unnested in lockstep: row i
    holds a[i], b[i]) -> Spark ``SELECT k, inline(arrays_zip(a, b)) AS (x, y)``: Spark allows one
    generator per SELECT. Aliased unnests only (the aliases name the output columns)."""
    unnests = [e for e in select.expressions if isinstance(e, exp.Alias) and isinstance(e.this, exp.Explode)]
    if len(unnests) < 2:
        return select
    zipped = exp.Aliases(
        this=exp.Inline(this=exp.ArraysZip(expressions=[e.this.this.copy() for e in unnests])),
        expressions=[exp.to_identifier(e.alias) for e in unnests],
    )
    first = select.expressions.index(unnests[0])
    kept = [e for e in select.expressions if e not in unnests]
    kept.insert(first, zipped)
    select.set("expressions", kept)
    return select


def _ordered_list(order: exp.Order) -> exp.Expression:
    """DuckDB ``list(v ORDER BY k1, k2)`` -> ``transform(array_sort(collect_list(struct(k1, k2,
    v))), e -> e.v)``: Spark's collect_list keeps no order (sqlglot drops the ORDER BY), and sorting
    the structs orders by their fields left to right. Ascending keys only."""
    keys = []
    for ordered in order.expressions:
        if ordered.args.get("desc"):
            raise SparkSqlError("list(... ORDER BY ... DESC) is not supported on Spark")
        keys.append(ordered.this.sql(dialect="spark"))
    fields = ", ".join(
        [*(f"{k} AS k{i}" for i, k in enumerate(keys)), f"{order.this.sql(dialect='spark')} AS v"]
    )
    return sqlglot.parse_one(
        f"TRANSFORM(ARRAY_SORT(COLLECT_LIST(STRUCT({fields}))), dpngram_e -> dpngram_e.v)", read="spark"
    )


@lru_cache(maxsize=512)
def to_spark(sql: str) -> tuple[tuple[str, str], ...]:
    """Transpile DuckDB SQL text to Spark statements, cached by text: ``((kind, sql), ...)`` with
    kind one of ``ctas`` (sql = the SELECT, plus the target in ``kind``), ``view``, ``drop``,
    ``select``. CREATE TABLE AS / VIEW targets are returned as ``ctas:schema.table`` /
    ``view:schema.view``."""
    out: list[tuple[str, str]] = []
    for statement in sqlglot.parse(sql, read="duckdb"):
        if statement is None:
            continue
        for _ in range(8):  # to a fixpoint: a rewritten node's children are rewritten next pass
            before = statement.sql(dialect="duckdb")
            statement = statement.transform(_rewrite)
            if statement.sql(dialect="duckdb") == before:
                break
        if isinstance(statement, exp.Create):
            kind = (statement.args.get("kind") or "").upper()
            target = statement.this
            if isinstance(target, exp.Schema):  # CREATE TABLE t (col type, ...): DDL
                raise SparkSqlError("CREATE TABLE with a column list is not supported on Spark")
            name = target.sql(dialect="spark")
            body = statement.expression
            if body is None:
                raise SparkSqlError(f"CREATE {kind} without AS SELECT is not supported on Spark")
            out.append((f"{'ctas' if kind == 'TABLE' else 'view'}:{name}", body.sql(dialect="spark")))
        elif isinstance(statement, exp.Drop):
            if (statement.args.get("kind") or "").upper() not in ("TABLE", "VIEW"):
                raise SparkSqlError("only DROP TABLE / DROP VIEW are supported on Spark")
            targets = statement.args.get("tables") or [statement.this]
            out.extend((f"drop:{t.sql(dialect='spark')}", "") for t in targets if t is not None)
        elif isinstance(statement, (exp.Select, exp.Union, exp.Subquery)):
            out.append(("select", statement.sql(dialect="spark")))
        else:
            raise SparkSqlError(f"{type(statement).__name__} statements are not supported on Spark")
    return tuple(out)


def _args(sql: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """Only the parameters a statement uses (Spark named parameter markers ``:name``)."""
    if not params:
        return {}
    used = set(_PARAM_RE.findall(sql))
    return {k: v for k, v in params.items() if k in used}


def _split_name(qualified: str) -> tuple[str, str]:
    parts = qualified.replace("`", "").split(".")
    if len(parts) != 2:
        raise SparkSqlError(f"tables must be schema-qualified on Spark (got {qualified})")
    return safe_identifier(parts[0]), safe_identifier(parts[1])


# ----------------------------------------------------------------------------------------------
# Session
# ----------------------------------------------------------------------------------------------
def java_available() -> bool:
    """True if a Java runtime is on PATH or JAVA_HOME (Spark needs one)."""
    import shutil

    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and (Path(home) / "bin" / "java").exists()))


def default_conf(master: str, local_dir: str | None = None) -> dict[str, str]:
    """Session settings for a one-machine run; cluster runs override them with ``spark_conf``."""
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.adaptive.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
    }
    if master.startswith("local"):
        conf.update(
            {
                "spark.sql.shuffle.partitions": "8",
                "spark.driver.memory": "4g",
                "spark.ui.enabled": "false",
                "spark.pyspark.python": sys.executable,
                "spark.pyspark.driver.python": sys.executable,
            }
        )
        if local_dir:
            conf["spark.local.dir"] = local_dir
    return conf


def spark_session(master: str = "local[2]", conf: dict[str, str] | None = None, app: str = "dpngram") -> Any:
    """A SparkSession (created, or the active one if it exists). Quiet logs."""
    from pyspark.sql import SparkSession

    if not java_available():
        raise RuntimeError("the Spark engine needs Java (17+): install a JRE or set JAVA_HOME")
    if master.startswith("local"):  # workers run this interpreter (polars, pyarrow, dpngram)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in {**default_conf(master), **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    ship_package(session)
    global _STOP_REGISTERED
    if not _STOP_REGISTERED:  # one session per process (an Airflow task, or a whole CLI run)
        import atexit

        atexit.register(_stop_active)
        _STOP_REGISTERED = True
    return session


_STOP_REGISTERED = False


def _stop_active() -> None:
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def ship_package(spark: Any) -> None:
    """Make ``dpngram`` importable in the Python workers (the ingest tokenizer runs there): a zip
    of the package is added to the SparkContext once (``addPyFile``; executors of a cluster
    download it). Its dependencies (polars, pyarrow) must be installed on the executors."""
    import tempfile
    import zipfile

    context = spark.sparkContext
    if getattr(context, "_dpngram_shipped", False):
        return
    import dpngram

    package = Path(dpngram.__file__).resolve().parent
    target = Path(tempfile.mkdtemp(prefix="dpngram-pyfiles-")) / "dpngram.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for source in sorted(package.rglob("*.py")):
            archive.write(source, Path("dpngram") / source.relative_to(package))
    context.addPyFile(str(target))
    context._dpngram_shipped = True


def default_root(warehouse: str) -> str:
    """Where the Spark engine keeps a run's private tables by default: in the warehouse
    directory, ``WAREHOUSE/spark``."""
    return str(Path(warehouse).resolve() / "spark")


# ----------------------------------------------------------------------------------------------
# The engine
# ----------------------------------------------------------------------------------------------
class SparkEngine:
    """:class:`dpngram.engines.base.Engine` on a SparkSession; tables are Parquet under ``root``."""

    name = "spark"

    def __init__(
        self,
        spark: Any,
        root: str,
        *,
        owns_session: bool = False,
        batch_rows: int = 1 << 20,
    ) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.owns_session = owns_session
        self.batch_rows = batch_rows
        self._registered_schemas: set[str] = set()
        jvm = spark.sparkContext._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._Path(self.root).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        self._fs.mkdirs(self._Path(self.root))
        ship_package(spark)

    @classmethod
    def for_config(cls, config: RunConfig, *, spark: Any = None) -> SparkEngine:
        """The engine of a run: session from ``spark_master``/``spark_conf`` (or ``spark``), tables
        under ``spark_warehouse`` (default: ``WAREHOUSE/spark``)."""
        assert config.warehouse
        root = config.engine.spark_warehouse or default_root(config.warehouse)
        owns = spark is None
        if spark is None:
            conf = config.engine.spark_settings()
            conf.setdefault("spark.sql.warehouse.dir", root.rstrip("/") + "/_spark_sql")
            spark = spark_session(config.engine.spark_master, conf)
        return cls(spark, root, owns_session=owns)

    def run_schema(self, run_id: str) -> str:
        schema = run_schema_name(run_id)
        self.create_schema(schema)
        return schema

    # -- storage ------------------------------------------------------------------------------
    def _p(self, *parts: str) -> Any:
        return self._Path("/".join([self.root, *parts]))

    def _table_dir(self, schema: str, table: str) -> str:
        return f"{self.root}/{schema}/{table}"

    def _write_text(self, path: Any, text: str) -> None:
        out = self._fs.create(path, True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def _read_text(self, path: Any) -> str:
        stream = self._fs.open(path)
        reader = self.spark.sparkContext._jvm.java.io.BufferedReader(
            self.spark.sparkContext._jvm.java.io.InputStreamReader(stream, "UTF-8")
        )
        lines = []
        try:
            while (line := reader.readLine()) is not None:
                lines.append(line)
        finally:
            reader.close()
        return "\n".join(lines)

    def create_schema(self, schema: str) -> None:
        """Create the database and register the tables/views stored under ``root/schema``."""
        schema = safe_identifier(schema)
        if schema in self._registered_schemas:
            return
        self._registered_schemas.add(schema)
        if self.spark.catalog.databaseExists(schema):
            # Same session (e.g. the CLI running stage after stage): every change went through
            # an engine on this session, so its catalog is already current.
            return
        self.spark.sql(f"CREATE DATABASE IF NOT EXISTS {schema}")
        base = self._p(schema)
        if not self._fs.exists(base):
            self._fs.mkdirs(base)
            return
        for status in self._fs.listStatus(base):
            name = status.getPath().getName()
            if status.isDirectory() and not name.startswith((".", "_")):
                self._register_table(schema, name)
        views_dir = self._p(schema, VIEWS_DIR)
        if self._fs.exists(views_dir):
            pending = {
                s.getPath().getName().removesuffix(".sql"): self._read_text(s.getPath())
                for s in self._fs.listStatus(views_dir)
                if s.getPath().getName().endswith(".sql")
            }
            while pending:  # views may reference views: create in dependency order
                progressed = False
                for view, body in list(pending.items()):
                    try:
                        self.spark.sql(f"CREATE OR REPLACE VIEW {schema}.{view} AS {body}")
                    except Exception:  # noqa: BLE001 - a dependency is not created yet
                        continue
                    del pending[view]
                    progressed = True
                if not progressed:  # stale views over dropped tables: forget them
                    for view in pending:
                        self._fs.delete(self._p(schema, VIEWS_DIR, f"{view}.sql"), False)
                    break

    def _register_table(self, schema: str, table: str, columns: Any = None) -> None:
        """Register ``root/schema/table`` as an external Parquet table (``columns``: its Spark
        schema when known, which spares Spark a job reading the footers)."""
        self.spark.sql(f"DROP TABLE IF EXISTS {schema}.{table}")
        location = self._table_dir(schema, table)
        if columns is None:
            self.spark.sql(f"CREATE TABLE {schema}.{table} USING parquet LOCATION '{location}'")
        else:
            self.spark.catalog.createTable(
                f"{schema}.{table}", path=location, source="parquet", schema=columns
            )

    def materialize(self, schema: str, table: str, df: Any) -> None:
        """Write a DataFrame as table ``schema.table`` (replacing it; it may read the old one)."""
        schema, table = safe_identifier(schema), safe_identifier(table)
        self.create_schema(schema)
        tmp = self._staging_dir(schema, table)
        df.write.mode("overwrite").parquet(tmp)
        self._swap_in(schema, table, tmp, df.schema)

    def _staging_dir(self, schema: str, table: str) -> str:
        return f"{self.root}/{schema}/.{table}.{uuid.uuid4().hex[:12]}"

    def _swap_in(self, schema: str, table: str, tmp: str, columns: Any) -> None:
        """Replace table ``schema.table`` by the Parquet directory ``tmp``."""
        self.drop(schema, table)
        final = self._p(schema, table)
        if self._fs.exists(final):
            self._fs.delete(final, True)
        if not self._fs.rename(self._Path(tmp), final):
            raise RuntimeError(f"cannot move a Spark table into place: {schema}.{table}")
        self._register_table(schema, table, columns)

    def load_table(self, schema: str, table: str, batches: Iterable[pa.Table], columns: pa.Schema) -> None:
        """Driver-side Arrow batches (public data, DP outputs) appended one by one to a fresh
        Parquet directory, then swapped in as ``schema.table``."""
        schema, table = safe_identifier(schema), safe_identifier(table)
        self.create_schema(schema)
        tmp = self._staging_dir(schema, table)
        spark_columns = None
        for batch in batches:
            frame = self.spark.createDataFrame(batch.select(columns.names).cast(columns))
            spark_columns = frame.schema
            frame.write.mode("append").parquet(tmp)
        if spark_columns is None:  # no batch: an empty table with the declared columns
            frame = self.spark.createDataFrame(columns.empty_table())
            spark_columns = frame.schema
            frame.write.mode("overwrite").parquet(tmp)
        self._swap_in(schema, table, tmp, spark_columns)

    # -- Engine interface ---------------------------------------------------------------------
    def sql(self, sql: str, params: dict[str, Any] | None = None) -> Any:
        """DataFrame of one SELECT (DuckDB SQL text, transpiled)."""
        statements = to_spark(sql)
        if len(statements) != 1 or statements[0][0] != "select":
            raise SparkSqlError("expected exactly one SELECT statement")
        spark_sql = statements[0][1]
        return self.spark.sql(spark_sql, args=_args(spark_sql, params) or None)

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        for kind, body in to_spark(sql):
            if kind.startswith("ctas:"):
                schema, table = _split_name(kind.removeprefix("ctas:"))
                self.materialize(schema, table, self.spark.sql(body, args=_args(body, params) or None))
            elif kind.startswith("view:"):
                schema, view = _split_name(kind.removeprefix("view:"))
                self.create_schema(schema)
                if _args(body, params):
                    raise SparkSqlError("views cannot take parameters on Spark")
                if self.object_type(schema, view) == "BASE TABLE":
                    self.drop(schema, view)
                self.spark.sql(f"CREATE OR REPLACE VIEW {schema}.{view} AS {body}")
                self._write_text(self._p(schema, VIEWS_DIR, f"{view}.sql"), body)
            elif kind.startswith("drop:"):
                self.drop(*_split_name(kind.removeprefix("drop:")))
            else:
                self.spark.sql(body, args=_args(body, params) or None).collect()

    def fetch_arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table:
        return self.sql(sql, params).toArrow()

    def fetch_batches(
        self, sql: str, params: dict[str, Any] | None = None, batch_rows: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Stream a result to the driver in chunks of about ``batch_rows`` rows: the result is
        split by ``pmod(xxhash64(first column), chunks)`` and each chunk is collected (and kept
        in the query's order) in turn, so driver memory is bounded by one chunk."""
        batch_rows = batch_rows or self.batch_rows
        df = self.sql(sql, params)
        total = df.count()
        chunks = max(1, -(-total // batch_rows))
        if chunks == 1:
            table = df.toArrow()
            batches = table.to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]
            yield from batches
            return
        from pyspark.sql import functions as F

        first = df.columns[0]
        bucket = F.pmod(F.xxhash64(F.col(first)), F.lit(chunks))
        for index in range(chunks):
            yield from df.filter(bucket == index).toArrow().to_batches()

    def fetch_numpy(self, sql: str, params: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
        table = self.fetch_arrow(sql, params)
        return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}

    def fetch_scalar(self, sql: str, params: dict[str, Any] | None = None) -> Any:
        rows = self.sql(sql, params).take(1)
        return rows[0][0] if rows else None

    @contextmanager
    def registered(self, **views: Any) -> Iterator[None]:
        """In-memory tables (Arrow, or frames with ``to_arrow``) as Spark temporary views."""
        for name, data in views.items():
            table = data if isinstance(data, pa.Table) else data.to_arrow()
            self.spark.createDataFrame(table).createOrReplaceTempView(safe_identifier(name))
        try:
            yield
        finally:
            for name in views:
                self.spark.catalog.dropTempView(name)

    def object_type(self, schema: str, name: str) -> str | None:
        self.create_schema(schema)
        if not self.spark.catalog.tableExists(f"{safe_identifier(schema)}.{safe_identifier(name)}"):
            return None
        kind = self.spark.catalog.getTable(f"{schema}.{name}").tableType
        return "VIEW" if str(kind).upper() == "VIEW" else "BASE TABLE"

    def table_exists(self, schema: str, table: str) -> bool:
        return self.object_type(schema, table) is not None

    def drop(self, schema: str, *names: str) -> None:
        for name in names:
            kind = self.object_type(schema, name)
            if kind == "VIEW":
                self.spark.sql(f"DROP VIEW IF EXISTS {schema}.{name}")
                self._fs.delete(self._p(schema, VIEWS_DIR, f"{name}.sql"), False)
            elif kind is not None:
                self.spark.sql(f"DROP TABLE IF EXISTS {schema}.{name}")  # external: files stay
            path = self._p(schema, name)
            if self._fs.exists(path):
                self._fs.delete(path, True)

    def drop_run_schema(self, run_id: str) -> None:
        schema = run_schema_name(run_id)
        self.spark.sql(f"DROP DATABASE IF EXISTS {schema} CASCADE")
        self._fs.delete(self._p(schema), True)
        self._registered_schemas.discard(schema)

    def write_parquet(self, sql: str, path: str, params: dict[str, Any] | None = None) -> None:
        self.sql(sql, params).write.mode("overwrite").parquet(str(path))

    def close(self) -> None:
        """Nothing to close per stage. The session is not stopped here: the next stage of the
        same process (a CLI run) reuses it; it is stopped when the process exits (an Airflow task
        ends)."""

    def __enter__(self) -> SparkEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
