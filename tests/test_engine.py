"""The engine abstraction (pipeline/engine.py): the DuckDB engine's interface, the DuckDB -> Spark
SQL translation and its rewrites (no Spark needed here), and the engine configuration fields."""

from __future__ import annotations

import re
from importlib import resources

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError
from dpngram.engines.base import Engine
from dpngram.engines.duckdb import DUCKDB_SETTING_RE, Warehouse
from dpngram.engines.select import open_engine
from dpngram.engines.spark import SparkSqlError, to_spark
from dpngram.engines.sql import SQL_PACKAGE, _sql_text, load_sql

SCHEMA = "run_engine_test"


@pytest.fixture
def wh():
    with Warehouse(":memory:", memory_limit="512MB") as warehouse:
        warehouse.create_schema(SCHEMA)
        yield warehouse


def test_duckdb_warehouse_is_an_engine(wh) -> None:
    assert isinstance(wh, Engine)
    assert wh.name == "duckdb"


def test_duckdb_engine_operations(wh, tmp_path) -> None:
    wh.execute(f"CREATE TABLE {SCHEMA}.t AS SELECT range AS item, range * 0.5 AS weight FROM range(10)")
    wh.execute(f"CREATE VIEW {SCHEMA}.v AS SELECT item FROM {SCHEMA}.t WHERE item > 4")
    assert wh.object_type(SCHEMA, "t") == "BASE TABLE"
    assert wh.object_type(SCHEMA, "v") == "VIEW"
    assert wh.object_type(SCHEMA, "missing") is None
    assert wh.fetch_scalar(f"SELECT count(*) FROM {SCHEMA}.v") == 5
    assert wh.fetch_scalar(f"SELECT sum(item) FROM {SCHEMA}.t WHERE item < $n", {"n": 3}) == 3
    cols = wh.fetch_numpy(f"SELECT item FROM {SCHEMA}.t ORDER BY item")
    assert cols["item"].tolist() == list(range(10))
    batches = list(wh.fetch_batches(f"SELECT item, weight FROM {SCHEMA}.t ORDER BY item", batch_rows=4))
    assert sum(b.num_rows for b in batches) == 10
    # An empty result still yields one (empty) batch carrying the schema.
    empty = list(wh.fetch_batches(f"SELECT item, weight FROM {SCHEMA}.t WHERE item < 0"))
    assert len(empty) == 1 and empty[0].num_rows == 0 and empty[0].schema.names == ["item", "weight"]
    with wh.registered(extra=pa.table({"x": [1, 2, 3]})):
        assert wh.fetch_scalar("SELECT sum(x) FROM extra") == 6
    with pytest.raises(duckdb.CatalogException):  # unregistered after the block
        wh.fetch_scalar("SELECT sum(x) FROM extra")
    out = tmp_path / "t.parquet"
    wh.write_parquet(f"SELECT item FROM {SCHEMA}.t", str(out))
    assert pq.read_table(out).num_rows == 10
    wh.drop(SCHEMA, "v", "t", "missing")
    assert wh.object_type(SCHEMA, "t") is None and wh.object_type(SCHEMA, "v") is None


def test_statement_profile_names_each_statement_and_holds_no_value(tmp_path, monkeypatch) -> None:
    """DPNGRAM_SQL_PROFILE: one JSON line per statement with its sql/ name, the operation and its
    seconds (a streamed fetch counted once, at its end); nothing of the data."""
    import json

    profile = tmp_path / "statements.jsonl"
    monkeypatch.setenv("DPNGRAM_SQL_PROFILE", str(profile))
    with Warehouse(tmp_path / "w.duckdb", memory_limit="512MB") as warehouse:
        warehouse.create_schema(SCHEMA)
        warehouse.execute(
            f"CREATE TABLE {SCHEMA}.t AS SELECT 'secret-' || range AS item, 1.0 AS weight FROM range(5)"
        )
        scan = load_sql("dpsu/histogram_scan", schema=SCHEMA, histogram="t")
        batches = list(warehouse.fetch_batches(scan, batch_rows=2))
        assert sum(len(b) for b in batches) == 5
        assert warehouse.fetch_scalar(load_sql("dpne/object_type"), {"schema": SCHEMA, "name": "t"})
    lines = [json.loads(line) for line in profile.read_text().splitlines()]
    assert [(r["statement"], r["op"]) for r in lines] == [
        ("inline: CREATE TABLE run_engine_test.t AS", "execute"),
        ("dpsu/histogram_scan", "fetch_batches"),
        ("dpne/object_type", "fetch_scalar"),
    ]
    assert all(r["seconds"] >= 0 and r["start"] > 0 for r in lines)
    assert "secret" not in profile.read_text()


