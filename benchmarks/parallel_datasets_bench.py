"""Datasets in parallel: two datasets of 200k users released at once, against one alone.

Issue 50: every dataset used to queue behind every other (one DuckDB warehouse file for all runs
and the ledger, an Airflow pool of one slot), so two datasets took twice the time of one. Now each
run has a warehouse file of its own (``WAREHOUSE/runs/RUN_ID.duckdb``), the ledger is its own store
and the tasks of one run take turns through the run's lock in the ledger, so two datasets' runs go
on side by side. Target: two runs started together finish within 1.3x the wall time of one.

Two ways, each measured (``--mode airflow|cli|both``, default both):

* ``airflow`` (the issue's measure, "triggered together"): the ``dpngram_release`` DAG in a real
  Airflow 3 (api-server, scheduler, dag-processor; LocalExecutor with parallelism 4, the tests'
  launcher ``tests/test_airflow_standalone.Airflow``), runs triggered through the REST API as the
  trigger form does; wall = the last run's end_date - the first run's start_date;
* ``cli``: ``dpngram run`` as a user runs it, its own process each (no orchestration overhead);
  wall = until the last process exits.

Both with the product's defaults (the default budget split: every stage and the language model,
ε = 4, δ = 1e-7, T = 5) and ``--memory-limit 4GB`` each, on two generated corpora of 200k users
(:func:`scale_bench.corpus`: :func:`dpngram.text.sample.write_sample`, a 50,000-word Zipf
vocabulary, about 100 tokens a user; the second corpus with another seed) and one public corpus
(a team releases its datasets against one public corpus: its n-gram counts and Kneser-Ney model
are cached, and one unmeasured run first warms that cache, as every weekly refresh finds it). Both
charge one embedded ledger (the per-user default of a machine), so the ledger's file lock is
exercised too.

Measured in one session, alternating so that a drift of the host hits both: ``--repeats`` times
(one dataset alone, then both datasets started together). Per CLI row: wall seconds, the CPU
seconds of the process tree(s) (user + system, from psutil), and the single run's CPU use in cores
(CPU seconds / wall): two runs of a job that keeps c of the 2 cores busy cannot finish in less than
max(1, c) times its wall time, so that is the floor of the ratio on this machine. Every row (both
modes) also records the machine's busy CPU seconds over its window (every process: in Airflow mode
that includes the scheduler, the api-server and each task's own process, which the CLI's CPU seconds
leave out), and each mode first measures the machine's background use with nothing triggered
(``background_cores``, b). A run that takes ``own`` busy seconds beyond the background in a window
of ``w`` seconds gives the floor 2·own / ((2 − b)·w): two such runs need 2·own seconds of the
2 − b cores the background leaves. ``machine_busy_cores`` of a two-dataset row near 2 says the pair
was bound by the cores, not by a lock or a queue.

``--mode cli --pair-threads 1``: the same, with the two datasets' runs limited to one thread each
(the single run keeps one thread per core). It asks whether splitting the cores between concurrent
runs, instead of letting four threads share two cores, takes the pair below the floor: only if a
run's CPU seconds shrink with fewer threads (they did not, 2026-12-07: docs/orchestration.md).

Baseline (the trivial alternative a user had): main of 2026-12-05 ran the two datasets one after
the other (the one-slot pool), i.e. twice the wall time of one; that row is computed from the
single-run times of this session, not measured separately (two ``dpngram run`` of that code into
the one default warehouse file refuse each other: "warehouse ... is in use").

Usage: ``.venv/bin/python benchmarks/parallel_datasets_bench.py [--users 200000] [--repeats 2]
[--mode both]``.
Writes ``results/parallel_datasets.json`` and ``results/parallel_datasets.png``. Run it alone on
the machine: other jobs on the 2 cores distort both sides of the ratio (the load is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, RESULTS, ROOT, git_commit, load_average, machine, now, write_result  # noqa: E402
from scale_bench import PUBLIC_SENTENCES, SEED, VOCAB  # noqa: E402

TARGET_RATIO = 1.3
MEMORY_LIMIT = "4GB"
#: Seconds to wait for a dataset's Airflow run. The tests' 300 s (tests/test_airflow_standalone.py)
#: is sized for their small corpora: two 200k-user datasets together took 245 s on a busy 2-core
#: host and passed 300 s once when other jobs shared it (make bench, 2026-12-07).
RUN_TIMEOUT = 1800.0
DATASETS = ("par-a", "par-b")


def corpus(users: int, seed: int) -> dict[str, Path]:
    """A generated corpus (cached under benchmarks/.data/parallel/), as scale_bench's with ``seed``."""
    from dpngram.text.sample import write_sample

    out = DATA / "parallel" / f"u{users}_v{VOCAB}_s{seed}"
    paths = {"users": out / "users.jsonl.gz", "public": out / "public.txt.gz"}
    if not all(p.exists() for p in paths.values()):
        print(f"generating {users:,} users (seed {seed}) ...", flush=True)
        write_sample(out, n_users=users, seed=seed, vocab_size=VOCAB, public_sentences=PUBLIC_SENTENCES)
    return paths


