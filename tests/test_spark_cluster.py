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

The same cluster also checks **what crosses to the driver**: on a corpus of many users over a
tiny vocabulary (FETCH_USERS users, FETCH_WORDS words), a driver process runs ingest, the
vocabulary and DPNE levels 2..3 with the Spark defaults (the DPSU policy is whatever ``RunConfig``
resolves for ``engine=spark``, never set here) and counts the rows of every driver-side fetch
(the SparkEngine's fetch methods and every DataFrame collect, wrapped in that process). No fetch
may bring more rows than the largest public set of the run (the vocabulary, the valid k-grams
V_k), while a per-user collection brings one row per user. The same runs with each policy forced
show the check's power: it fails with the sequential policy Gaussian (its per-user stream) and
passes with the weighted policy (per-item histograms only). docs/engines.md, "What crosses to
the driver".

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
    spark_release = (
        Path(runs["spark"]["out"]) / "clusterspark" / "runs" / "cluster-spark.staging" / "released"
    )
    assert (spark_release / "vocabulary.parquet").is_file(), sorted(Path(runs["spark"]["out"]).rglob("*"))


# ----------------------------------------------------------------------------------------------
# What crosses to the driver: no default-mechanism stage may collect one row per user
# ----------------------------------------------------------------------------------------------
#: Many users over a tiny vocabulary: every public set a stage may legitimately bring to the driver
#: (the histogram's support, the valid k-grams V_k, released keys) has at most a few hundred to
#: ~1,000 rows, while a per-user collection has one row for each of FETCH_USERS users.
FETCH_USERS = 4000
FETCH_WORDS = 32  # word w has FETCH_SUCCESSORS possible next words: few distinct k-grams
FETCH_SUCCESSORS = 3
FETCH_MAX_N = 3


def write_tiny_vocabulary_corpus(path: Path) -> list[str]:
    """FETCH_USERS users, one document each of two sentences; each sentence a walk of 3-7 words on
    a fixed graph over FETCH_WORDS words (FETCH_SUCCESSORS successors each). Deterministic.
    Returns the words (the whole token vocabulary)."""
    import gzip
    import random

    rng = random.Random(20261124)
    syllables = ["ka", "lo", "mi", "nu", "pe", "ra", "si", "tu"]
    words = sorted({a + b + c for a in syllables for b in syllables for c in syllables})
    words = rng.sample(words, FETCH_WORDS)
    successors = {w: rng.sample(words, FETCH_SUCCESSORS) for w in words}
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for user in range(FETCH_USERS):
            sentences = []
            for _ in range(2):
                walk = [rng.choice(words)]
                for _ in range(rng.randint(2, 6)):
                    walk.append(rng.choice(successors[walk[-1]]))
                sentences.append(" ".join(walk))
            # line breaks end sentences (docs/tokenizer.md): no punctuation token, the tokens are
            # exactly the FETCH_WORDS words
            fh.write(json.dumps({"user_id": f"u{user:05d}", "text": "\n".join(sentences)}) + "\n")
    return words


FETCH_DRIVER = textwrap.dedent("""
    # One Spark session, one release per configuration (ingest, vocabulary, DPNE levels 2..T) on
    # the cluster, counting the rows of every driver-side fetch.
    import json, sys, time, traceback
    from pathlib import Path

    from pyspark.sql.classic.dataframe import DataFrame
    from dpngram.config import RunConfig
    from dpngram.engines.spark import SparkEngine
    from dpngram.release.context import RunContext, read_parts
    from dpngram.release.publish import prepare
    from dpngram.stages import dpne as dpne_stage, vocabulary as vocabulary_stage
    from dpngram.stages.ingest import run_ingest

    STAGE = [None]
    FETCHES = []

    def caller():
        # the innermost dpngram frames outside the engine: the code that asked for the rows
        chain = []
        for frame in reversed(traceback.extract_stack()):
            name = frame.filename.replace(chr(92), "/")
            if "/dpngram/" in name and not name.endswith("engines/spark.py"):
                chain.append(f"{Path(name).name}:{frame.name}:{frame.lineno}")
        return " < ".join(chain[:3]) or "?"

    def record(via, rows):
        FETCHES.append({"stage": STAGE[0], "via": via, "rows": int(rows), "caller": caller()})

    # Engine level: every row a fetch returns, a streamed fetch summed over all its chunks.
    fetch_batches, fetch_arrow, fetch_scalar = (
        SparkEngine.fetch_batches, SparkEngine.fetch_arrow, SparkEngine.fetch_scalar)

    def counted_batches(self, *args, **kwargs):
        rows = 0
        try:
            for batch in fetch_batches(self, *args, **kwargs):
                rows += batch.num_rows
                yield batch
        finally:
            record("SparkEngine.fetch_batches", rows)

    def counted_arrow(self, *args, **kwargs):
        table = fetch_arrow(self, *args, **kwargs)
        record("SparkEngine.fetch_arrow", table.num_rows)
        return table

    def counted_scalar(self, *args, **kwargs):
        value = fetch_scalar(self, *args, **kwargs)
        record("SparkEngine.fetch_scalar", 1)
        return value

    SparkEngine.fetch_batches, SparkEngine.fetch_arrow, SparkEngine.fetch_scalar = (
        counted_batches, counted_arrow, counted_scalar)

    # DataFrame level: anything else that collects to the driver (ingest's block counts, a bare
    # SELECT's collect, ...). take/head/first go through collect.
    for method in ("collect", "toArrow", "toPandas"):
        original = getattr(DataFrame, method)
        def counted(self, *args, _original=original, _via=f"DataFrame.{method}", **kwargs):
            result = _original(self, *args, **kwargs)
            record(_via, result.num_rows if hasattr(result, "num_rows") else len(result))
            return result
        setattr(DataFrame, method, counted)
    local_iterator = DataFrame.toLocalIterator
    def counted_iterator(self, *args, **kwargs):
        rows = 0
        try:
            for row in local_iterator(self, *args, **kwargs):
                rows += 1
                yield row
        finally:
            record("DataFrame.toLocalIterator", rows)
    DataFrame.toLocalIterator = counted_iterator

    results = {}
    for label, params in json.loads(Path(sys.argv[1]).read_text()).items():
        config = RunConfig.build(**params)
        ctx = RunContext(prepare(config))
        del FETCHES[:]
        steps = [("ingest", lambda: run_ingest(ctx))]
        steps += [("dpne.k1", lambda: vocabulary_stage.run_vocabulary(ctx))]
        levels = range(2, config.dpne.max_n + 1)
        steps += [(f"dpne.k{k}", lambda k=k: dpne_stage.run_level(ctx, k)) for k in levels]
        seconds = {}
        for stage, run in steps:
            STAGE[0] = stage
            started = time.perf_counter()
            run()
            seconds[stage] = round(time.perf_counter() - started, 1)
        STAGE[0] = None
        parts = read_parts(ctx)
        results[label] = {
            "configured_policy": config.dpne.policy,
            "policy": parts["dpne.k1"]["policy"],
            "released": {s: parts[s]["released"] for s, _ in steps if s != "ingest"},
            "valid": {s: parts[s]["valid"] for s, _ in steps if s.startswith("dpne.k") and s != "dpne.k1"},
            "fetches": list(FETCHES),
            "seconds": seconds,
        }
    print("RESULT" + json.dumps(results))
""")


def _fetch_config(base: Path, corpus: Path, cluster: dict, label: str, **extra) -> dict:
    """A release on the cluster with the engine's default mechanism (``extra`` may force one)."""
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
    return {
        "input": str(corpus),
        "out": str(base / label / "out"),
        "warehouse": str(base / label / "warehouse.duckdb"),
        "dataset": f"fetch-{label}",
        "run_id": f"fetch-{label}",
        "engine": "spark",
        "spark_master": cluster["url"],
        "spark_conf": spark_conf,
        "spark_warehouse": str(base / label / "tables"),
        "max_n": FETCH_MAX_N,
        "epsilon": 4.0,
        "delta": 1e-6,
        "stage_budget": {"dpne": 1.0},
        **extra,
    }


def spark_default_policy(base: Path, corpus: Path, cluster: dict) -> str:
    """The DPSU policy a Spark run gets when none is asked for, resolved by ``RunConfig`` as the
    pipeline resolves it."""
    from dpngram.config import RunConfig

    return RunConfig.build(**_fetch_config(base, corpus, cluster, "default")).dpne.policy


@pytest.fixture(scope="module")
def fetch_runs(cluster, tmp_path_factory):
    """Driver-side fetches of releases on the cluster: the Spark default configuration (policy not
    set), and each DPSU policy forced ('weighted': the per-item-histogram stand-in for the parallel
    policy; 'policy-gaussian': the sequential policy that streams one row per user). A forced policy
    that is the default is not run twice."""
    base = tmp_path_factory.mktemp("fetch-runs")
    corpus = base / "users.jsonl.gz"
    words = write_tiny_vocabulary_corpus(corpus)
    default = spark_default_policy(base, corpus, cluster)
    configs = {"default": _fetch_config(base, corpus, cluster, "default")}
    for policy in ("weighted", "policy-gaussian"):
        if policy != default:
            configs[policy] = _fetch_config(base, corpus, cluster, policy, dpsu_policy=policy)
    spec = base / "configs.json"
    spec.write_text(json.dumps(configs))
    script = base / "fetch_driver.py"
    script.write_text(FETCH_DRIVER)
    proc = subprocess.run(
        [sys.executable, str(script), str(spec)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=base,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-5000:]
    results = json.loads(line[len("RESULT") :])
    (base / "results.json").write_text(json.dumps(results, indent=1))  # for a look after a failure
    for policy in ("weighted", "policy-gaussian"):
        results.setdefault(policy, results["default"])
    return {"default_policy": default, "words": len(words), **results}


def public_set_bound(run: dict, words: int) -> int:
    """The largest set a stage may bring to the driver without touching per-user rows: the
    vocabulary (the support of H_1), and for every level the valid k-grams V_k (the exact
    variant's thresholded scan; the support of H_k, the released keys and the next level's
    overlap sides are subsets or of the same size). All public sizes, none grows with the users."""
    return max([words, *run["valid"].values()])


def assert_no_per_user_fetch(run: dict, words: int) -> None:
    """Every driver-side fetch of every stage brings at most :func:`public_set_bound` rows."""
    bound = public_set_bound(run, words)
    over = [f for f in run["fetches"] if f["rows"] > bound]
    assert not over, (
        f"policy {run['policy']!r}: {len(over)} driver-side fetch(es) bring more rows than the largest "
        f"public set ({bound} rows; {FETCH_USERS} users), i.e. per-user rows reach the driver: "
        + "; ".join(f"{f['stage']} {f['via']} from {f['caller']}: {f['rows']} rows" for f in over)
    )


def test_the_fetch_corpus_separates_per_user_rows_from_public_sets(fetch_runs):
    """The check's premise: every stage released something (so every level's fetches ran), and
    the largest public set is far below the number of users, so a per-user collection (one row
    per user, FETCH_USERS rows) cannot pass for a histogram."""
    for label in ("default", "weighted", "policy-gaussian"):
        run = fetch_runs[label]
        assert all(n > 0 for n in run["released"].values()), (label, run["released"])
        assert set(run["released"]) == {f"dpne.k{k}" for k in range(1, FETCH_MAX_N + 1)}
        assert run["released"]["dpne.k1"] <= fetch_runs["words"]  # the words are the whole vocabulary
        assert public_set_bound(run, fetch_runs["words"]) <= FETCH_USERS // 2, (label, run["valid"])
        assert {f["stage"] for f in run["fetches"]} >= set(run["released"]), label


def test_spark_default_mechanism_collects_no_per_user_rows(fetch_runs):
    """No stage of a release with the Spark defaults (ingest, the DPSU vocabulary, DPNE levels 2
    and 3) brings per-user rows to the driver: only histograms over items, public sets and
    released keys. Fails while the default DPSU policy is the sequential policy Gaussian (its
    per-user stream, sql/dpsu/policy_stream.sql, goes through the driver)."""
    run = fetch_runs["default"]
    assert run["policy"] == fetch_runs["default_policy"]  # the run used the configured default
    assert_no_per_user_fetch(run, fetch_runs["words"])


def test_the_weighted_policy_collects_no_per_user_rows(fetch_runs):
    """The weighted policy (per-item histogram only; the stand-in for the parallel policy until it
    is the Spark default) passes the check."""
    run = fetch_runs["weighted"]
    assert run["policy"] == "weighted"
    assert_no_per_user_fetch(run, fetch_runs["words"])


def test_the_check_catches_the_policy_gaussian_per_user_stream(fetch_runs):
    """The check's power: with the policy Gaussian forced, it fails, on the per-user stream of
    every stage that runs DPSU (one row per user holding a kept item: every user at level 1)."""
    run = fetch_runs["policy-gaussian"]
    assert run["policy"] == "policy-gaussian"
    with pytest.raises(AssertionError, match="per-user rows reach the driver"):
        assert_no_per_user_fetch(run, fetch_runs["words"])
    streams = {
        f["stage"]: f["rows"]
        for f in run["fetches"]
        if f["via"] == "SparkEngine.fetch_batches" and "policy_histogram_from_stream" in f["caller"]
    }
    assert set(streams) == {f"dpne.k{k}" for k in range(1, FETCH_MAX_N + 1)}, run["fetches"]
    assert streams["dpne.k1"] == FETCH_USERS
