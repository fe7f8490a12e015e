"""The floor of the two-dataset ratio (benchmarks/parallel_datasets_bench.py): what the machine's
two cores allow, from the busy CPU seconds a single run took beyond the machine's background."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import parallel_datasets_bench as bench  # noqa: E402  (benchmarks/ is not a package)


def row(datasets: int, busy: float, window: float, **extra) -> dict:
    return {
        "datasets": ["a", "b"][:datasets],
        "wall_seconds": window,
        "machine_busy_cpu_seconds": busy,
        "machine_window_seconds": window,
        "machine_busy_cores": busy / window,
        **extra,
    }


def test_with_no_background_the_floor_is_the_cores_a_single_run_keeps_busy():
    # 60 busy seconds in 50 s: two runs need 120 s of 2 cores = 60 s, 1.2x the single run.
    floor = bench.machine_floor([row(1, 60.0, 50.0), row(2, 110.0, 60.0)], background=0.0)
    assert floor["ratio_floor_from_machine_cpu"] == pytest.approx(1.2)
    assert floor["two_datasets_machine_busy_cores_median"] == pytest.approx(110.0 / 60.0, abs=1e-3)


def test_the_background_is_taken_out_of_the_run_and_out_of_the_cores_left():
    # b = 0.2: own = 60 - 0.2 * 50 = 50 s; two runs need 100 s of the 1.8 cores left = 55.6 s.
    floor = bench.machine_floor([row(1, 60.0, 50.0)], background=0.2)
    assert floor["ratio_floor_from_machine_cpu"] == pytest.approx(100.0 / 1.8 / 50.0, abs=1e-3)
    assert floor["two_datasets_machine_busy_cores_median"] is None


def test_a_run_that_keeps_under_one_core_busy_has_the_floor_one():
    assert bench.machine_floor([row(1, 20.0, 50.0)], background=0.0)["ratio_floor_from_machine_cpu"] == 1.0


def test_rows_from_before_the_machine_was_measured_give_no_floor():
    old = {"datasets": ["a"], "wall_seconds": 50.0}
    assert bench.machine_floor([old], background=0.1) == {}
    assert bench.machine_floor([row(1, 60.0, 50.0)], background=None) == {}
    failed = row(1, 60.0, 50.0, errors=["failed"])
    assert bench.machine_floor([failed], background=0.0) == {}


def test_the_machine_window_counts_the_cpu_this_process_burns():
    window = bench.MachineWindow().start()
    deadline = time.perf_counter() + 0.5
    while time.perf_counter() < deadline:  # one core busy for half a second
        pass
    measured = window.stop()
    assert measured["machine_window_seconds"] >= 0.5
    # at least this process's core; at most both cores of the machine (other jobs may share it)
    assert 0.8 <= measured["machine_busy_cores"] <= 2.05