def command(dataset: str, paths: dict[str, Path], work: Path, threads: int | None = None) -> list[str]:
    """``dpngram run`` of one dataset; ``threads``: its ``--threads`` (default: one per core)."""
    return [
        str(ROOT / ".venv" / "bin" / "dpngram"),
        "run",
        "--dataset", dataset,
        "--input", str(paths["users"]),
        "--public", str(paths["public"]),
        "--out", str(work / "out"),
        "--warehouse", str(work / "wh"),
        "--memory-limit", MEMORY_LIMIT,
        "--quiet",
        "--json",
        *(["--threads", str(threads)] if threads else []),
    ]  # fmt: skip


def cpu_seconds(proc: Any) -> float:
    """User + system seconds of a psutil process and its children (alive and reaped)."""
    try:
        times = proc.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in proc.children(recursive=True):
            try:
                t = child.cpu_times()
                total += t.user + t.system
            except Exception:  # noqa: BLE001 - ended between listing and reading
                continue
        return total
    except Exception:  # noqa: BLE001 - ended
        return 0.0


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot, over all cores: user, nice, system,
    irq and softirq (not idle, iowait or steal; guest time is already inside user and nice)."""
    import psutil

    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


class MachineWindow:
    """The machine's busy CPU seconds and the wall seconds between :meth:`start` and :meth:`stop`."""

    def start(self) -> MachineWindow:
        self._busy, self._started = machine_busy_seconds(), time.perf_counter()
        return self

    def stop(self) -> dict[str, float]:
        busy = machine_busy_seconds() - self._busy
        window = time.perf_counter() - self._started
        return {
            "machine_busy_cpu_seconds": round(busy, 1),
            "machine_window_seconds": round(window, 1),
            "machine_busy_cores": round(busy / window, 3),
        }


def background_cores(seconds: float = 20.0) -> float:
    """The machine's busy cores with nothing triggered (Airflow idling, or nothing at all)."""
    window = MachineWindow().start()
    time.sleep(seconds)
    return window.stop()["machine_busy_cores"]


def run_together(
    jobs: list[tuple[str, dict[str, Path]]],
    work: Path,
    ledger: Path,
    keep_cache: bool = False,
    threads: int | None = None,
) -> dict[str, Any]:
    """Start ``jobs`` (dataset, corpus) at once; wall time until the last finishes, CPU seconds.
    ``keep_cache``: the warehouse's public-model cache survives between calls; ``threads``: each
    run's ``--threads``."""
    import psutil

    for stale in (work / "out", work / "wh" / "runs", work / "wh" / "operator"):
        shutil.rmtree(stale, ignore_errors=True)
    if not keep_cache:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DPNGRAM_LEDGER": str(ledger)}
    load_before = load_average()
    machine_window = MachineWindow().start()
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            command(ds, paths, work, threads),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for ds, paths in jobs
    ]
    watched = [psutil.Process(p.pid) for p in procs]
    cpu = [0.0] * len(procs)
    ends: list[float | None] = [None] * len(procs)
    while any(e is None for e in ends):
        for i, p in enumerate(procs):
            if ends[i] is None:
                cpu[i] = max(cpu[i], cpu_seconds(watched[i]))
                if p.poll() is not None:
                    ends[i] = time.perf_counter() - started
        time.sleep(0.2)
    busy = machine_window.stop()
    outputs = [p.communicate() for p in procs]
    row: dict[str, Any] = {
        "datasets": [ds for ds, _ in jobs],
        "wall_seconds": round(max(e for e in ends if e is not None), 1),
        "wall_seconds_each": [round(e, 1) for e in ends if e is not None],
        "cpu_seconds_each": [round(c, 1) for c in cpu],
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "exit_codes": [p.returncode for p in procs],
        **busy,
    }
    for (out, err), p in zip(outputs, procs, strict=True):
        if p.returncode != 0:
            row.setdefault("errors", []).append(err.strip().splitlines()[-1:])
        else:
            summary = json.loads(out)
            row.setdefault("epsilon_total", []).append(summary["epsilon_total"])
    shutil.rmtree(work / "wh" / "runs", ignore_errors=True)  # private tables: hundreds of MB
    return row


