"""Spark on a standalone cluster at growing user counts: does the driver's memory stay flat?

A Spark standalone master and two workers (1 core each) are started on 127.0.0.1 from the
scripts inside the pyspark wheel (``bin/spark-class``, as ``tests/test_spark_cluster.py`` does),
so the executors are separate JVMs with their own Python workers and the driver is the ``dpngram``
CLI process. For each user count one whole release runs through the CLI::

    dpngram run --engine spark --spark-master spark://127.0.0.1:PORT --max-n 5 \
        --stage-budget dpne=1 --epsilon 4 --delta 1e-7 --dpsu-policy POLICY ...

on ``dpngram.text.sample.write_sample(dir, n_users=N, seed=20261124, vocab_size=50_000)``
(cached under ``benchmarks/.data/scale/u{N}_v50000/``, shared with ``scale_bench.py``).

Measured, by sampling ``/proc`` through psutil every 0.25 s:

* **driver**: the resident set of the CLI process and all its descendants = the Python driver
  plus the driver JVM that PySpark launches (``spark-submit ... pyspark-shell``); the two are also
  recorded separately. Per stage: the peak over the stage's wall-clock window (from the run's
  operator timings).
* **executors**: the descendants of the two Worker JVMs (the executor JVMs
  ``CoarseGrainedExecutorBackend`` and their Python workers), summed over both workers, and the
  largest single executor tree. The master and worker JVMs themselves are not counted.

Per run: seconds per stage (the run's ``operator_report.json``, ``timings_seconds``), end-to-end
seconds of the CLI process, n-grams released per k (the CLI's ``--json`` summary), the peaks
above. Writes ``benchmarks/results/scale_spark.json``.

    .venv/bin/python benchmarks/spark_scale_bench.py [--users 100000 300000 1000000]

The DPSU policy is ``--policy`` (default ``dp-sips``, the default on every engine: rounds of the
per-item histogram; ``weighted`` is one round, measured before DP-SIPS was the default, in
``results/scale_spark_weighted.json``; ``policy-gaussian`` streams one row per user through the
driver, docs/engines.md "What crosses to the driver").
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PeriodicSampler, now, tree_rss  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT / "benchmarks" / ".data" / "scale"
SEED = 20261124
VOCAB = 50_000
START_TIMEOUT = 180.0


# ----------------------------------------------------------------------------------------------
# Corpus
# ----------------------------------------------------------------------------------------------
def _gzip_complete(path: Path) -> bool:
    """True if ``path`` is a whole gzip stream (a file still being written is not)."""
    try:
        with gzip.open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass
        return True
    except (OSError, EOFError):
        return False


def corpus(users: int) -> Path:
    name = f"u{users}_v{VOCAB}"
    path = DATA / name / "users.jsonl.gz"
    # a corpus of this script (.complete) or of scale_bench.py (same recipe), read to its end
    if path.is_file() and ((DATA / name / ".complete").is_file() or _gzip_complete(path)):
        return path
    from dpngram.text.sample import write_sample

    out = DATA / name
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    paths = write_sample(out, n_users=users, seed=SEED, vocab_size=VOCAB, public_sentences=100)
    (out / ".complete").write_text(f"{time.perf_counter() - t0:.1f} s\n")
    return paths["users"]


# ----------------------------------------------------------------------------------------------
# The standalone cluster (as tests/test_spark_cluster.py starts it)
# ----------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(what: str, condition: Any, logs: list[Path], timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-2000:]}" for p in logs if p.exists())
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")
        time.sleep(0.5)


class Cluster:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each) on loopback."""

    def __init__(self, base: Path, workers: int, cores: int, memory: str) -> None:
        import pyspark

        self.base = base
        home = Path(pyspark.__file__).resolve().parent
        self.spark_class = str(home / "bin" / "spark-class")
        self.env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_LOCAL_DIRS": str(base / "local"),  # executors' shuffle/spill scratch space
        }
        self.port = _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.procs: list[subprocess.Popen] = []
        self.worker_procs: list[subprocess.Popen] = []

    def _start(self, cmd: list[str], log: Path) -> subprocess.Popen:
        with log.open("w") as fh:
            proc = subprocess.Popen(
                cmd, env=self.env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.base
            )
        self.procs.append(proc)
        return proc

    def __enter__(self) -> Cluster:
        self.base.mkdir(parents=True, exist_ok=True)
        master_log = self.base / "master.log"
        try:
            self._start(
                [self.spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
                + ["--port", str(self.port), "--webui-port", str(_free_port())],
                master_log,
            )
            _wait_for("the master", lambda: "Starting Spark master" in master_log.read_text(), [master_log])
            logs = [master_log]
            for i in range(self.n_workers):
                log = self.base / f"worker{i}.log"
                logs.append(log)
                self.worker_procs.append(
                    self._start(
                        [self.spark_class, "org.apache.spark.deploy.worker.Worker", self.url]
                        + ["--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory]
                        + ["--webui-port", str(_free_port()), "--work-dir", str(self.base / f"work{i}")],
                        log,
                    )
                )
            _wait_for(
                f"{self.n_workers} workers to register",
                lambda: master_log.read_text().count("Registering worker") >= self.n_workers,
                logs,
            )
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


# ----------------------------------------------------------------------------------------------
# Memory sampling
# ----------------------------------------------------------------------------------------------
class Sampler(PeriodicSampler):
    """Every ``interval`` s: RSS (MiB) of the driver tree (Python + its JVM, also apart) and of the
    workers' descendants (executor JVMs + their Python workers), with a monotonic time stamp."""

    def __init__(self, driver_pid: int, worker_pids: list[int], interval: float = 0.25) -> None:
        import psutil

        super().__init__(interval)
        self.psutil = psutil
        self.driver = psutil.Process(driver_pid)
        self.workers = [psutil.Process(p) for p in worker_pids]
        self.samples: list[dict[str, float]] = []

    @staticmethod
    def _rss(proc: Any) -> int:
        try:
            return proc.memory_info().rss
        except Exception:  # noqa: BLE001 - ended between listing and reading
            return 0

    def _tree(self, root: Any) -> list[Any]:
        try:
            return [root, *root.children(recursive=True)]
        except Exception:  # noqa: BLE001
            return []

    def sample(self) -> dict[str, float]:
        mib = 2**20
        py = self._rss(self.driver)
        jvm = 0
        other = 0
        for child in self._tree(self.driver)[1:]:
            try:
                is_java = "java" in child.name()
            except Exception:  # noqa: BLE001
                continue
            if is_java:
                jvm += self._rss(child)
            else:
                other += self._rss(child)
        executors = []
        for worker in self.workers:
            # Worker JVM (the launcher script execs it: the Popen pid is the JVM) -> executor
            # JVM(s) -> pyspark daemon -> Python workers
            executors.append(tree_rss(worker) - self._rss(worker))
        return {
            "t": time.time(),
            "driver": (py + jvm + other) / mib,
            "driver_python": py / mib,
            "driver_jvm": jvm / mib,
            "executors": sum(executors) / mib,
            "executor_max": max(executors, default=0) / mib,
        }

    def tick(self) -> None:
        self.samples.append(self.sample())

    def peak(self, key: str, start: float | None = None, end: float | None = None) -> float | None:
        values = [
            s[key]
            for s in self.samples
            if (start is None or s["t"] >= start) and (end is None or s["t"] <= end)
        ]
        return round(max(values), 1) if values else None  # a stage shorter than the interval


# ----------------------------------------------------------------------------------------------
# One run
# ----------------------------------------------------------------------------------------------
def _stage_windows(operator_dir: Path) -> dict[str, tuple[float, float]]:
    """(start, end) wall-clock times of each stage from the run's timing files (end = the file's
    modification time, start = end - the recorded seconds)."""
    windows = {}
    for path in sorted((operator_dir / "timings").glob("*.json"), key=lambda p: p.stat().st_mtime):
        seconds = float(json.loads(path.read_text())["seconds"])
        end = path.stat().st_mtime
        windows[path.stem] = (end - seconds, end)
    return windows


def run_one(args: argparse.Namespace, cluster: Cluster, users: int, work: Path) -> dict[str, Any]:
    corpus_path = corpus(users)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spark_conf = ",".join(
        [
            f"spark.pyspark.python={sys.executable}",
            f"spark.driver.memory={args.driver_memory}",
            f"spark.executor.memory={args.executor_memory}",
            "spark.executor.cores=1",
            f"spark.cores.max={args.workers}",
            f"spark.sql.shuffle.partitions={args.shuffle_partitions}",
            f"spark.local.dir={work / 'spark-local'}",
            "spark.ui.enabled=false",
            "spark.driver.host=127.0.0.1",
            "spark.driver.bindAddress=127.0.0.1",
        ]
    )
    cmd = [
        str(Path(sys.executable).with_name("dpngram")), "run",
        "--engine", "spark", "--spark-master", cluster.url, "--spark-conf", spark_conf,
        "--spark-warehouse", str(work / "tables"),
        "--max-n", str(args.max_n), "--stage-budget", "dpne=1",
        "--epsilon", str(args.epsilon), "--delta", str(args.delta),
        "--dpsu-policy", args.policy,
        "--input", str(corpus_path), "--out", str(work / "out"),
        "--warehouse", str(work / "wh"), "--run-id", f"scale-u{users}",
        # a ledger of its own, removed with the work directory: the user's ledger keeps the run
        # ids of earlier invocations, and refuses this one when the cluster's port changed
        "--ledger", str(work / "ledger.duckdb"),
        "--dataset", f"scale{users}", "--json", "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    log = work / "driver.log"
    print(f"[{dt.datetime.now(dt.UTC):%H:%M:%S}] {users:,d} users: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=work, env=env)
        with Sampler(proc.pid, [p.pid for p in cluster.worker_procs]) as sampler:
            try:
                stdout, _ = proc.communicate(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                return {"users": users, "error": f"timeout after {args.timeout:.0f} s"}
    seconds = time.perf_counter() - t0
    row: dict[str, Any] = {
        "users": users,
        "corpus": str(corpus_path),
        "returncode": proc.returncode,
        "memory": {  # per row: a rerun at one user count may use other settings
            "worker_memory": args.worker_memory,
            "spark.executor.memory": args.executor_memory,
            "spark.driver.memory": args.driver_memory,
        },
    }
    if proc.returncode != 0:
        row["error"] = (log.read_text(errors="replace").strip().splitlines() or ["no output"])[-1][:500]
        return row
    summary = json.loads(stdout[stdout.index("{") :])
    operator = next((work / "out").rglob("operator_report.json"), None)
    if operator is None:  # the operator directory is in the warehouse directory
        operator = next(work.rglob("operator_report.json"))
    timings = json.loads(operator.read_text())["timings_seconds"]
    windows = _stage_windows(operator.parent)
    stages = {}
    for name, secs in timings.items():
        start, end = windows.get(name, (None, None))
        stages[name] = {
            "seconds": secs,
            "driver_peak_mib": sampler.peak("driver", start, end),
            "executors_peak_mib": sampler.peak("executors", start, end),
        }
    row.update(
        {
            "end_to_end_seconds": round(seconds, 1),
            "stages": stages,
            "driver_peak_mib": sampler.peak("driver"),
            "driver_python_peak_mib": sampler.peak("driver_python"),
            "driver_jvm_peak_mib": sampler.peak("driver_jvm"),
            "executors_peak_mib": sampler.peak("executors"),
            "executor_max_peak_mib": sampler.peak("executor_max"),
            "released": _released(summary),
            "dpsu_policy": summary.get("dpne_policy"),
            "samples": len(sampler.samples),
        }
    )
    row["ngrams_released"] = sum(v for k, v in row["released"].items() if k != "1")
    return row


def _released(summary: dict[str, Any]) -> dict[str, int]:
    """Released set sizes per k (|S_1| the vocabulary, |S_k| the k-grams): the CLI's JSON summary."""
    return {str(k): int(v) for k, v in summary.get("ngrams_per_k", {}).items()}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--policy", default="dp-sips", help="--dpsu-policy of the runs")
    parser.add_argument("--max-n", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--delta", type=float, default=1e-7)
    parser.add_argument("--workers", type=int, default=2)
    # 1M users from one gzip file: ingest reads it as one partition (1.7 GB of Arrow batches,
    # cached), which a 3g executor cannot hold (OutOfMemoryError, measured); 6g can
    parser.add_argument("--worker-memory", default="7g")
    parser.add_argument("--executor-memory", default="6g")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=5400, help="seconds per run")
    parser.add_argument("--workdir", default=str(ROOT / "benchmarks" / ".data" / "scale_work"))
    parser.add_argument("--out", default=str(RESULTS / "scale_spark.json"))
    parser.add_argument("--keep", action="store_true", help="keep each run's work directory")
    return parser.parse_args()


def head_commit() -> str:
    """HEAD of the repository ('' when git cannot tell)."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()


def measure(
    args: argparse.Namespace, cluster: Cluster, users: int, work: Path, commit: str
) -> dict[str, Any]:
    """One run at ``users`` users (:func:`run_one`), with the load around it, the date and the
    commit; prints its line."""
    corpus(users)  # generation is not part of a run's time
    load = [round(x, 2) for x in os.getloadavg()]
    row = run_one(args, cluster, users, work / f"u{users}")
    row["load_average_before"] = load
    row["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    row["date"] = now()
    row["git_commit"] = commit
    row["cpu_model"] = machine_cpu_model()  # carried into scale.json's Spark rows (spark_row)
    if "error" in row:
        print(f"{users:>9,d}  failed: {row['error']}", flush=True)
    else:
        print(
            f"{users:>9,d}  {row['end_to_end_seconds']:7.1f} s  driver peak "
            f"{row['driver_peak_mib']:6.0f} MiB (python {row['driver_python_peak_mib']:.0f}, "
            f"JVM {row['driver_jvm_peak_mib']:.0f})  executors {row['executors_peak_mib']:6.0f} MiB  "
            f"n-grams {row['ngrams_released']:,d}  "
            + "  ".join(f"{k}={v['seconds']:.0f}s" for k, v in row["stages"].items()),
            flush=True,
        )
    return row


def machine_cpu_model() -> str | None:
    """The host's CPU model as ``_common.machine`` names it."""
    from _common import machine

    return machine().get("cpu_model")


def results_payload(
    args: argparse.Namespace, rows: list[dict[str, Any]], commit: str, load_before: tuple[float, ...]
) -> dict[str, Any]:
    """The JSON written after every run: the rows so far and what they were measured with."""
    from _common import machine

    return {
        "benchmark": "spark_scale_bench",
        "date": now(),
        "git_commit": commit,
        # the CPU model too (_common.machine): the rows of 2026-11-26 lacked it
        "machine": {
            **machine(),
            "shared": "the two 1-core workers and the driver share the host's 2 cores; each row's "
            "load averages show whether anything else ran",
        },
        "load_average_before": [round(x, 2) for x in load_before],
        "parameters": {
            "engine": "spark",
            "cluster": f"standalone on 127.0.0.1: master + {args.workers} workers x 1 core "
            "(bin/spark-class from the pyspark wheel); memory settings per row",
            "dpsu_policy": args.policy,
            "max_n": args.max_n,
            "stage_budget": "dpne=1",
            "epsilon": args.epsilon,
            "delta": args.delta,
            "spark_conf": {
                "spark.executor.cores": 1,
                "spark.cores.max": args.workers,
                "spark.sql.shuffle.partitions": args.shuffle_partitions,
            },
            "corpus": f"write_sample(n_users=N, seed={SEED}, vocab_size={VOCAB})",
        },
        "measured": {
            "driver_peak_mib": "largest summed RSS of the dpngram CLI process and all its "
            "descendants (the Python driver + the driver JVM it launches), sampled every "
            "0.25 s from /proc (psutil); driver_python / driver_jvm: the same, apart",
            "executors_peak_mib": "largest summed RSS of both workers' descendants (executor "
            "JVMs + their Python workers; the master and worker JVMs not counted)",
            "executor_max_peak_mib": "largest RSS of one worker's descendants",
            "stages": "seconds from the run's operator_report.json; per-stage peaks over "
            "the stage's wall-clock window",
            "end_to_end_seconds": "wall time of the CLI process (session start-up included)",
            "ngrams_released": "sum of |S_k| for k = 2..max_n (|S_1| under released['1'])",
        },
        "rows": rows,
    }


def main() -> None:
    args = parse_args()
    from dpngram.engines.spark import java_available

    if not java_available():
        print("skip: Spark needs a Java runtime (none on PATH/JAVA_HOME)")
        return
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.is_file() else {}
    rows = [r for r in previous.get("rows", []) if r.get("users") not in args.users]
    commit = head_commit()
    work = Path(args.workdir)
    load_before = os.getloadavg()
    with Cluster(work / "cluster", args.workers, 1, args.worker_memory) as cluster:
        for users in args.users:
            rows.append(measure(args, cluster, users, work, commit))
            rows.sort(key=lambda r: r["users"])
            RESULTS.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results_payload(args, rows, commit, load_before), indent=2) + "\n")
            if not args.keep:
                shutil.rmtree(work / f"u{users}", ignore_errors=True)
    print(f"wrote {out}")
    failed = [r["users"] for r in rows if r.get("users") in args.users and "error" in r]
    if failed:  # make bench must not count a step with a failed run as passed
        raise SystemExit(f"spark_scale_bench: the runs at {failed} users failed (their lines above)")


if __name__ == "__main__":
    main()
