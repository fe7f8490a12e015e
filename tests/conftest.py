"""Shared fixtures. Sets the test-only seed permission *before* pipeline modules are used, and
isolates Airflow state in a temp AIRFLOW_HOME."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dpngram.core.noise import TEST_SEED_ENV, TEST_SEED_VALUE, NoiseSource  # noqa: E402
from dpngram.stages import ingest as ingest_stage  # noqa: E402

os.environ.setdefault(TEST_SEED_ENV, TEST_SEED_VALUE)
# Never the real ~/.local/share/dpngram (the per-user ledger and warehouse): a directory per test
# process, which session fixtures (an Airflow environment captured before any module's own, see
# _module_ledger_and_warehouse) inherit.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="dpngram-test-data-")

# A statistical test draws fresh CSPRNG noise and fails by chance with its stated probability α
# (1e-4 per check; 119 such tests hold several hundred checks, so a correct tree failed
# `make test` by chance every few dozen runs: CI once saw a 3.9σ sample mean in test_noise).
# Such a test is run once more on failure, with new draws (function-scoped `secure_noise`): a
# correct sampler now fails a check with probability α², while a real defect that a check detects
# with probability p is still caught with probability p². Deterministic tests are never re-run;
# pytest shows each rerun as "R" and counts them in the summary line.
STATISTICAL_RERUNS = 1


def _is_statistical(item: pytest.Item) -> bool:
    return item.get_closest_marker("statistical") is not None or "secure_noise" in getattr(
        item, "fixturenames", ()
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The platform test (tests/test_platform.py: PostgreSQL, Redis, S3 and a two-worker Celery
    # Airflow, minutes) runs only when selected by marker: `make test-platform` (-m platform, also
    # in `make bench` and CI's own step); `make test` skips it, saying so.
    marker = config.getoption("-m") or ""
    platform_selected = "platform" in marker and "not platform" not in marker
    for item in items:
        if _is_statistical(item):
            item.add_marker(pytest.mark.flaky(reruns=STATISTICAL_RERUNS))
        if item.get_closest_marker("platform") is not None and not platform_selected:
            item.add_marker(
                pytest.mark.skip(reason="PostgreSQL, Redis, S3, Celery Airflow, minutes: make test-platform")
            )


@pytest.fixture(scope="module", autouse=True)
def _module_ledger_and_warehouse(tmp_path_factory):
    """Each test module has a privacy ledger and a default warehouse directory of its own (the
    per-user defaults under ``XDG_DATA_HOME``), so that one module's lifetime budgets and charges
    never meet another's, and no test touches the real ``~/.local/share/dpngram``. Processes a
    test starts inherit it."""
    patch = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("xdg-data")
    patch.setenv("XDG_DATA_HOME", str(home))
    for name in ("DPNGRAM_LEDGER", "DPNGRAM_WAREHOUSE", "DPNGRAM_RUN_STORE"):
        patch.delenv(name, raising=False)
    yield home
    patch.undo()


def open_test_ledger():
    """The ledger this test module's runs charge (the per-user default of
    :func:`_module_ledger_and_warehouse`)."""
    from dpngram.release.ledger import open_ledger

    return open_ledger()


@pytest.fixture
def own_ledger(tmp_path):
    """A privacy ledger of this test's own (an embedded file in its temporary directory), for tests
    that set lifetime budgets or count a dataset's charges. Its own MonkeyPatch: a test's
    ``monkeypatch.undo()`` does not take it away."""
    path = tmp_path / "ledger.duckdb"
    patch = pytest.MonkeyPatch()
    patch.setenv("DPNGRAM_LEDGER", str(path))
    yield path
    patch.undo()


@pytest.fixture(scope="session")
def postgres_server():
    """One throw-away PostgreSQL server per test process (Debian's server binaries, started on
    127.0.0.1 by tests/airflow_compose.py); skipped with the reason when none is installed."""
    from airflow_compose import PostgresServer, postgres_bindir

    if postgres_bindir() is None:
        pytest.skip("no PostgreSQL server binaries: install Debian's 'postgresql' (scripts/system_deps.sh)")
    server = PostgresServer(user="dpngram", database="dpngram", password="ledger-test-password")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def postgres_ledger_url(postgres_server) -> str:
    """A fresh, empty PostgreSQL database on :func:`postgres_server` for one test's ledger."""
    import uuid

    import psycopg2

    name = f"ledger_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(
        host="127.0.0.1",
        port=postgres_server.port,
        user=postgres_server.user,
        password=postgres_server.password,
        dbname=postgres_server.database,
    )
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    admin.close()
    return f"postgresql://{postgres_server.user}:{postgres_server.password}@127.0.0.1:{postgres_server.port}/{name}"


