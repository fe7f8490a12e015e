"""What every benchmark records next to its numbers: the machine, the code measured, the load.

Every benchmark imports these instead of writing them again (``benchmarks/`` is on its
``sys.path``; it is not a package). Importing this module from a benchmark's own process also
points the privacy ledger at the benchmarks' own file (:func:`charge_bench_ledger`).

A large benchmark is a folder of scenario modules with one entry point
``benchmarks/NAME_bench.py``, which ``make bench`` runs (``benchmarks/dpne/``, ``benchmarks/lm/``).
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT / "benchmarks" / ".data"
BENCHMARKS = ROOT / "benchmarks"
#: The privacy ledger that benchmark runs charge, whatever ``DPNGRAM_LEDGER`` the caller has set:
#: the benchmarks release generated and public corpora, and those charges belong in no real
#: ledger. Without this, a benchmark run directly (not through ``make bench``) charged the
#: caller's ledger, the per-user default included, which then listed dozens of benchmark datasets.
BENCH_LEDGER = DATA / "ledger.duckdb"
LEDGER_ENV = "DPNGRAM_LEDGER"  # dpngram.release.ledger_store.LEDGER_ENV, not imported: no dpngram here


def charge_bench_ledger(main_script: str | None = None) -> bool:
    """Point ``DPNGRAM_LEDGER`` at :data:`BENCH_LEDGER` (for this process and the ``dpngram``
    processes it starts) when the process's main script (``sys.argv[0]`` unless given) is a file
    under ``benchmarks/``; True if it did. Called when this module is imported, so every
    benchmark and study charges the benchmarks' ledger however it is started. Other importers (the
    tests, which import benchmark modules) keep their own ledger."""
    script = main_script if main_script is not None else (sys.argv[0] if sys.argv else "")
    if not script or not Path(script).is_file():
        return False
    if BENCHMARKS not in Path(script).resolve().parents:
        return False
    os.environ[LEDGER_ENV] = str(BENCH_LEDGER)
    return True


def machine() -> dict[str, Any]:
    """Host, cores, CPU model, memory, platform, load averages and the versions of Python and of the
    libraries that set the speed (those installed), for every benchmark's JSON."""
    try:
        mem_kb = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    try:
        cpu_model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        cpu_model = platform.processor() or platform.machine()
    info: dict[str, Any] = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gib": round(mem_kb / 1024**2, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_1_5_15min": [round(x, 2) for x in os.getloadavg()],
    }
    for library in ("duckdb", "polars", "numpy"):
        try:
            info[library] = importlib.import_module(library).__version__
        except ImportError:
            pass
    return info


def git_commit() -> str | None:
    """HEAD, with ``+uncommitted`` when src/ or sql/ differ from it (the code measured)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "src", "sql"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+uncommitted" if dirty else "")


def load_average() -> float:
    """The 1-minute load average: above the core count, timings are upper bounds."""
    return round(os.getloadavg()[0], 2)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """``benchmarks/results/NAME`` as indented JSON; returns the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


class PeriodicSampler:
    """Calls :meth:`tick` every ``interval`` seconds on a background thread, from ``with`` entry to
    exit (and once more at exit). Subclasses record what they measure in ``tick``."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def tick(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.interval)

    def __enter__(self):  # noqa: ANN204 - the subclass
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def tree_rss(proc) -> int:  # noqa: ANN001 - a psutil.Process
    """Resident bytes of a process and all its descendants (psutil); 0 for what has ended."""
    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except Exception:  # noqa: BLE001 - ended
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except Exception:  # noqa: BLE001 - ended between listing and reading
            continue
    return total


def baseline_tree(commit: str) -> Path:
    """A checkout of ``commit`` under benchmarks/.data/ (a detached git worktree, made once), runnable
    with this checkout's venv: its ``src`` goes first on PYTHONPATH, and ``src/dpngram/sql`` links
    to its own ``sql/`` (the editable install would otherwise map ``dpngram.sql`` to this
    checkout's SQL)."""
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", commit], capture_output=True, text=True, check=True
    ).stdout.strip()
    tree = DATA / f"baseline_{rev}"
    if not (tree / "src" / "dpngram").is_dir():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), rev], check=True
        )
    link = tree / "src" / "dpngram" / "sql"
    if not link.exists():
        link.symlink_to(tree / "sql", target_is_directory=True)
    return tree


charge_bench_ledger()