def test_statement_settings_hold_for_that_statement_only(wh) -> None:
    """A ``-- duckdb-set: NAME = VALUE`` line is in force while its statement runs (what the
    statement sees) and the previous value is back afterwards, also after a failing statement;
    statements without the line run with the session's settings."""
    probe = "SELECT current_setting('disabled_optimizers') AS v"
    hint = "-- duckdb-set: disabled_optimizers = 'build_side_probe_side'\n"
    hinted = f"{hint}CREATE OR REPLACE TABLE {SCHEMA}.s AS {probe}"
    wh.execute(hinted)
    assert wh.scalar(f"SELECT v FROM {SCHEMA}.s") == "build_side_probe_side"
    assert wh.scalar("SELECT current_setting('disabled_optimizers')") == ""
    wh.con.execute("SET disabled_optimizers = 'join_order'")
    assert wh.fetch_scalar(hint + probe) == "build_side_probe_side"
    assert wh.scalar("SELECT current_setting('disabled_optimizers')") == "join_order"
    with pytest.raises(duckdb.Error):
        wh.execute(hint + "SELECT * FROM no_such_table")
    assert wh.scalar("SELECT current_setting('disabled_optimizers')") == "join_order"
    wh.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.s AS {probe}")
    assert wh.scalar(f"SELECT v FROM {SCHEMA}.s") == "join_order"
    # the counting statement carries one (its plan on few, long sentences: sql/lm_counts/weighted.sql)
    weighted = load_sql(
        "lm_counts/weighted", schema=SCHEMA, target="t", source="s", vocabulary="v", domain="d"
    )
    assert DUCKDB_SETTING_RE.findall(weighted) == [
        ("disabled_optimizers", "'build_side_probe_side,join_order'")
    ]
    lists = load_sql("lm_counts/user_gid_lists", schema=SCHEMA, source="s", vocabulary="v", domain="d")
    assert DUCKDB_SETTING_RE.findall(lists) == [("disabled_optimizers", "'build_side_probe_side,join_order'")]


def test_no_statement_profile_without_the_variable(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("DPNGRAM_SQL_PROFILE", raising=False)
    with Warehouse(tmp_path / "w.duckdb", memory_limit="512MB") as warehouse:
        warehouse.execute("SELECT 1")
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".jsonl"] == []


def test_open_engine_default_is_duckdb(tmp_path) -> None:
    config = RunConfig.build(
        input="x.jsonl", out=str(tmp_path / "out"), warehouse=str(tmp_path / "w"), run_id="r1"
    )
    assert config.engine.name == "duckdb"
    engine = open_engine(config)
    try:
        assert isinstance(engine, Warehouse)
        assert engine.path == tmp_path / "w" / "runs" / "r1.duckdb"  # the run's own file
    finally:
        engine.close()


def test_engine_config_fields() -> None:
    config = RunConfig.build(
        input="x", out="y", engine="spark", spark_master="spark://host:7077",
        spark_conf="spark.executor.memory=8g, spark.sql.shuffle.partitions=400",
    )  # fmt: skip
    assert config.engine.spark_settings() == {
        "spark.executor.memory": "8g",
        "spark.sql.shuffle.partitions": "400",
    }
    with pytest.raises(ConfigError, match="engine"):
        RunConfig.build(input="x", out="y", engine="flink")
    with pytest.raises(ConfigError, match="spark_conf"):
        RunConfig.build(input="x", out="y", spark_conf="executor.memory")
    schema = RunConfig.param_schema()
    assert schema["engine"]["enum"] == ["duckdb", "spark"] and schema["engine"]["default"] == "duckdb"
    assert schema["spark_master"]["default"] == "local[2]"


# -- DuckDB -> Spark translation --------------------------------------------------------------
def _spark(name: str, **identifiers: str) -> tuple[tuple[str, str], ...]:
    return to_spark(load_sql(name, **identifiers))


def test_list_index_becomes_one_based_element_at() -> None:
    ((kind, body),) = _spark("ingest/tokens_view", schema="s")
    assert kind == "view:s.tokens"
    assert "ELEMENT_AT(s.tokens, g.p)" in body and "tokens[" not in body
    assert "SIZE(s.tokens)" in body  # array_length -> size (Spark's length() is for strings)


def test_hash_and_unsigned_cast_are_rewritten() -> None:
    ((kind, body),) = _spark("dpsu/histogram", schema="s", source="src", histogram="h")
    assert kind == "ctas:s.h"
    assert "XXHASH64(XXHASH64(x) ^ CAST(:salt AS BIGINT))" in body
    assert "UBIGINT" not in body and "HASH(" not in body.replace("XXHASH64(", "")


def test_list_slice_becomes_slice_with_length() -> None:
    ((_, body),) = _spark("dpsu/ngram_source", schema="s", target="t")
    assert "SLICE(s.tokens, s.start_pos, (s.start_pos + l.n - 1 - s.start_pos + 1))" in body