def _airflow(base: Path, ledger: Path) -> Any:
    """A started Airflow (the tests' launcher) whose tasks use ``ledger`` and their own warehouse."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_airflow_standalone import DAG_ID, Airflow

    shutil.rmtree(base, ignore_errors=True)
    airflow = Airflow(base)
    airflow.env.update(
        {
            "AIRFLOW__CORE__PARALLELISM": "4",
            # Airflow's own defaults, not the tests' 10 s / 5 s (there so that a test sees a DAG
            # file soon): re-parsing the DAG files every 10 s kept 0.09 cores busy on an idle
            # machine, a tenth of what two runs share (docs/orchestration.md)
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "300",
            "DPNGRAM_MAX_ACTIVE_RUNS": "4",
            "DPNGRAM_LEDGER": str(ledger),
            "DPNGRAM_WAREHOUSE": str(base / "wh"),
        }
    )
    airflow.start()
    airflow.login()
    airflow.unpause(DAG_ID)
    return airflow


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def trigger_together(airflow: Any, jobs: list[tuple[str, dict[str, Path]]], out: Path) -> dict[str, Any]:
    """Trigger ``jobs`` through the REST API at once; wall = last end_date - first start_date."""
    from test_airflow_standalone import DAG_ID

    load_before = load_average()
    machine_window = MachineWindow().start()
    runs = []
    for dataset, paths in jobs:
        conf = {
            "dataset": dataset,
            "input": str(paths["users"]),
            "public": str(paths["public"]),
            "out": str(out),
            "memory_limit": MEMORY_LIMIT,
        }
        status, run = airflow.trigger(conf)
        assert status == 200, (status, run)
        runs.append(run["dag_run_id"])
    states = [airflow.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT) for run_id in runs]
    busy = machine_window.stop()
    bodies = [airflow.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{r}")[1] for r in runs]
    starts = [_seconds(b["start_date"]) for b in bodies]
    ends = [_seconds(b["end_date"]) for b in bodies]
    return {
        "mode": "airflow",
        "datasets": [ds for ds, _ in jobs],
        "wall_seconds": round(max(ends) - min(starts), 1),
        "wall_seconds_each": [round(e - s, 1) for s, e in zip(starts, ends, strict=True)],
        "states": states,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        **busy,
        **({"errors": states} if any(s != "success" for s in states) else {}),
    }


def machine_floor(rows: list[dict[str, Any]], background: float | None) -> dict[str, Any]:
    """The ratio's floor from the machine's busy CPU (module docstring): per single-dataset row,
    own = busy − b·window and floor = max(1, 2·own / ((2 − b)·window)); the medians, and the
    machine's busy cores while two datasets ran. Empty for rows from before these were recorded."""
    measured = [r for r in rows if "machine_busy_cpu_seconds" in r and not r.get("errors")]
    single = [r for r in measured if len(r["datasets"]) == 1]
    pairs = [r for r in measured if len(r["datasets"]) == 2]
    if background is None or not single:
        return {}
    floors = []
    for r in single:
        own = r["machine_busy_cpu_seconds"] - background * r["machine_window_seconds"]
        floors.append(max(1.0, 2 * own / ((2 - background) * r["machine_window_seconds"])))

    def cores(of: list[dict[str, Any]]) -> float | None:
        return round(statistics.median(r["machine_busy_cores"] for r in of), 3) if of else None

    return {
        "background_cores": background,
        "single_run_machine_busy_cores_median": cores(single),
        "ratio_floor_from_machine_cpu": round(statistics.median(floors), 3),
        "two_datasets_machine_busy_cores_median": cores(pairs),
    }


