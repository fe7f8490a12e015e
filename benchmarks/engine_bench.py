"""DuckDB vs Spark (local mode) on the heavy stages: wall time and peak memory per stage.

Each (engine, users) cell runs in its own process (``--worker``) over a corpus from the project's
generator (:func:`dpngram.text.sample.write_sample`): ingest, the DPSU vocabulary (dpne.k1), the
DPNE levels k = 2..T and (unless ``--no-bayes-synth``) the Bayesian trigram stage and the Chen et
al. synthetic stage, through the same stage functions the CLI and the DAG call. Peak memory is
the largest resident set of the worker's whole process tree (the Python driver plus, for Spark,
the JVM and its Python workers), sampled every 50 ms during each stage.

    .venv/bin/python benchmarks/engine_bench.py --users 100000 1000000 --engines duckdb spark

Prints a table and writes ``benchmarks/results/engine_<date>.json`` (machine, date, parameters,
per-stage seconds and peak MiB).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from dpngram.stages import bayes as bayes_stage
from dpngram.stages import dpne as dpne_stage
from dpngram.stages import synth as synth_stage
from dpngram.stages import vocabulary as vocabulary_stage

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import git_commit, machine, now  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


class PeakMemory:
    """Peak RSS (MiB) of this process and all its descendants, sampled in a thread."""

    def __init__(self, interval: float = 0.05) -> None:
        import psutil

        self.proc = psutil.Process()
        self.interval = interval
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> float:
        total = 0
        for p in [self.proc, *self.proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except Exception:  # noqa: BLE001 - a process ended between listing and reading
                pass
        return total / 2**20

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            time.sleep(self.interval)

    def __enter__(self) -> PeakMemory:
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def worker(args: argparse.Namespace) -> dict[str, Any]:
    from dpngram.config import RunConfig
    from dpngram.release.context import RunContext
    from dpngram.release.publish import prepare
    from dpngram.stages.ingest import run_ingest

    work = Path(args.workdir)
    config = RunConfig.build(
        input=args.input,
        out=str(work / "out"),
        warehouse=str(work / "wh"),
        engine=args.engine,
        spark_master=args.spark_master,
        max_n=args.max_n,
        epsilon=args.epsilon,
        delta=args.delta,
        memory_limit=args.memory_limit,
        dataset=f"bench{args.engine}",
        spark_conf=args.spark_conf,
        public=args.public or None,
        stage_budget={"dpne": 0.6, "bayes": 0.2, "synth": 0.2} if args.public else {"dpne": 1.0},
    )
    stages: dict[str, dict[str, float]] = {}
    session = None
    started = time.perf_counter()
    if args.engine == "spark":  # one session for the whole run (the CLI's behaviour); its start-up is a stage
        with PeakMemory() as mem:
            t0 = time.perf_counter()
            from dpngram.engines import select as engine_module
            from dpngram.engines.spark import spark_session

            session = spark_session(args.spark_master, config.engine.spark_settings())
            open_engine = engine_module.open_engine
            engine_module.open_engine = lambda cfg, spark=None: open_engine(cfg, spark=session)
        stages["spark_start"] = {"seconds": time.perf_counter() - t0, "peak_mib": mem.peak}
    config = prepare(config)
    ctx = RunContext(config)
    plan = [("ingest", lambda: run_ingest(ctx)), ("dpne.k1", lambda: vocabulary_stage.run_vocabulary(ctx))]
    plan += [(f"dpne.k{k}", lambda k=k: dpne_stage.run_level(ctx, k)) for k in range(2, args.max_n + 1)]
    if args.public:
        plan += [("bayes", lambda: bayes_stage.run_bayes(ctx)), ("synth", lambda: synth_stage.run_synth(ctx))]
    released: dict[str, int] = {}
    for name, run in plan:
        with PeakMemory() as mem:
            t0 = time.perf_counter()
            result = run()
        stages[name] = {"seconds": time.perf_counter() - t0, "peak_mib": mem.peak}
        released[name] = int(result.get("released_rows", 0)) if isinstance(result, dict) else 0
    if session is not None:
        session.stop()
    return {
        "engine": args.engine,
        "users": args.users,
        "stages": stages,
        "released": released,
        "total_seconds": time.perf_counter() - started,
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--engines", nargs="+", default=["duckdb", "spark"], choices=["duckdb", "spark"])
    parser.add_argument("--max-n", type=int, default=4)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--delta", type=float, default=1e-8)
    parser.add_argument("--memory-limit", default="8GB")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--spark-conf", default="spark.driver.memory=8g")
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per cell")
    parser.add_argument("--out", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument(
        "--no-bayes-synth", action="store_true", help="only ingest and the DPNE stages (no public corpus)"
    )
    parser.add_argument("--public-sentences", type=int, default=20_000)
    parser.add_argument("--public", default="", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    return parser.parse_args()


def run_cell(
    args: argparse.Namespace, engine: str, users: int, corpus: Path, public: str, work: Path
) -> dict[str, Any]:
    """One (engine, users) cell in its own worker process: its result, or its error."""
    cmd = [
        sys.executable, __file__, "--worker", "--engine", engine, "--users", str(users),
        "--input", str(corpus), "--workdir", str(work), "--max-n", str(args.max_n),
        "--epsilon", str(args.epsilon), "--delta", str(args.delta),
        "--memory-limit", args.memory_limit, "--spark-master", args.spark_master,
        "--spark-conf", args.spark_conf, "--public", public,
    ]  # fmt: skip
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
        print(f"{engine:7s} {users:>9,d}  timeout", flush=True)
        return {"engine": engine, "users": users, "error": f"timeout after {args.timeout:.0f}s"}
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        print(f"{engine:7s} {users:>9,d}  failed: {err}", flush=True)
        return {"engine": engine, "users": users, "error": err}
    cell = json.loads(line.removeprefix("RESULT "))
    cell["process_seconds"] = time.perf_counter() - t0
    stage_text = "  ".join(
        f"{k}={v['seconds']:.1f}s/{v['peak_mib']:.0f}MiB" for k, v in cell["stages"].items()
    )
    print(f"{engine:7s} {users:>9,d}  total {cell['total_seconds']:.1f}s  {stage_text}", flush=True)
    return cell


def run_cells(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (users, engine) cell, on one generated corpus per user count."""
    from dpngram.text.sample import write_sample

    base = Path(tempfile.mkdtemp(prefix="engine-bench-"))
    cells: list[dict[str, Any]] = []
    try:
        for users in args.users:
            public_sentences = 10 if args.no_bayes_synth else args.public_sentences
            corpus = write_sample(
                base / f"corpus{users}", n_users=users, seed=args.seed, public_sentences=public_sentences
            )
            public = "" if args.no_bayes_synth else str(corpus["public"])
            for engine in args.engines:
                work = base / f"{engine}{users}"
                work.mkdir()
                cell = run_cell(args, engine, users, corpus["users"], public, work)
                cells.append(cell)
                if "error" not in cell and not args.keep:
                    shutil.rmtree(work, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return cells


def print_table(cells: list[dict[str, Any]]) -> None:
    print()
    stage_names: list[str] = []
    for cell in cells:
        for name in cell.get("stages", {}):
            if name not in stage_names:
                stage_names.append(name)
    stage_names.sort(key=lambda name: name != "spark_start")  # the session start-up first
    header = f"{'engine':7s} {'users':>9s} " + " ".join(f"{n:>16s}" for n in stage_names) + f" {'total':>8s}"
    print(header)
    print("-" * len(header))
    for cell in cells:
        if "stages" not in cell:
            print(f"{cell['engine']:7s} {cell['users']:>9,d} {cell['error']}")
            continue
        row = []
        for n in stage_names:
            v = cell["stages"].get(n)
            row.append(f"{v['seconds']:7.1f}s {v['peak_mib']:6.0f}M" if v else f"{'-':>16s}")
        print(
            f"{cell['engine']:7s} {cell['users']:>9,d} " + " ".join(row) + f" {cell['total_seconds']:7.1f}s"
        )


def save_results(args: argparse.Namespace, cells: list[dict[str, Any]]) -> None:
    """``--out`` or benchmarks/results/engine_<date>.json."""
    from dpngram.text.sample import GENERATOR_VERSION

    payload = {
        "benchmark": "engine_bench",
        "date": now(),
        "git_commit": git_commit(),
        "machine": machine(),
        "parameters": {
            "users": args.users,
            "engines": args.engines,
            "max_n": args.max_n,
            "epsilon": args.epsilon,
            "delta": args.delta,
            "duckdb_memory_limit": args.memory_limit,
            "spark_master": args.spark_master,
            "spark_conf": args.spark_conf,
            "corpus": "dpngram.text.sample.write_sample",
            "generator_version": GENERATOR_VERSION,
            "seed": args.seed,
            "stages_bayes_synth": not args.no_bayes_synth,
            "public_sentences": 10 if args.no_bayes_synth else args.public_sentences,
            "stage_budget": "dpne 1.0" if args.no_bayes_synth else "dpne 0.6, bayes 0.2, synth 0.2",
        },
        "units": {
            "seconds": "wall clock per stage",
            "peak_mib": "peak RSS of the process tree during the stage",
        },
        "cells": cells,
    }
    out = Path(args.out) if args.out else RESULTS / f"engine_{dt.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {out}")


def main() -> None:
    args = parse_args()
    if args.worker:
        args.users = args.users[0]
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return
    cells = run_cells(args)
    print_table(cells)
    save_results(args, cells)
    failed = [f"{c['engine']} at {c['users']:,} users" for c in cells if "error" in c]
    if failed:  # the table and the JSON keep the errors; `make bench` must see the step fail
        sys.exit(f"engine_bench: {len(failed)} cell(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
