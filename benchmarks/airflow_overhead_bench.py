"""Orchestration overhead of one demo release run in a real Airflow 3 (api-server, scheduler,
dag-processor as separate processes), triggered through the REST API exactly as the trigger form
does, with the demo's corpus and parameters. ``--db postgres`` (the default) runs the production
platform of docker/compose.yaml as tests/test_platform.py does (PostgreSQL, Redis, an S3 server,
the CeleryExecutor with two workers that share no disk, releases and the run store on S3);
``--db sqlite`` the tests' SQLite set-up (LocalExecutor, parallelism 2).

Measured per run:

* ``wall_seconds``: the DAG run's end_date - start_date (what a user waits for);
* ``work_seconds``: the sum of the steps' own timings, operator-only files beside the warehouse
  (``WAREHOUSE_DIR/operator/RUN_ID/timings/*.json``: ingest, vocabulary, levels, lm_counts, bayes,
  synth, validation, lm, report; on the platform, the publishing worker's copy);
* ``overhead_fraction`` = 1 - work / wall: scheduling, task start-up (process fork, imports,
  DAG parsing) and skipped tasks;
* tasks that ran, tasks skipped, and the sum of task durations;
* the cold start: the first task's (``privacy_precheck``) duration, its wait from being queued to
  starting, and the delay from the run's start to the first task's start. The first run after the
  scheduler starts is the cold one (its executor worker imports Airflow's task runner and the DAG
  for the first time); later runs show the warm numbers;
* the 1-, 5- and 15-minute load averages before and after each run (the machine is shared).

The Airflow launchers are the tests' (tests/test_airflow_standalone.py, tests/test_platform.py).

    .venv/bin/python benchmarks/airflow_overhead_bench.py [--label postgres] [--db postgres] [--runs 2]

Results are merged into ``benchmarks/results/airflow_overhead.json`` under the label (machine, date,
git commit, parameters, per-run numbers), so a "before" and an "after" measurement sit side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dpngram.config import DEFAULT_STAGE_BUDGET

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import git_commit, machine  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "airflow_overhead.json"

#: The demo's split: the default of the code (every stage, so the run builds a language model).
DEMO_SPLIT = dict(DEFAULT_STAGE_BUDGET)


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    parse = dt.datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()


def _work(timings: dict[str, float]) -> float:
    """The steps' own seconds: a sub-timing of a step (``synth.tree`` within ``synth``) is part
    of it and not added again; ``dpne.k2`` (no ``dpne`` timing) is a step of its own."""
    return sum(v for k, v in timings.items() if k.rpartition(".")[0] not in timings)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@contextlib.contextmanager
def _airflow(db: str, base: Path, lake: Path) -> Iterator[tuple[Any, Callable[[str, str], bool]]]:
    """The started Airflow (REST helpers of the tests' launchers) and ``has_model(dataset, run_id)``:
    whether that published release holds a language model."""
    if db == "postgres":  # the production platform (tests/test_platform.py)
        from test_platform import RELEASE_BUCKET, running_platform

        with running_platform(base / "airflow", lake) as platform:
            fs = platform["fs"]

            def on_s3(dataset: str, run_id: str) -> bool:
                manifest = json.loads(
                    fs.cat_file(f"{RELEASE_BUCKET}/releases/{dataset}/runs/{run_id}/MANIFEST.json")
                )
                return "model/model.binary" in manifest["files"]

            yield platform["af"], on_s3
        return
    from test_airflow_standalone import Airflow  # the tests' launcher

    airflow = Airflow(base / "airflow")
    try:
        airflow.start()
        airflow.login()
        yield (
            airflow,
            lambda dataset, run_id: (
                base / "out" / dataset / "runs" / run_id / "model" / "model.binary"
            ).is_file(),
        )
    finally:
        airflow.stop()


def measure(users: int, runs: int, base: Path, db: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from test_airflow_standalone import DAG_ID

    from dpngram.release.context import run_id_from
    from dpngram.text.sample import write_sample

    lake = base / "input"  # on the platform: the input folder both workers read
    sample = write_sample(lake / "sample", n_users=users, seed=20260101)
    results = []
    started = time.monotonic()
    with _airflow(db, base, lake) as (airflow, has_model):
        setup = {
            "parallelism": int(airflow.env["AIRFLOW__CORE__PARALLELISM"]),
            "executor": airflow.env.get("AIRFLOW__CORE__EXECUTOR"),
        }
        airflow.unpause(DAG_ID)
        setup["seconds_to_dag_ready"] = round(time.monotonic() - started, 1)
        for i in range(runs):
            conf = {
                "dataset": f"bench{i}",
                "input": str(sample["users"]),
                "public": str(sample["public"]),
                "stage_budget": DEMO_SPLIT,
            }
            if db != "postgres":  # the platform publishes to compose's OUT (S3), warehouses per worker
                conf.update(out=str(base / "out"), warehouse=str(base / "warehouse"))
            load_before = _load()
            status, run = airflow.trigger(conf)
            assert status == 200, (status, run)
            state = airflow.wait_for_run(DAG_ID, run["dag_run_id"])
            assert state == "success", airflow.tails()
            _, body = airflow.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}")
            tasks = airflow.task_states(DAG_ID, run["dag_run_id"])
            wall = _seconds(body["start_date"], body["end_date"])
            run_id = run_id_from(run["dag_run_id"])
            # every step's own timing: operator-only files beside the warehouse
            # (WAREHOUSE_DIR/operator/RUN_ID/timings/*.json), never in the release; on the platform
            # each worker's warehouse has a copy, the publishing worker's the complete one
            folders = sorted(
                base.glob(f"**/operator/{run_id}/timings"), key=lambda d: len(list(d.glob("*.json")))
            )
            assert folders, f"no stage timings of run {run_id} under {base}"
            timings = {
                path.stem: json.loads(path.read_text())["seconds"] for path in folders[-1].glob("*.json")
            }
            work = _work(timings)
            ran = {t: ti for t, ti in tasks.items() if ti["state"] == "success"}
            first = tasks["privacy_precheck"]
            cold = {
                "first_task_seconds": round(first.get("duration") or 0, 2),
                "first_task_queued_to_start_seconds": _seconds(
                    first.get("queued_when"), first.get("start_date")
                ),
                "run_start_to_first_task_start_seconds": _seconds(
                    body["start_date"], first.get("start_date")
                ),
            }
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
                    "published_model": has_model(conf["dataset"], run_id),
                    **cold,
                    "task_durations": {
                        t: round(ti.get("duration") or 0, 2)
                        for t, ti in sorted(ran.items(), key=lambda kv: kv[1].get("start_date") or "")
                    },
                    "load_average_before": load_before,
                    "load_average_after": _load(),
                }
            )
            print(json.dumps(results[-1]), flush=True)
    return results, setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="postgres", help="key in the results file (e.g. before, after)")
    parser.add_argument("--users", type=int, default=10_000, help="users in the corpus (demo: 10000)")
    parser.add_argument("--runs", type=int, default=2, help="the first is the cold start")
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpngram-airflow-bench-") as tmp:
        runs, setup = measure(args.users, args.runs, Path(tmp), args.db)
    existing = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    existing[args.label] = {
        "machine": machine(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit() or "unknown",
        "parameters": {
            "users": args.users,
            "runs": args.runs,
            "stage_budget": DEMO_SPLIT,
            "db": args.db,
            **setup,
        },
        "note": args.note,
        "runs": runs,
        "overhead_fraction_mean": round(sum(r["overhead_fraction"] for r in runs) / len(runs), 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(existing, indent=2) + "\n")
    print(f"wrote {RESULTS} [{args.label}]: overhead {existing[args.label]['overhead_fraction_mean']:.1%}")


if __name__ == "__main__":
    main()