def summarise(rows: list[dict[str, Any]], background: float | None = None) -> dict[str, Any]:
    """Medians, the ratio and its floors on this machine. From a CLI row's process tree: a run of
    ``c`` CPU seconds over a wall of ``w`` keeps c / w cores busy; two such runs on 2 cores cannot
    take less than max(w, c) seconds, so the ratio cannot go below max(1, c / w) (Airflow rows have
    no process tree of their own: their floor is :func:`machine_floor`'s, which both modes get)."""
    alone = [r["wall_seconds"] for r in rows if len(r["datasets"]) == 1 and not r.get("errors")]
    together = [r["wall_seconds"] for r in rows if len(r["datasets"]) == 2 and not r.get("errors")]
    single = [r for r in rows if len(r["datasets"]) == 1 and "cpu_seconds_each" in r]
    cores = [r["cpu_seconds_each"][0] / r["wall_seconds"] for r in single]
    if not alone or not together:
        return {"error": "a run failed: see rows"}
    one, two = statistics.median(alone), statistics.median(together)
    floor = max(1.0, statistics.median(cores)) if cores else None
    return {
        "one_dataset_wall_seconds_median": round(one, 1),
        "two_datasets_wall_seconds_median": round(two, 1),
        "ratio_two_over_one": round(two / one, 3),
        "ratio_per_repeat": [round(t / a, 3) for a, t in zip(alone, together, strict=False)],
        "single_run_cpu_seconds_median": round(statistics.median(r["cpu_seconds_each"][0] for r in single), 1)
        if single
        else None,
        "single_run_cpu_cores_median": round(statistics.median(cores), 3) if cores else None,
        "ratio_floor_on_this_machine": round(floor, 3) if floor else None,
        "baseline_main_2026_12_05_ratio": 2.0,
        "baseline_note": "main of 2026-12-05 queued every dataset in the one-slot pool dpngram_warehouse: "
        "two datasets took the sum of their wall times (ratio 2 for two equal runs)",
        **machine_floor(rows, background),
        "target_ratio": TARGET_RATIO,
        "meets_target": two / one <= TARGET_RATIO,
    }


