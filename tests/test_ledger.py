"""The privacy ledger (dpngram.release.ledger.Ledger) on a real DuckDB warehouse file.

Lifetime budgets compose across runs by basic composition (sums of epsilon and delta); a stage's
spend is recorded once per (dataset, run, stage), so a retried task cannot charge twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpngram.core.accounting import PrivacyEvent
from dpngram.core.budget import Budget
from dpngram.core.errors import BudgetError
from dpngram.engines.duckdb import Warehouse
from dpngram.release.ledger import Ledger

EVENTS = [PrivacyEvent("dpne", "gaussian", sigma=3.5), PrivacyEvent("dpne", "approx", delta=5e-8)]


@pytest.fixture
def warehouse(tmp_path: Path):
    wh = Warehouse(tmp_path / "warehouse.duckdb", memory_limit="256MB")
    yield wh
    wh.close()


def test_record_is_idempotent_per_dataset_run_stage(warehouse: Warehouse) -> None:
    ledger = Ledger(warehouse.con)
    assert ledger.record("books", "run-1", "dpne", 1.5, 1e-7, EVENTS) is True
    # a retried task records the same stage again, even with different numbers: no-op
    assert ledger.record("books", "run-1", "dpne", 1.5, 1e-7, EVENTS) is False
    assert ledger.record("books", "run-1", "dpne", 9.0, 9e-7, EVENTS) is False
    assert ledger.spent("books") == Budget(1.5, 1e-7)
    assert len(ledger.entries("books")) == 1
    assert ledger.recorded("books", "run-1", "dpne")
    assert not ledger.recorded("books", "run-1", "bayes")
    assert not ledger.recorded("books", "run-2", "dpne")


def test_spent_sums_stages_and_runs_per_dataset(warehouse: Warehouse) -> None:
    ledger = Ledger(warehouse.con)
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


def test_events_are_stored_as_mechanism_parameters(warehouse: Warehouse) -> None:
    ledger = Ledger(warehouse.con)
    ledger.record("books", "run-1", "dpne", 1.0, 1e-7, EVENTS)
    stored = warehouse.scalar("SELECT events FROM ledger.privacy_spend WHERE run_id = 'run-1'")
    assert [PrivacyEvent(**e) for e in json.loads(stored)] == EVENTS


def test_ledger_survives_reopening_the_warehouse(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    with Warehouse(path, memory_limit="256MB") as wh:
        Ledger(wh.con).record("books", "run-1", "dpne", 1.25, 1e-7, EVENTS)
    with Warehouse(path, memory_limit="256MB") as wh:
        ledger = Ledger(wh.con)  # CREATE ... IF NOT EXISTS must not wipe anything
        assert ledger.spent("books") == Budget(1.25, 1e-7)
        assert ledger.record("books", "run-1", "dpne", 1.25, 1e-7, EVENTS) is False


def test_check_refuses_a_run_over_the_lifetime_epsilon(warehouse: Warehouse) -> None:
    ledger = Ledger(warehouse.con)
    ledger.record("books", "run-1", "dpne", 3.0, 1e-7, EVENTS)
    ledger.check(
        "books", 2.0, 1e-7, lifetime_epsilon=5.0, lifetime_delta=1e-6, run_id="run-2"
    )  # exactly fits
    with pytest.raises(BudgetError) as err:
        ledger.check("books", 2.5, 1e-7, lifetime_epsilon=5.0, lifetime_delta=1e-6, run_id="run-2")
    message = str(err.value)
    assert "'books'" in message and "epsilon=3" in message and "lifetime 5" in message and "2.5" in message
    assert "\n" not in message
    # another dataset's spend is irrelevant
    ledger.check("mail", 4.9, 1e-7, lifetime_epsilon=5.0, lifetime_delta=1e-6, run_id="run-2")


def test_check_refuses_a_run_over_the_lifetime_delta(warehouse: Warehouse) -> None:
    ledger = Ledger(warehouse.con)
    ledger.record("books", "run-1", "dpne", 0.5, 8e-7, EVENTS)
    with pytest.raises(BudgetError, match=r"dataset 'books' has spent delta=8e-07 of its lifetime 1e-06"):
        ledger.check("books", 0.5, 3e-7, lifetime_epsilon=10.0, lifetime_delta=1e-6, run_id="run-2")
    ledger.check("books", 0.5, 2e-7, lifetime_epsilon=10.0, lifetime_delta=1e-6, run_id="run-2")


def test_check_without_lifetime_budget_never_refuses(warehouse: Warehouse) -> None:
    ledger = Ledger(warehouse.con)
    ledger.record("books", "run-1", "dpne", 50.0, 0.5, EVENTS)
    ledger.check("books", 50.0, 0.4, lifetime_epsilon=None, lifetime_delta=None)


def test_check_does_not_double_count_a_retried_run(warehouse: Warehouse) -> None:
    """A resumed run re-checks its own total: the spend it already recorded is not counted twice,
    while a new run id sees the full history."""
    ledger = Ledger(warehouse.con)
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
