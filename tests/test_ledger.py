"""The privacy ledger (dpngram.release.ledger.Ledger) on both of its stores: an embedded DuckDB
file and PostgreSQL (a real server, tests/airflow_compose.PostgresServer).

Lifetime budgets compose across runs by basic composition (sums of epsilon and delta); a stage's
spend is recorded once per (dataset, run, stage), so a retried task cannot charge twice; the
check-and-spend is one transaction, so of two processes racing for a dataset's last budget exactly
one wins and the other is refused in one line, with nothing left reserved.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from dpngram.core.accounting import PrivacyEvent
from dpngram.core.budget import Budget
from dpngram.core.errors import BudgetError, ConfigError
from dpngram.release.forecast import schedule_stop
from dpngram.release.ledger import Ledger, open_ledger
from dpngram.release.ledger_import import import_legacy
from dpngram.release.ledger_store import (
    DuckDBLedgerStore,
    default_ledger_path,
    describe_location,
    ledger_location,
    migrations,
)

EVENTS = [PrivacyEvent("dpne", "gaussian", sigma=3.5), PrivacyEvent("dpne", "approx", delta=5e-8)]


@pytest.fixture
def ledger(ledger_url: str):
    with open_ledger(ledger_url) as opened:
        yield opened


def test_record_is_idempotent_per_dataset_run_stage(ledger: Ledger) -> None:
    assert ledger.record("books", "run-1", "dpne", 1.5, 1e-7, EVENTS) is True
    # a retried task records the same stage again, even with different numbers: no-op
    assert ledger.record("books", "run-1", "dpne", 1.5, 1e-7, EVENTS) is False
    assert ledger.record("books", "run-1", "dpne", 9.0, 9e-7, EVENTS) is False
    assert ledger.spent("books") == Budget(1.5, 1e-7)
    assert len(ledger.entries("books")) == 1
    assert ledger.recorded("books", "run-1", "dpne")
    assert not ledger.recorded("books", "run-1", "bayes")
    assert not ledger.recorded("books", "run-2", "dpne")


def test_spent_sums_stages_and_runs_per_dataset(ledger: Ledger) -> None:
    assert ledger.spent("books") == Budget(0.0, 0.0)
    ledger.record("books", "run-1", "dpne", 1.0, 1e-7, EVENTS)
    ledger.record("books", "run-1", "bayes", 0.25, 2e-8, [])
    ledger.record("books", "run-2", "dpne", 2.0, 1e-7, EVENTS)
    ledger.record("mail", "run-1", "dpne", 7.0, 3e-7, EVENTS)  # another dataset: separate budget
    eps, delta = ledger.spent("books")
    assert eps == pytest.approx(3.25, rel=1e-12)
    assert delta == pytest.approx(2.2e-7, rel=1e-12)
    assert ledger.spent("mail") == Budget(7.0, 3e-7)
    entries = ledger.entries("books")
    assert {(e["run_id"], e["stage"]) for e in entries} == {
        ("run-1", "dpne"),
        ("run-1", "bayes"),
        ("run-2", "dpne"),
    }
    assert all(set(e) == {"dataset", "run_id", "stage", "epsilon", "delta", "recorded_at"} for e in entries)


def test_events_are_stored_as_mechanism_parameters(ledger: Ledger) -> None:
    ledger.record("books", "run-1", "dpne", 1.0, 1e-7, EVENTS)
    (row,) = ledger.export("books")
    assert [PrivacyEvent(**e) for e in json.loads(row["events"])] == EVENTS


def test_the_ledger_survives_reopening(ledger_url: str) -> None:
    with open_ledger(ledger_url) as ledger:
        ledger.record("books", "run-1", "dpne", 1.25, 1e-7, EVENTS)
        identity = ledger.identity()
    with open_ledger(ledger_url) as ledger:  # the migrations must not run again or wipe anything
        assert ledger.spent("books") == Budget(1.25, 1e-7)
        assert ledger.record("books", "run-1", "dpne", 1.25, 1e-7, EVENTS) is False
        assert ledger.identity() == identity


def test_each_migration_is_applied_once_in_order(ledger_url: str) -> None:
    with open_ledger(ledger_url) as ledger:
        ledger.datasets()  # first use migrates
    with open_ledger(ledger_url) as ledger:
        applied = ledger.schema_versions()
    assert applied == [(v, name) for v, name, _ in migrations()]
    assert [v for v, _ in applied] == list(range(1, len(applied) + 1))


def test_check_refuses_a_run_over_the_lifetime_epsilon(ledger: Ledger) -> None:
    ledger.record("books", "run-1", "dpne", 3.0, 1e-7, EVENTS)
    ledger.check("books", 2.0, 1e-7, lifetime_epsilon=5.0, lifetime_delta=1e-6, run_id="run-2")  # fits
    with pytest.raises(BudgetError) as err:
        ledger.check("books", 2.5, 1e-7, lifetime_epsilon=5.0, lifetime_delta=1e-6, run_id="run-2")
    message = str(err.value)
    assert "'books'" in message and "epsilon=3" in message and "lifetime 5" in message and "2.5" in message
    assert "\n" not in message
    # another dataset's spend is irrelevant
    ledger.check("mail", 4.9, 1e-7, lifetime_epsilon=5.0, lifetime_delta=1e-6, run_id="run-2")


def test_check_refuses_a_run_over_the_lifetime_delta(ledger: Ledger) -> None:
    ledger.record("books", "run-1", "dpne", 0.5, 8e-7, EVENTS)
    with pytest.raises(BudgetError, match=r"dataset 'books' has spent delta=8e-07 of its lifetime 1e-06"):
        ledger.check("books", 0.5, 3e-7, lifetime_epsilon=10.0, lifetime_delta=1e-6, run_id="run-2")
    ledger.check("books", 0.5, 2e-7, lifetime_epsilon=10.0, lifetime_delta=1e-6, run_id="run-2")


def test_check_without_lifetime_budget_never_refuses(ledger: Ledger) -> None:
    ledger.record("books", "run-1", "dpne", 50.0, 0.5, EVENTS)
    ledger.check("books", 50.0, 0.4, lifetime_epsilon=None, lifetime_delta=None)


def test_check_does_not_double_count_a_retried_run(ledger: Ledger) -> None:
    """A resumed run re-checks its own total: the spend it already recorded is not counted twice,
    while a new run id sees the full history."""
    ledger.record("books", "run-1", "dpne", 2.0, 1e-7, EVENTS)
    ledger.record("books", "run-2", "dpne", 1.5, 1e-7, EVENTS)
    ledger.record("books", "run-2", "bayes", 0.5, 5e-8, [])
    # run-2 asks for 2.0 in total; 2.0 (run-1) + 2.0 = 4.0 <= 4.0
    ledger.check("books", 2.0, 1.5e-7, lifetime_epsilon=4.0, lifetime_delta=1e-6, run_id="run-2")
    # without the run id the same request would count run-2's partial spend again: 4.0 + 2.0 > 4.0
    with pytest.raises(BudgetError, match="has spent epsilon=4 of its lifetime 4"):
        ledger.check("books", 2.0, 1.5e-7, lifetime_epsilon=4.0, lifetime_delta=1e-6)
    with pytest.raises(BudgetError):
        ledger.check("books", 2.0, 1.5e-7, lifetime_epsilon=4.0, lifetime_delta=1e-6, run_id="run-3")


def test_a_run_is_reserved_charged_finalized_and_closed(ledger: Ledger) -> None:
    """The life of a run in the ledger: its reservation counts while it is open, a pending charge
    (the upper bound before the draw) is replaced by the exact one, closing releases the rest."""
    ledger.open_run(
        "books", "r1", {"p": 1}, Budget(4.0, 1e-7), lifetime_epsilon=10.0, staging="/s", warehouse="/w"
    )
    assert ledger.committed("books") == Budget(4.0, 1e-7)  # reserved, nothing charged yet
    ledger.charge_pending("books", "r1", "dpne", Budget(4.0, 1e-7))
    assert ledger.entry("books", "r1", "dpne")["status"] == "pending"
    with pytest.raises(BudgetError, match="already charged"):
        ledger.charge_pending("books", "r1", "dpne", Budget(4.0, 1e-7))
    assert ledger.finalize("books", "r1", "dpne", 1.5, 1e-7, EVENTS) is True
    assert ledger.finalize("books", "r1", "dpne", 1.5, 1e-7, EVENTS) is False  # idempotent
    assert ledger.committed("books") == Budget(4.0, 1e-7)  # open: max(reserved, charged)
    assert ledger.run("r1")["warehouse"] == "/w" and ledger.run("r1")["staging"] == "/s"
    ledger.close_run("r1")
    assert ledger.committed("books") == Budget(1.5, 1e-7)
    assert ledger.closed_runs() == [("r1", "/w")] and ledger.open_runs() == []


def test_forecast_counts_the_refreshes_left_and_names_the_binding_limit(ledger: Ledger) -> None:
    assert ledger.forecast("books").runs_left is None  # no limit: not limited
    ledger.open_run("books", "r1", {}, Budget(3.0, 1e-7), lifetime_epsilon=10.0, lifetime_delta=1e-6)
    ledger.record("books", "r1", "dpne", 3.0, 1e-7, [])
    ledger.close_run("r1")
    forecast = ledger.forecast("books")  # the latest run's size: 3.0 of the 7.0 left -> 2 runs
    assert (forecast.runs_left, forecast.limited_by, forecast.per_run) == (2, "epsilon", Budget(3.0, 1e-7))
    assert "allows 2 more refreshes at epsilon 3" in forecast.sentence()
    assert ledger.forecast("books", Budget(0.1, 3e-7)).limited_by == "delta"  # 9e-7 left / 3e-7
    assert ledger.forecast("books", Budget(0.1, 3e-7)).runs_left == 3


def test_schedule_stop_names_the_last_allowed_refresh() -> None:
    monday = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
    text = schedule_stop("@weekly", 2, monday)  # Sundays at 00:00: the 13th and 20th, refused the 27th
    assert "2026-12-20" in text and "2026-12-27" in text and "refused" in text
    assert "2026-12-08" in schedule_stop("0 3 * * *", 0, monday)  # the very next refresh is refused
    assert schedule_stop("@once", 3, monday) is None and schedule_stop("@weekly", None, monday) is None


def test_export_has_every_charge_with_its_run_state(ledger: Ledger) -> None:
    ledger.open_run("books", "r1", {}, Budget(1.0, 0.0))
    ledger.record("books", "r1", "dpne", 1.0, 0.0, EVENTS)
    ledger.record("mail", "r2", "synth", 0.5, 0.0, [])
    rows = ledger.export()
    assert [(r["dataset"], r["run_id"], r["stage"], r["run_state"]) for r in rows] == [
        ("books", "r1", "dpne", "open"),
        ("mail", "r2", "synth", None),  # recorded without a registered run
    ]
    assert [r["dataset"] for r in ledger.export("mail")] == ["mail"]


def test_runs_lock_across_processes(ledger_url: str) -> None:
    """A run's lock is held across processes (a task of the run on another worker waits)."""
    script = (
        "import sys, time; from dpngram.release.ledger import open_ledger\n"
        "with open_ledger(sys.argv[1]) as l, l.run_lock('r1') as got:\n"
        "    print('held', got, flush=True); time.sleep(30)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script, ledger_url], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held True"
        with open_ledger(ledger_url) as ledger:
            with ledger.run_lock("r1", wait=0.5) as got:
                assert got is False
            with ledger.run_lock("r2", wait=0) as got:
                assert got is True  # another run is not held up
        holder.kill()  # kill -9: the lock goes with the process (flock) or its connection
        holder.wait()
        with open_ledger(ledger_url) as ledger, ledger.run_lock("r1", wait=10) as got:
            assert got is True
    finally:
        holder.kill()


def _race(url: str, run_id: str, barrier, results) -> None:
    """One of two workers racing for a dataset's last budget (a process of its own)."""
    with open_ledger(url) as ledger:
        barrier.wait()
        try:
            ledger.open_run("books", run_id, {"run": run_id}, Budget(3.0, 1e-7), lifetime_epsilon=5.0)
            ledger.charge_pending("books", run_id, "dpne", Budget(3.0, 1e-7))
            results[run_id] = "won"
        except BudgetError as err:
            results[run_id] = f"refused: {err}"


@pytest.mark.parametrize("attempt", range(3))
def test_two_processes_racing_for_the_last_budget_exactly_one_wins(ledger_url: str, attempt: int) -> None:
    """Issue 50: two workers race for what is left of a dataset's lifetime (2 + 3 of 5 is free,
    each asks 3): exactly one wins, the other is refused with its one-line reason, and nothing is
    left reserved for it. Repeated: the race goes either way."""
    with open_ledger(ledger_url) as ledger:
        ledger.set_lifetime("books", 5.0, None)
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        results = manager.dict()
        barrier = context.Barrier(2)
        workers = [
            context.Process(target=_race, args=(ledger_url, f"w{i}", barrier, results)) for i in (1, 2)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        outcome = dict(results)
    assert sorted(v.split(":")[0] for v in outcome.values()) == ["refused", "won"], outcome
    (loser,) = [run for run, v in outcome.items() if v.startswith("refused")]
    (winner,) = [run for run, v in outcome.items() if v == "won"]
    reason = outcome[loser].removeprefix("refused: ")
    assert "\n" not in reason and "lifetime 5" in reason and "dpngram budget" in reason
    with open_ledger(ledger_url) as ledger:
        assert ledger.run(loser) is None  # refused before it was registered: nothing reserved
        assert ledger.committed("books") == Budget(3.0, 1e-7)
        assert [e["run_id"] for e in ledger.entries("books")] == [winner]


def test_the_default_ledger_is_per_user_and_absolute(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DPNGRAM_LEDGER", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    assert ledger_location() == str(tmp_path / "data" / "dpngram" / "ledger.duckdb")
    assert default_ledger_path() == tmp_path / "data" / "dpngram" / "ledger.duckdb"
    monkeypatch.setenv("DPNGRAM_LEDGER", "rel/ledger.duckdb")  # resolved once, never per folder
    assert ledger_location() == str(tmp_path / "rel" / "ledger.duckdb")
    assert ledger_location("postgresql+psycopg2://u:pw@h:5432/db") == "postgresql://u:pw@h:5432/db"
    assert describe_location("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    with pytest.raises(ConfigError, match="not a ledger location"):
        ledger_location("s3://bucket/ledger")


def test_a_file_named_ledger_duckdb_holds_the_ledger_schema(tmp_path: Path) -> None:
    """The embedded file is attached under a fixed name: a file called ledger.duckdb does not clash
    with the schema ``ledger``, and an auditor reads the views with plain DuckDB."""
    path = tmp_path / "ledger.duckdb"
    with Ledger(DuckDBLedgerStore(path)) as ledger:
        ledger.record("books", "r1", "dpne", 1.0, 0.0, [])
    con = duckdb.connect(str(tmp_path / "auditor.duckdb"))
    con.execute(f"ATTACH '{path}' AS audit (READ_ONLY)")
    assert con.execute("SELECT dataset, charged_epsilon FROM audit.ledger.audit_datasets").fetchall() == [
        ("books", 1.0)
    ]
    con.close()


def test_an_older_warehouse_ledger_is_imported_once_and_nothing_is_overwritten(tmp_path: Path) -> None:
    """`dpngram ledger --import`: the ledger an older dpngram kept inside its warehouse file."""
    old = tmp_path / "warehouse.duckdb"
    con = duckdb.connect(str(old))
    con.execute(
        """
        CREATE SCHEMA ledger;
        CREATE TABLE ledger.privacy_spend (dataset VARCHAR, run_id VARCHAR, stage VARCHAR,
            epsilon DOUBLE, delta DOUBLE, events VARCHAR, recorded_at TIMESTAMP, status VARCHAR);
        CREATE TABLE ledger.lifetime_budget (dataset VARCHAR, lifetime_epsilon DOUBLE,
            lifetime_delta DOUBLE, updated_at TIMESTAMP, version BIGINT);
        CREATE TABLE ledger.runs (run_id VARCHAR, dataset VARCHAR, fingerprint VARCHAR,
            reserved_epsilon DOUBLE, reserved_delta DOUBLE, state VARCHAR, created_at TIMESTAMP,
            staging VARCHAR);
        CREATE TABLE ledger.warehouse_identity (id VARCHAR, secret VARCHAR, created_at TIMESTAMP);
        INSERT INTO ledger.privacy_spend VALUES ('books', 'old-1', 'dpne', 3.0, 1e-7, '[]', now(), 'final');
        INSERT INTO ledger.lifetime_budget VALUES
            ('books', 8.0, NULL, now(), 3), ('mail', 2.0, NULL, now(), 0);
        INSERT INTO ledger.runs VALUES ('old-1', 'books', '{}', 3.0, 1e-7, 'closed', now(), '/o/s');
        INSERT INTO ledger.warehouse_identity VALUES ('abc', 'ff', now());
        """
    )
    con.close()
    with open_ledger(str(tmp_path / "new.duckdb")) as ledger:
        ledger.set_lifetime("mail", 1.0, None)  # the new ledger's own limit is kept
        added = import_legacy(ledger, old)
        assert added == {"charges": 1, "runs": 1, "lifetime_budgets": 1, "identity": 1}
        assert import_legacy(ledger, old) == {"charges": 0, "runs": 0, "lifetime_budgets": 0, "identity": 0}
        assert ledger.spent("books") == Budget(3.0, 1e-7)
        assert ledger.lifetime("books") == (8.0, None) and ledger.lifetime("mail") == (1.0, None)
        assert ledger.identity()[0] == "abc"  # unfinished runs' staging stays resumable
    with pytest.raises(ConfigError, match="no privacy ledger"):
        with open_ledger(str(tmp_path / "other.duckdb")) as ledger:
            empty = tmp_path / "empty.duckdb"
            duckdb.connect(str(empty)).close()
            import_legacy(ledger, empty)


def test_a_busy_embedded_ledger_is_one_line(tmp_path: Path, monkeypatch) -> None:
    """Another process holding the embedded file open: the transaction waits, then fails with one
    line naming the ledger and the process (never a traceback)."""
    from dpngram.core.errors import LedgerBusy
    from dpngram.release import ledger_store

    path = tmp_path / "ledger.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(path)!r}); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        monkeypatch.setattr(ledger_store, "BUSY_SECONDS", 0.5)
        with pytest.raises(LedgerBusy) as err, open_ledger(str(path)) as ledger:
            ledger.datasets()
        assert (
            "\n" not in str(err.value) and str(path) in str(err.value) and str(holder.pid) in str(err.value)
        )
    finally:
        holder.kill()
        holder.wait()
    assert os.path.exists(path)


def _other_process_reads(path: Path) -> subprocess.CompletedProcess[str]:
    """A separate process opening the ledger file read-write, as a second worker's transaction would."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            f"import duckdb; c = duckdb.connect({str(path)!r}); "
            "print(c.execute('SELECT count(*) FROM ledger.ledger.privacy_spend').fetchone()[0])",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_embedded_ledger_file_is_free_between_transactions(tmp_path: Path) -> None:
    """The process keeps one in-memory DuckDB session between transactions and attaches the file
    for each one only: after a transaction (also one that failed), another process can open the
    file at once, and the next transaction of this process still works."""
    path = tmp_path / "ledger.duckdb"
    with open_ledger(str(path)) as ledger:
        assert ledger.record("ds", "run-1", "dpne", 1.5, 1e-7, EVENTS)
        first = _other_process_reads(path)
        assert first.returncode == 0, first.stderr
        assert int(first.stdout) == 1
        with pytest.raises(ZeroDivisionError), ledger.store.transaction() as tx:
            tx.rows("ledger/spent", dataset="ds", run_id=None)
            raise ZeroDivisionError
        after_failure = _other_process_reads(path)
        assert after_failure.returncode == 0, after_failure.stderr
        assert ledger.record("ds", "run-2", "dpne", 1.5, 1e-7, EVENTS)
        assert int(_other_process_reads(path).stdout) == 2


def test_a_transaction_inside_a_transaction_gets_its_own_connection(tmp_path: Path) -> None:
    """The session is in use during a transaction: a nested one (same thread, re-entrant lock) is
    given a connection of its own, and the session is reusable afterwards."""
    from dpngram.release import ledger_store

    a = DuckDBLedgerStore(tmp_path / "a.duckdb")
    b = DuckDBLedgerStore(tmp_path / "b.duckdb")
    with a.transaction() as outer:
        outer.rows("ledger/spent", dataset="x", run_id=None)
        with b.transaction() as inner:
            inner.rows("ledger/spent", dataset="x", run_id=None)
        assert ledger_store._SESSION[2], "the outer transaction still holds the session"
    assert not ledger_store._SESSION[2]
    with a.transaction() as again:
        assert again.rows("ledger/spent", dataset="x", run_id=None) == [(0, 0)]