def plot(payload: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in ("airflow", "cli") if "error" not in payload["summary"].get(m, {"error": 1})]
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.2), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        s = payload["summary"][mode]
        one = s["one_dataset_wall_seconds_median"]
        bars = {
            "one dataset": one,
            "two at once\n(this change)": s["two_datasets_wall_seconds_median"],
            "two, one after the other\n(main of 2026-12-05)": 2 * one,
        }
        ax.bar(list(bars), list(bars.values()), color=["#888", "#2a7", "#c55"])
        ax.axhline(TARGET_RATIO * one, color="#333", linestyle="--", linewidth=1)
        ax.text(-0.4, TARGET_RATIO * one, f"target {TARGET_RATIO}x", va="bottom", fontsize=9)
        floor = s.get("ratio_floor_from_machine_cpu")
        if floor:  # what two cores allow for two such runs (module docstring)
            ax.axhline(floor * one, color="#36c", linestyle=":", linewidth=1.2)
            ax.text(2.4, floor * one, f"floor {floor:.2f}x (2 cores)", va="bottom", ha="right", fontsize=9)
        ax.set_ylabel("wall seconds (median)")
        ax.set_title("triggered in Airflow (LocalExecutor)" if mode == "airflow" else "dpngram run (CLI)")
        for i, v in enumerate(bars.values()):
            ax.text(i, v, f"{v:.0f} s ({v / one:.2f}x)", ha="center", va="bottom", fontsize=9)
    users = payload["parameters"]["users"]
    fig.suptitle(f"Two datasets of {users:,} users each, default release (every stage), 2 cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--mode", choices=["airflow", "cli", "both"], default="both")
    parser.add_argument("--refresh", action="store_true", help="recompute summaries and plot; no run")
    parser.add_argument(
        "--pair-threads",
        type=int,
        default=None,
        metavar="N",
        help="cli mode: the two datasets' runs each get --threads N (the single run keeps the default: "
        "one thread per core), i.e. the cores split between the runs instead of shared; "
        "writes results/parallel_datasets_pair_threadsN.json",
    )
    args = parser.parse_args()
    if args.pair_threads and args.mode != "cli":
        parser.error("--pair-threads measures the cli mode only: add --mode cli")
    if args.refresh:
        refresh()
        return
    corpora = {DATASETS[0]: corpus(args.users, SEED), DATASETS[1]: corpus(args.users, SEED + 1)}
    corpora[DATASETS[1]]["public"] = corpora[DATASETS[0]]["public"]  # one public corpus
    work = DATA / "parallel_work"
    ledger = DATA / "parallel_ledger.duckdb"
    ledger.unlink(missing_ok=True)
    shapes = ([(DATASETS[0], corpora[DATASETS[0]])], list(corpora.items()))
    rows: dict[str, list[dict[str, Any]]] = {"airflow": [], "cli": []}
    background: dict[str, float] = {}
    modes = ["airflow", "cli"] if args.mode == "both" else [args.mode]
    for mode in modes:
        airflow = _airflow(DATA / "parallel_airflow", ledger) if mode == "airflow" else None
        try:
            background[mode] = background_cores()
            print(f"{mode}: the machine's background use is {background[mode]:.2f} cores", flush=True)
            warm = [("warm-up", corpora[DATASETS[0]])]  # unmeasured: fills the public-model cache
            print(f"{mode} warm-up ...", flush=True)
            if airflow is not None:
                trigger_together(airflow, warm, work / "out")
            else:
                run_together(warm, work, ledger, keep_cache=True)
            for repeat in range(args.repeats):
                for jobs in shapes:
                    print(f"{mode} repeat {repeat + 1}: {' + '.join(ds for ds, _ in jobs)} ...", flush=True)
                    if airflow is not None:
                        row = trigger_together(airflow, jobs, work / "out")
                    else:
                        threads = args.pair_threads if len(jobs) > 1 else None
                        row = {"mode": "cli", **run_together(jobs, work, ledger, True, threads)}
                        row["threads_each"] = threads
                    row["repeat"] = repeat + 1
                    print(f"  {row['wall_seconds']} s {row.get('cpu_seconds_each', '')}", flush=True)
                    rows[mode].append(row)
                    shutil.rmtree(DATA / "parallel_airflow" / "wh" / "runs", ignore_errors=True)
        finally:
            if airflow is not None:
                airflow.stop()
    payload = {
        "benchmark": "parallel_datasets",
        "date": now(),
        "machine": machine(),
        "git_commit": git_commit(),
        "parameters": {
            "users": args.users,
            "repeats": args.repeats,
            "run": "the default release (every stage and the model; eps 4, delta 1e-7, T 5), "
            f"--memory-limit {MEMORY_LIMIT} each",
            "airflow": "dpngram_release triggered through the REST API; LocalExecutor, parallelism 4, "
            "SQLite metadata (tests/test_airflow_standalone.Airflow)",
            "cli": "dpngram run, one process per dataset"
            + (
                f"; the two datasets' runs with --threads {args.pair_threads} each, the single run "
                "with the default (one thread per core)"
                if args.pair_threads
                else ""
            ),
            "corpus": f"write_sample(n_users, seed={SEED} and {SEED + 1}, vocab_size={VOCAB}, "
            f"public_sentences={PUBLIC_SENTENCES})",
            "ledger": "one embedded DuckDB ledger for both runs",
        },
        "target_ratio": TARGET_RATIO,
        "background_cores": background,
        "summary": {},
        "rows": rows,
    }
    payload["summary"] = summaries(rows, background)
    if args.pair_threads:  # an experiment beside the committed figure, not a replacement of it
        write_result(f"parallel_datasets_pair_threads{args.pair_threads}.json", payload)
    else:
        write_result("parallel_datasets.json", payload)
        plot(payload, RESULTS / "parallel_datasets.png")
    print(json.dumps(payload["summary"], indent=2))
    failed = [mode for mode, summary in payload["summary"].items() if "error" in summary]
    if failed:  # the rows keep the errors; `make bench` must see the step fail
        sys.exit(f"parallel_datasets_bench: a run failed in mode {', '.join(failed)} (see the rows)")


def summaries(
    rows: dict[str, list[dict[str, Any]]], background: dict[str, float] | None = None
) -> dict[str, Any]:
    """Each mode's summary, its floor from the machine's busy CPU given its ``background`` cores.
    (Until 2026-12-07 the Airflow summary borrowed the CLI's CPU seconds for a floor that left out
    Airflow's own processes: 1.18-1.34 where the machine's CPU gives 1.38.)"""
    background = background or {}
    modes = [mode for mode in ("airflow", "cli") if rows.get(mode)]
    return {mode: summarise(rows[mode], background.get(mode)) for mode in modes}


def refresh() -> None:
    """Recompute the summaries and the plot of the committed JSON (no run)."""
    path = RESULTS / "parallel_datasets.json"
    payload = json.loads(path.read_text(encoding="utf-8"))
    payload["summary"] = summaries(payload["rows"], payload.get("background_cores"))
    write_result("parallel_datasets.json", payload)
    plot(payload, RESULTS / "parallel_datasets.png")
    print(json.dumps(payload["summary"], indent=2))


if __name__ == "__main__":
    main()