@pytest.fixture(params=["duckdb", "postgresql"])
def ledger_url(request, tmp_path) -> str:
    """A fresh ledger on each backend: an embedded DuckDB file, and a PostgreSQL database."""
    if request.param == "duckdb":
        return str(tmp_path / "ledger.duckdb")
    return request.getfixturevalue("postgres_ledger_url")


@pytest.fixture
def secure_noise() -> NoiseSource:
    """A real, CSPRNG-seeded noise source (what statistical tests should use)."""
    return NoiseSource.secure()


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession per test process (Spark tests are marked ``spark``); skipped
    with the reason when no Java runtime is found (PySpark itself is a declared dependency)."""
    from dpngram.engines.spark import java_available, spark_session

    if not java_available():
        pytest.skip("Spark needs a Java runtime (none on PATH/JAVA_HOME)")
    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture
def seeded_noise() -> NoiseSource:
    """Reproducible noise, for determinism tests only."""
    return NoiseSource.seeded_for_tests(12345)


def run_through_dpne(
    tmp_path: Path, files: dict[str, Path], *, public: bool = True, noise=None, **config_values
):
    """A run on a sample corpus taken through prepare -> ingest -> DPNE (vocabulary + levels), so a
    test can exercise a later stage. ``files`` is what ``dpngram.text.sample.write_sample`` returned;
    ``config_values`` are RunConfig fields (input/out/warehouse/public are filled in here); ``noise``
    (a seeded source) makes the DPNE releases, and so every later stage's input, reproducible."""
    from dpne_steps import run_dpne  # tests/dpne_steps.py; here so a copied conftest imports alone

    from dpngram.config import RunConfig
    from dpngram.release.context import RunContext
    from dpngram.release.publish import prepare

    paths = {
        "input": str(files["users"]),
        "out": str(tmp_path / "out"),
        "warehouse": str(tmp_path / "wh.duckdb"),
    }
    if public:
        paths["public"] = str(files["public"])
    config_values.setdefault("stage_budget", {"dpne": 1.0})  # DPNE with the whole budget unless set
    ctx = RunContext(prepare(RunConfig.build(**paths, **config_values)))
    ingest_stage.run_ingest(ctx)
    run_dpne(ctx, noise=noise)
    return ctx


#: Chromium flags for a headless browser that never reaches out on its own.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def sentences_warehouse(schema: str, rows: list[tuple[str, list[str | None]]]):
    """In-memory warehouse with ``{schema}.sentences`` holding one sentence per (user_id, tokens)
    row (:func:`create_sentences`)."""
    from dpngram.engines.duckdb import Warehouse

    wh = Warehouse(":memory:", memory_limit="1GB")
    wh.con.execute(f"CREATE SCHEMA {schema}")
    create_sentences(wh, schema, rows)
    return wh


def create_sentences(wh, schema: str, rows: list[tuple[str, list[str | None]]]) -> None:
    """``{schema}.sentences`` with one sentence per (user_id, tokens) row (doc 1, sentence ids in
    row order), as ingest would have written them."""
    wh.con.execute(
        f"CREATE TABLE {schema}.sentences (user_id VARCHAR, doc_id BIGINT, sent_id INTEGER, tokens VARCHAR[])"
    )
    if rows:  # one Arrow batch: a row-by-row executemany took 19 s for 56,500 rows
        import pyarrow as pa

        batch = pa.table(
            {
                "user_id": pa.array([user for user, _ in rows], pa.string()),
                "doc_id": pa.array([1] * len(rows), pa.int64()),
                "sent_id": pa.array(range(len(rows)), pa.int32()),
                "tokens": pa.array([tokens for _, tokens in rows], pa.list_(pa.string())),
            }
        )
        wh.con.register("sentences_batch", batch)
        try:
            wh.con.execute(f"INSERT INTO {schema}.sentences SELECT * FROM sentences_batch")
        finally:
            wh.con.unregister("sentences_batch")
    from dpngram.engines.ingest import add_token_ids

    add_token_ids(wh, schema)  # the token ids and dictionary ingest writes beside the tokens


def chromium_path() -> str | None:
    """The system Chromium (Debian package ``chromium``, installed by scripts/system_deps.sh)."""
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    """A headless system Chromium driven by Playwright (``playwright install`` is never used).
    Skipped, with the reason, only when there is no Chromium binary on this machine."""
    path = chromium_path()
    if path is None:
        pytest.skip("no chromium binary on PATH (scripts/system_deps.sh installs the Debian package)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()
