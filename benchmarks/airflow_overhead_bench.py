"""Orchestration overhead of one demo release run in a real Airflow 3 (api-server, scheduler,
dag-processor as separate processes, LocalExecutor, parallelism 2, SQLite), triggered through the
REST API exactly as the trigger form does, with the demo's corpus and parameters.

Measured per run:

* ``wall_seconds``: the DAG run's end_date - start_date (what a user waits for);
* ``work_seconds``: the sum of the steps' own timings in the published release
  (``report.timings/*.json``: ingest, vocabulary, levels, lm_counts, bayes, synth, validation, lm,
  report);
* ``overhead_fraction`` = 1 - work / wall: scheduling, task start-up (process fork, imports,
  DAG parsing) and skipped tasks;
* tasks that ran, tasks skipped, and the sum of task durations.

The Airflow launcher is the one of tests/test_airflow_standalone.py (same settings as the test).

    .venv/bin/python benchmarks/airflow_overhead_bench.py --label after [--users 10000] [--runs 1]

Results are merged into ``benchmarks/results/airflow_overhead.json`` under the label (machine, date,
git commit, parameters, per-run numbers), so a "before" and an "after" measurement sit side by side.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
RESULTS = ROOT / "benchmarks" / "results" / "airflow_overhead.json"

DEMO_SPLIT = {"dpne": 0.4, "lm_counts": 0.3, "bayes": 0.15, "synth": 0.15}


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    parse = dt.datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()


def _commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return proc.stdout.strip() or "unknown"


def measure(users: int, runs: int, base: Path) -> list[dict[str, Any]]:
    from test_airflow_standalone import DAG_ID, Airflow  # the tests' launcher

    from dpngram.text.sample import write_sample

    sample = write_sample(base / "sample", n_users=users, seed=20260101)
    airflow = Airflow(base / "airflow")
    results = []
    try:
        airflow.start()
        airflow.login()
        airflow.unpause(DAG_ID)
        for i in range(runs):
            conf = {
                "dataset": f"bench{i}",
                "input": str(sample["users"]),
                "public": str(sample["public"]),
                "out": str(base / "out"),
                "warehouse": str(base / "warehouse.duckdb"),
                "stage_budget": DEMO_SPLIT,
            }
            status, run = airflow.trigger(conf)
            assert status == 200, (status, run)
            state = airflow.wait_for_run(DAG_ID, run["dag_run_id"])
            assert state == "success", airflow.tails()
            _, body = airflow.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}")
            tasks = airflow.task_states(DAG_ID, run["dag_run_id"])
            wall = _seconds(body["start_date"], body["end_date"])
            release = (base / "out" / conf["dataset"] / "latest").resolve()
            # every step's own timing, the report's included (report.json's timings_seconds is
            # written before the report step's own timing is known)
            timings = {
                path.stem: json.loads(path.read_text())["seconds"]
                for path in (release / "report.timings").glob("*.json")
            }
            work = sum(timings.values())
            ran = {t: ti for t, ti in tasks.items() if ti["state"] == "success"}
            results.append(
                {
                    "wall_seconds": round(wall, 2),
                    "work_seconds": round(work, 2),
                    "overhead_fraction": round(1 - work / wall, 3),
                    "tasks": len(tasks),
                    "tasks_ran": len(ran),
                    "tasks_skipped": sum(ti["state"] == "skipped" for ti in tasks.values()),
                    "task_seconds": round(sum(ti.get("duration") or 0 for ti in ran.values()), 2),
                    "stage_seconds": dict(sorted(timings.items())),
                    "published_model": (release / "model" / "model.binary").is_file(),
                }
            )
            print(json.dumps(results[-1]), flush=True)
    finally:
        airflow.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="after", help="key in the results file (e.g. before, after)")
    parser.add_argument("--users", type=int, default=10_000, help="users in the corpus (demo: 10000)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpngram-airflow-bench-") as tmp:
        runs = measure(args.users, args.runs, Path(tmp))
    existing = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    existing[args.label] = {
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "parameters": {"users": args.users, "runs": args.runs, "stage_budget": DEMO_SPLIT, "parallelism": 2},
        "note": args.note,
        "runs": runs,
        "overhead_fraction_mean": round(sum(r["overhead_fraction"] for r in runs) / len(runs), 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(existing, indent=2) + "\n")
    print(f"wrote {RESULTS} [{args.label}]: overhead {existing[args.label]['overhead_fraction_mean']:.1%}")


if __name__ == "__main__":
    main()