def test_materialized_cte_hint_is_dropped_for_spark() -> None:
    ((kind, body),) = to_spark("WITH t AS MATERIALIZED (SELECT 1 AS x) SELECT x FROM t")
    assert kind == "select"
    assert "WITH t AS (SELECT" in body and "MATERIALIZED" not in body


def test_statement_kinds_and_unsupported_ddl() -> None:
    kinds = [
        k for k, _ in _spark("dpne/valid_sides_both", schema="s", left_side="a", right_side="b", previous="p")
    ]
    assert kinds == ["view:s.a", "view:s.b"]
    assert to_spark("DROP TABLE IF EXISTS s.t") == (("drop:s.t", ""),)
    assert to_spark("SELECT 1 AS x")[0][0] == "select"
    with pytest.raises(SparkSqlError, match="column list"):
        to_spark("CREATE TABLE s.t (a INTEGER)")
    with pytest.raises(SparkSqlError, match="Insert"):
        to_spark("INSERT INTO s.t SELECT 1")


def test_every_spark_stage_sql_transpiles() -> None:
    """The SQL files the Spark engine runs (ingest bookkeeping, vocabulary, every DPNE level, the
    baselines) all translate; the rest (ingest DDL/INSERT, ledger, bayes, synth, validate) stay on
    DuckDB."""
    sql_dir = resources.files(SQL_PACKAGE)
    names = sorted(  # fragments (_name.sql) are not statements; they are inlined where included
        f"{d}/{p.name[:-4]}"
        for d in ("dpne", "dpsu")
        for p in sql_dir.joinpath(d).iterdir()
        if p.name[0] != "_"
    )
    names += ["ingest/counts", "ingest/quarantine_reasons", "ingest/stats_read", "ingest/stats_write",
              "ingest/tokens_view"]  # fmt: skip
    for name in names:
        keys = set(re.findall(r"\{(\w+)\}", _sql_text(name)))
        statements = to_spark(load_sql(name, **{k: f"{k}_x" for k in keys}))
        assert statements, name
        for _, body in statements:
            assert (
                "UBIGINT" not in body and "LIST_SLICE" not in body and "read_parquet" not in body.lower()
            ), name


def test_spark_without_the_extra_is_a_one_line_config_error(tmp_path, monkeypatch) -> None:
    """pyspark is the optional extra dpngram[spark]: selecting Spark without it names the fix."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a)
    )
    config = RunConfig.build(input="x", out="y", warehouse=str(tmp_path / "w.duckdb"), engine="spark")
    with pytest.raises(ConfigError, match=r"pip install 'dpngram\[spark\]'"):
        open_engine(config)


def test_sql_fragments_are_inlined_where_included() -> None:
    """``-- include: dpsu/_user_kept`` is replaced by the fragment, so every DPSU histogram (from the
    items relation or from per-user lists) and the policy Gaussian's input rank users' items by one
    text; no statement keeps an include line."""
    sql_dir = resources.files(SQL_PACKAGE)
    kept = sql_dir.joinpath("dpsu/_user_kept.sql").read_text(encoding="utf-8").rstrip("\n")
    items = sql_dir.joinpath("dpsu/_user_items.sql").read_text(encoding="utf-8").rstrip("\n")
    names = ("dpsu/histogram", "dpsu/policy_items", "dpsu/histogram_lists", "dpsu/histogram_lists_remaining")
    for name in names:
        raw = sql_dir.joinpath(f"{name}.sql").read_text(encoding="utf-8")
        assert "-- include: dpsu/_user_kept" in raw
        text = load_sql(name, schema="s", source="src", histogram="h", target="t", lists="l", released="r")
        assert "-- include:" not in text
        assert kept in text
        if name in ("dpsu/histogram", "dpsu/policy_items"):
            assert items.replace("{schema}", "s").replace("{source}", "src") in text
    names = [f"{d.name}/{p.name[:-4]}" for d in sql_dir.iterdir() if d.is_dir() for p in d.iterdir()
             if p.name.endswith(".sql")]  # fmt: skip
    assert all("-- include:" not in _sql_text(n) for n in names)


def test_sql_include_of_a_missing_fragment_fails(monkeypatch) -> None:
    from dpngram.engines import sql as sql_module

    real = sql_module._package_file
    monkeypatch.setattr(
        sql_module,
        "_package_file",
        lambda n: "WITH\n-- include: dpsu/_missing\nSELECT 1" if n == "x/y" else real(n),
    )
    sql_module._sql_text.cache_clear()
    try:
        with pytest.raises(FileNotFoundError):
            sql_module._sql_text("x/y")
    finally:
        sql_module._sql_text.cache_clear()
