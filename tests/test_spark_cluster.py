"""The Spark engine on a real cluster: a Spark standalone master and one worker started on 127.0.0.1
from the scripts inside the pyspark wheel (``bin/spark-class``), so the executors run in separate
JVM processes (with their own Python workers) that receive the ``dpngram`` package over the
network (``addPyFile``), not in the driver's process as in local mode.

A driver process runs ingest, the DPSU vocabulary and DPNE level 2 with
``engine=spark, spark_master=spark://127.0.0.1:PORT`` through the stage functions the CLI and the
DAG call; the same corpus goes through the same stages on DuckDB. As in the local-mode
equivalence test (tests/test_engine_spark.py), the non-noisy private tables must agree: the
tokenized sentences and the quarantine exactly, and the DPSU vocabulary histogram H_1 computed by
the cluster (Delta_0 larger than any user's distinct items, so no salted subset): the same items,
weights equal up to summation order. The driver also reports how many
executors served it, and the worker's work directory must hold the executor's logs: the work
really left the driver.

Skipped only when no Java runtime is found (PySpark is a declared dependency).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpngram.engines.spark import java_available

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.skipif(not java_available(), reason="Spark needs a Java runtime (none on PATH/JAVA_HOME)"),
]

TESTS = Path(__file__).resolve().parent
USERS = 200
BIG_DELTA = 100_000  # > any user's distinct items: no subsampling, deterministic occurrence tables
START_TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spark_class() -> tuple[str, dict[str, str]]:
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,  # the executors' Python workers: this venv's interpreter
        "SPARK_NO_DAEMONIZE": "1",
    }
    return str(home / "bin" / "spark-class"), env


def _wait_for(what: str, condition, logs: list[Path], timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tails = "\n".join(
                f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.exists()
            )
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone master and one worker (1 core, 1 GiB) on loopback; stopped afterwards."""
    base = tmp_path_factory.mktemp("spark-cluster")
    spark_class, env = _spark_class()
    port, master_ui, worker_ui = _free_port(), _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log, worker_log = base / "master.log", base / "worker.log"
    procs: list[subprocess.Popen] = []

    def start(cmd: list[str], log: Path) -> None:
        with log.open("w") as fh:
            procs.append(
                subprocess.Popen(
                    cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, cwd=base
                )
            )

    try:
        start(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
            + ["--webui-port", str(master_ui)],
            master_log,
        )
        _wait_for("the Spark master", lambda: "Starting Spark master" in master_log.read_text(), [master_log])
        start(
            [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1"]
            + ["--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui)]
            + ["--work-dir", str(base / "work")],
            worker_log,
        )
        _wait_for(
            "the worker to register",
            lambda: "Registering worker" in master_log.read_text(),
            [master_log, worker_log],
        )
        yield {"url": url, "base": base, "work": base / "work", "logs": [master_log, worker_log]}
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def vocabulary_histogram(ctx) -> pa.Table:
    """The DPSU histogram H_1 of the run's sentences on the run's engine (as the local-mode
    equivalence test computes it), sorted by item."""
    from dpngram.core.noise import NoiseSource
    from dpngram.engines.sql import load_sql
    from dpngram.mechanisms import dpsu

    with ctx.engine() as engine:
        engine.execute(load_sql("dpsu/vocabulary_source", schema=ctx.schema, target="eq_vocab_source"))
        dpsu.dpsu_histogram(
            engine,
            ctx.schema,
            "eq_vocab_source",
            "eq_vocab_hist",
            max_contribution=BIG_DELTA,
            salt=NoiseSource.secure().salt(),
        )
        table = engine.fetch_arrow(
            load_sql("dpsu/histogram_scan", schema=ctx.schema, histogram="eq_vocab_hist")
        )
    return table.sort_by([("item", "ascending")])


DRIVER = textwrap.dedent("""
    import json, sys
    import pyarrow.parquet as pq
    from dpngram.config import RunConfig
    from dpngram.release.context import RunContext
    from dpngram.release.publish import prepare
    from dpngram.stages import dpne as dpne_stage, vocabulary as vocabulary_stage
    from dpngram.stages.ingest import run_ingest

    sys.path.insert(0, sys.argv[3])  # tests/: the histogram helper of test_spark_cluster
    from test_spark_cluster import vocabulary_histogram

    config = RunConfig.build(**json.loads(sys.argv[1]))
    ctx = RunContext(prepare(config))
    run_ingest(ctx)
    vocabulary_stage.run_vocabulary(ctx)
    dpne_stage.run_level(ctx, 2)
    pq.write_table(vocabulary_histogram(ctx), sys.argv[2])
    with ctx.engine() as engine:
        context = engine.spark.sparkContext
        executors = context._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
        print("RESULT" + json.dumps({"schema": ctx.schema, "master": context.master,
                                     "executors": executors}))
""")


def _config(base: Path, corpus: dict[str, Path], engine: str, **extra) -> dict:
    return {
        "input": str(corpus["users"]),
        "out": str(base / engine / "out"),
        "warehouse": str(base / engine / "warehouse.duckdb"),
        "dataset": f"cluster{engine}",
        "engine": engine,
        "max_n": 2,
        "epsilon": 8.0,
        "delta": 1e-4,
        "max_contribution": BIG_DELTA,
        "stage_budget": {"dpne": 1.0},
        "run_id": f"cluster-{engine}",
        **extra,
    }


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    from dpngram.release.context import RunContext
    from dpngram.release.publish import prepare
    from dpngram.stages import dpne as dpne_stage
    from dpngram.stages import vocabulary as vocabulary_stage
    from dpngram.stages.ingest import run_ingest
    from dpngram.text.sample import write_sample

    base = tmp_path_factory.mktemp("cluster-runs")
    corpus = write_sample(base / "corpus", n_users=USERS, seed=20261124, public_sentences=100)

    spark_conf = ",".join(
        [
            f"spark.pyspark.python={sys.executable}",
            "spark.executor.memory=1g",
            "spark.cores.max=1",
            "spark.sql.shuffle.partitions=4",
            "spark.ui.enabled=false",
            "spark.driver.host=127.0.0.1",
            "spark.driver.bindAddress=127.0.0.1",
        ]
    )
    spark = _config(
        base,
        corpus,
        "spark",
        spark_master=cluster["url"],
        spark_conf=spark_conf,
        spark_warehouse=str(base / "spark" / "tables"),
    )
    script = base / "driver.py"  # a file, not -c: pyspark.sql.connect exits a __main__ without __file__
    script.write_text(DRIVER)
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(spark), str(base / "spark_h1.parquet"), str(TESTS)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=base,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-5000:]
    driver = json.loads(line[len("RESULT") :])

    from dpngram.config import RunConfig

    ctx = RunContext(prepare(RunConfig.build(**_config(base, corpus, "duckdb"))))
    run_ingest(ctx)
    vocabulary_stage.run_vocabulary(ctx)
    dpne_stage.run_level(ctx, 2)
    return {
        "driver": driver,
        "spark": spark,
        "duckdb": ctx,
        "tables": base / "spark" / "tables",
        "histograms": {
            "spark": pq.read_table(base / "spark_h1.parquet"),
            "duckdb": vocabulary_histogram(ctx),
        },
    }


def _spark_table(runs: dict, table: str) -> pa.Table:
    return pq.read_table(runs["tables"] / runs["driver"]["schema"] / table)


def _duckdb_table(runs: dict, table: str, columns: str) -> pa.Table:
    with runs["duckdb"].warehouse(read_only=True) as wh:
        return wh.fetch_arrow(f"SELECT {columns} FROM {runs['duckdb'].schema}.{table}")


def test_the_driver_ran_on_the_cluster_with_a_separate_executor(runs, cluster):
    driver = runs["driver"]
    assert driver["master"] == cluster["url"]
    assert driver["executors"] >= 1
    # the worker launched an executor process for the application: its logs are in the work dir
    executor_logs = list(cluster["work"].glob("app-*/*/stderr"))
    assert executor_logs, sorted(p.as_posix() for p in cluster["work"].rglob("*"))[:20]


def test_cluster_and_duckdb_tokenize_identically(runs):
    keys = ["user_id", "doc_id", "sent_id"]
    order = [(k, "ascending") for k in keys]
    spark = _spark_table(runs, "sentences").select([*keys, "tokens"]).sort_by(order)
    duck = _duckdb_table(runs, "sentences", ", ".join([*keys, "tokens"])).sort_by(order)
    assert duck.num_rows > 500
    assert duck.equals(spark.cast(duck.schema))
    assert _spark_table(runs, "quarantine").num_rows == _duckdb_table(runs, "quarantine", "*").num_rows


def test_cluster_and_duckdb_compute_the_same_vocabulary_histogram(runs):
    """H_1 (items and their DPSU weights; Delta_0 above any user's distinct items, so no salted
    subset) computed by the cluster equals DuckDB's: the same items, and weights equal up to the
    floating-point reordering of their sums (relative 1e-12; tests/test_engine_spark.py derives the
    exact bound)."""
    duck, spark = runs["histograms"]["duckdb"], runs["histograms"]["spark"]
    assert duck.num_rows > 100
    assert (
        duck.column("item").to_pylist()
        == spark.column("item").cast(duck.schema.field("item").type).to_pylist()
    )
    assert np.allclose(
        duck.column("weight").to_numpy(), spark.column("weight").to_numpy(), rtol=1e-12, atol=0
    )


def test_the_cluster_run_released_the_vocabulary(runs):
    spark_release = Path(runs["spark"]["out"]) / "runs" / "cluster-spark.staging" / "released"
    assert (spark_release / "vocabulary.parquet").is_file(), sorted(Path(runs["spark"]["out"]).rglob("*"))
