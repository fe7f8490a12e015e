"""Scale: the DPNE release (T = 5, stage_budget dpne=1) at 100k .. 3M users on one machine.

Each point is one ``dpngram run`` in its own process, as a user runs it, on a generated corpus
with a realistic vocabulary: :func:`dpngram.text.sample.write_sample` with a **50,000-word** Zipf
vocabulary (the ``dpngram sample`` default has 10,000 words; a larger vocabulary is much harder on
the plans), about 100 tokens a user, seed 20261124 — the recipe is :func:`corpus` below. Recorded
per run: wall seconds, seconds per stage (the operator directory's timings), the peak RSS of the
process tree (sampled every 0.2 s from /proc), the peak size of DuckDB's spill folder
(``WAREHOUSE/runs/RUN_ID.duckdb.tmp``, sampled likewise), the input's size, and the n-grams released per k.

The targets (issue "Scale"), checked on the 1M-user row of the default mechanism:
wall ≤ 120 s with ingest ≤ 40 s; ``--memory-limit 4GB`` holds (peak RSS ≤ limit + 10%); spill
≤ 3× the input's size. ``--full-split`` adds one run at 1M users with the default budget split
(every stage, the language model included; target ≤ 5 min within 4GB).

After each dpne=1 run the machine floor (:mod:`scale_floor`) runs on the same corpus with the
run's released sets, in a fresh process: bare DuckDB SQL that reads and tokenizes the JSONL and
builds the per-user-distinct histograms DPNE needs (``hist_1``; ``hist_K`` over the K-grams whose
prefix and suffix are in the released S_(K-1)), with no DP and no bookkeeping. The row records
``floor`` (seconds per phase, total, peak RSS) and ``floor_ratio``: ingest / read_tokenize,
dpne.kK / hist_K, and the run's wall / the floor's total (issue "speed close to the machine's
floor": the ratio, not the seconds, is the figure that must hold on every machine type), next to
``cpu_model`` and ``git_commit``. ``--no-floor`` skips it.

Spark rows come from ``results/scale_spark.json`` (``benchmarks/spark_scale_bench.py``) when it
exists. The projection to 100M users fits time ∝ users^b to the measured points of each engine
(the exponent b is measured, not assumed) and extrapolates; the per-executor division for a
cluster is an assumption and is labelled as one.

Usage: ``.venv/bin/python benchmarks/scale_bench.py [--users 100000 300000 1000000 3000000]
[--policy default|weighted|...] [--full-split] [--plot-only] [--no-floor]``. Writes ``results/scale.json`` and
``results/scale.png``. Time it on a quiet machine: other jobs on the 2 cores inflate wall times
(the load average is recorded per row). A run or floor that failed is kept as a row with its
error, and the script then exits non-zero naming it (so ``make bench`` records the step failed).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DATA,
    RESULTS,
    ROOT,
    PeriodicSampler,
    baseline_tree,
    git_commit,
    load_average,
    machine,
    now,
    tree_rss,
    write_result,
)
from scale_floor import run_floor  # noqa: E402

SEED = 20261124
VOCAB = 50_000
PUBLIC_SENTENCES = 20_000
MEMORY_LIMIT = "4GB"
TARGETS = {
    "users": 1_000_000,
    "wall_seconds": 120.0,
    "ingest_seconds": 40.0,
    "rss_over_limit": 1.10,
    "spill_over_input": 3.0,
}
FULL_SPLIT_TARGET_SECONDS = 300.0
MAX_N = 5
DPNE_ARGS = ["--max-n", str(MAX_N), "--stage-budget", "dpne=1", "--epsilon", "4", "--delta", "1e-7"]


def corpus(users: int) -> dict[str, Path]:
    """The generated corpus for ``users`` (cached under benchmarks/.data/scale/)."""
    from dpngram.text.sample import write_sample

    out = DATA / "scale" / f"u{users}_v{VOCAB}"
    paths = {"users": out / "users.jsonl.gz", "public": out / "public.txt.gz"}
    if not all(p.exists() for p in paths.values()):
        print(f"generating {users:,} users ({VOCAB:,}-word vocabulary) ...", flush=True)
        write_sample(out, n_users=users, seed=SEED, vocab_size=VOCAB, public_sentences=PUBLIC_SENTENCES)
    return paths


def uncompressed_bytes(path: Path) -> int:
    """Bytes of the input once decompressed (cached next to it)."""
    cache = path.with_suffix(".bytes")
    if cache.exists():
        return int(cache.read_text())
    total = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            total += len(chunk)
    cache.write_text(str(total))
    return total


class Sampler(PeriodicSampler):
    """Peak RSS of a process tree and peak size of a folder, sampled every ``interval`` s."""

    def __init__(self, pid: int, folder: Path, interval: float = 0.2) -> None:
        import psutil

        super().__init__(interval)
        self.proc, self.folder = psutil.Process(pid), folder
        self.peak_rss = 0
        self.peak_spill = 0
        self.series: list[tuple[float, int, int]] = []  # (unix time, rss, spill)

    def tick(self) -> None:
        rss, spill = tree_rss(self.proc), self._spill()
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_spill = max(self.peak_spill, spill)
        self.series.append((time.time(), rss, spill))

    def _spill(self) -> int:
        """Bytes in DuckDB's spill folders under the warehouse: ``WAREHOUSE/runs/RUN_ID.duckdb.tmp``
        (``WAREHOUSE.tmp`` for a baseline before 2026-12-06), not the database files."""
        total = 0
        for dirpath, _, files in os.walk(self.folder):
            if not any(part.endswith(".tmp") for part in Path(dirpath).relative_to(self.folder).parts):
                continue
            for name in files:
                try:
                    total += os.path.getsize(os.path.join(dirpath, name))
                except OSError:
                    continue
        return total


def statement_profile(
    path: Path, series: list[tuple[float, int, int]], top: int = 25
) -> list[dict[str, Any]]:
    """Per SQL statement (``DPNGRAM_SQL_PROFILE`` lines, dpngram.engines.duckdb): calls, total
    seconds, the longest call, and the peak RSS and spill sampled while one of its calls ran; the
    ``top`` statements by total seconds plus every statement that spilled."""
    stats: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        s = stats.setdefault(
            rec["statement"],
            {
                "statement": rec["statement"],
                "calls": 0,
                "seconds": 0.0,
                "longest": 0.0,
                "peak_rss_bytes": 0,
                "peak_spill_bytes": 0,
            },
        )
        s["calls"] += 1
        s["seconds"] += rec["seconds"]
        s["longest"] = max(s["longest"], rec["seconds"])
        end = rec["start"] + rec["seconds"]
        during = [(rss, spill) for t, rss, spill in series if rec["start"] <= t <= end]
        if during:
            s["peak_rss_bytes"] = max(s["peak_rss_bytes"], max(r for r, _ in during))
            s["peak_spill_bytes"] = max(s["peak_spill_bytes"], max(sp for _, sp in during))
    ranked = sorted(stats.values(), key=lambda s: -s["seconds"])
    keep = ranked[:top] + [s for s in ranked[top:] if s["peak_spill_bytes"]]
    return [{**s, "seconds": round(s["seconds"], 2), "longest": round(s["longest"], 2)} for s in keep]


def code_commit(code: Path | None) -> str | None:
    """The commit measured: this checkout's (:func:`git_commit`), or a baseline tree's HEAD."""
    if code is None:
        return git_commit()
    proc = subprocess.run(["git", "-C", str(code), "rev-parse", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() or None


def floor_ratios(row: dict[str, Any]) -> dict[str, float]:
    """Product seconds over floor seconds (:mod:`scale_floor`), per stage: ingest / read_tokenize,
    dpne.kK / hist_K, and ``wall`` = the whole run's wall seconds / the floor's total."""
    floor = row.get("floor") or {}
    phases, stages = floor.get("seconds") or {}, row.get("stage_seconds") or {}
    pairs = {"ingest": "read_tokenize", **{f"dpne.k{k}": f"hist_{k}" for k in range(1, MAX_N + 1)}}
    out = {
        stage: round(stages[stage] / phases[phase], 2)
        for stage, phase in pairs.items()
        if stages.get(stage) is not None and phases.get(phase)
    }
    if floor.get("total_seconds"):
        out["wall"] = round(row["wall_seconds"] / floor["total_seconds"], 2)
    return out


def timings_dir(warehouse: Path, run_id: str) -> Path:
    """The run's stage timings: ``operator/RUN_ID/timings`` inside the warehouse directory, or
    beside the warehouse file for a baseline from before 2026-12-06 (one warehouse file, its operator
    files in the same folder). A baseline since then takes the file's path as its directory."""
    for root in (warehouse, warehouse.parent):
        candidate = root / "operator" / run_id / "timings"
        if candidate.is_dir():
            return candidate
    return warehouse / "operator" / run_id / "timings"


def add_floor(row: dict[str, Any], users_file: Path, release: Path, scratch: Path) -> None:
    """Measure the floor on the run's corpus and released sets into ``row`` (``floor``,
    ``floor_ratio``); a failed floor is recorded as ``floor.error``, the product's row is kept."""
    try:
        row["floor"] = run_floor(users_file, release, MAX_N, MEMORY_LIMIT, scratch=scratch)
    except (RuntimeError, OSError, ValueError) as err:
        row["floor"] = {"error": str(err)[-2000:]}
        return
    row["floor_ratio"] = floor_ratios(row)


def summary_line(row: dict[str, Any]) -> str:
    """One line per point: wall seconds, the floor's total and the product/floor ratios."""
    line = f"-- {row['users']:,} users, {row['code']}: wall {row['wall_seconds']} s"
    floor = row.get("floor") or {}
    if floor.get("error"):
        return line + f", floor failed: {floor['error'].splitlines()[-1:]}"
    if floor.get("total_seconds"):
        ratios = ", ".join(f"{k} {v}" for k, v in row.get("floor_ratio", {}).items())
        line += f", floor {floor['total_seconds']} s; product/floor: {ratios}"
    return line


def run_point(
    users: int,
    policy: str,
    *,
    full_split: bool = False,
    profile: bool = False,
    code: Path | None = None,
    floor: bool = False,
) -> dict[str, Any]:
    """One ``dpngram run`` on ``users`` generated users; returns its measured row. ``profile``:
    also the per-statement profile (:func:`statement_profile`); it appends a line per statement,
    which costs well under 1% of the run (a few thousand statements). ``code``: run the source tree
    there (:func:`baseline_tree`) instead of this checkout, with the same venv and corpus.
    ``floor``: then measure the machine floor on the same corpus with the run's released sets
    (:func:`add_floor`, dpne=1 runs only: its phases are DPNE's)."""
    paths = corpus(users)
    work = (
        DATA
        / "scale_work"
        / f"u{users}_{policy}{'_full' if full_split else ''}{'_' + code.name if code else ''}"
    )
    shutil.rmtree(work, ignore_errors=True)
    # the warehouse directory (one DuckDB file per run inside); a baseline before 2026-12-06 takes
    # the path of its one warehouse file, in the same folder (its operator files are there too)
    warehouse = work / "wh" / "warehouse.duckdb" if code else work / "wh"
    args = [
        *(
            [str(ROOT / ".venv" / "bin" / "python"), "-m", "dpngram.cli"]
            if code
            else [str(ROOT / ".venv" / "bin" / "dpngram")]
        ),
        "run",
        "--input",
        str(paths["users"]),
        "--out",
        str(work / "out"),
    ]
    args += ["--warehouse", str(warehouse), "--memory-limit", MEMORY_LIMIT, "--quiet", "--json"]
    if full_split:
        args += ["--public", str(paths["public"]), "--epsilon", "4", "--delta", "1e-7"]
    else:
        args += DPNE_ARGS
    if policy != "default":
        args += ["--dpsu-policy", policy]
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = str(code / "src")
    profile_path = work / "statements.jsonl"
    if profile:
        work.mkdir(parents=True, exist_ok=True)
        env["DPNGRAM_SQL_PROFILE"] = str(profile_path)
    load_before = load_average()
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    (work / "wh").mkdir(parents=True, exist_ok=True)
    with Sampler(proc.pid, work / "wh") as sampler:
        stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    row: dict[str, Any] = {
        "engine": "duckdb",
        "code": f"baseline {code.name.removeprefix('baseline_')}" if code else "this checkout",
        "cpu_model": machine().get("cpu_model"),
        "git_commit": code_commit(code),
        "users": users,
        "policy": policy,
        "split": "default (every stage)" if full_split else "dpne=1",
        "memory_limit": MEMORY_LIMIT,
        "input_bytes_gz": paths["users"].stat().st_size,
        "input_bytes": uncompressed_bytes(paths["users"]),
        "wall_seconds": round(wall, 1),
        "peak_rss_bytes": sampler.peak_rss,
        "peak_spill_bytes": sampler.peak_spill,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "exit_code": proc.returncode,
    }
    if proc.returncode != 0:
        row["error"] = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        return row
    summary = json.loads(stdout)
    run_id = summary.get("run_id") or Path(summary["release"]).name
    timings = timings_dir(warehouse, run_id)
    row["stage_seconds"] = {
        p.stem: json.loads(p.read_text())["seconds"] for p in sorted(timings.glob("*.json"))
    }
    report = json.loads((Path(summary["release"]) / "report.json").read_text())
    released = {
        k: v.get("released")
        for k, v in report["stages"].items()
        if k.startswith("dpne.k") and k[6:].isdigit()
    }
    row["released"] = released
    row["ngrams"] = sum(v for v in released.values() if v)
    if profile and profile_path.exists():
        row["statement_profile"] = statement_profile(profile_path, sampler.series)
    if floor and not full_split:
        add_floor(row, paths["users"], Path(summary["release"]), work)
    shutil.rmtree(work, ignore_errors=True)  # warehouses of 1M+ users are GBs
    return row


def spark_row(r: dict[str, Any]) -> dict[str, Any]:
    """A row of ``results/scale_spark.json`` (``spark_scale_bench.py``) in this file's fields: wall
    seconds (the CLI end to end), seconds per stage, the driver's peak RSS (Python + JVM) as
    ``peak_rss_bytes``, n-grams released; the executors' figures are kept as they are."""
    return {
        **r,
        "engine": "spark",
        "policy": r.get("dpsu_policy", "default"),
        "split": "dpne=1",
        "exit_code": r.get("returncode"),
        "wall_seconds": r.get("end_to_end_seconds"),
        "stage_seconds": {k: v["seconds"] for k, v in (r.get("stages") or {}).items()},
        "peak_rss_bytes": int(r["driver_peak_mib"] * 2**20) if r.get("driver_peak_mib") else None,
        "peak_rss_is": "the driver (CLI process + its JVM)",
        "ngrams": r.get("ngrams_released"),
    }


def this_checkout(row: dict[str, Any]) -> bool:
    """A row of the code measured (not a ``--baseline-commit`` row; rows before that flag are)."""
    return row.get("code", "this checkout") == "this checkout"


def baseline_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per point run with both codes in one session: wall and per-stage seconds of this checkout
    divided by the baseline's (a machine-independent comparison)."""
    out = []
    for base in (r for r in rows if not this_checkout(r) and r.get("exit_code") == 0):
        mine = [
            r
            for r in rows
            if this_checkout(r)
            and r.get("exit_code") == 0
            and (r["engine"], r["users"], r["policy"], r["split"], r.get("cpu_model"))
            == (base["engine"], base["users"], base["policy"], base["split"], base.get("cpu_model"))
        ]
        if not mine:
            continue
        r = mine[0]
        out.append(
            {
                "users": r["users"],
                "baseline": base["code"],
                "cpu_model": base.get("cpu_model"),
                "wall_seconds": [r["wall_seconds"], base["wall_seconds"]],
                "wall_ratio": round(r["wall_seconds"] / base["wall_seconds"], 3),
                "stage_ratio": {
                    k: round(v / base["stage_seconds"][k], 3)
                    for k, v in r.get("stage_seconds", {}).items()
                    if base.get("stage_seconds", {}).get(k)
                },
                "ngrams": [r.get("ngrams"), base.get("ngrams")],
            }
        )
    return out


def fit_exponent(points: list[tuple[int, float]]) -> dict[str, float] | None:
    """Least-squares fit of log(seconds) = a + b log(users); None with fewer than 2 points."""
    pts = [(math.log(u), math.log(s)) for u, s in points if s > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx
    a = my - b * mx
    return {"exponent": round(b, 3), "seconds_at_100M": round(math.exp(a + b * math.log(1e8)), 0)}


def projection(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    duck = [
        (r["users"], r["wall_seconds"])
        for r in rows
        if r["engine"] == "duckdb"
        and r.get("exit_code") == 0
        and r["split"] == "dpne=1"
        and r["policy"] == "default"
        and this_checkout(r)
    ]
    fit = fit_exponent(duck)
    if fit:
        out["duckdb_one_machine"] = {
            **fit,
            "basis": f"measured wall seconds at {sorted(u for u, _ in duck)} users",
        }
    spark = [
        (r["users"], r["wall_seconds"]) for r in rows if r["engine"] == "spark" and r.get("wall_seconds")
    ]
    fit = fit_exponent(spark)
    if fit:
        out["spark_2_workers"] = {
            **fit,
            "basis": f"measured wall seconds at {sorted(u for u, _ in spark)} users",
        }
        out["spark_n_executors"] = {str(n): round(fit["seconds_at_100M"] * 2 / n, 0) for n in (8, 32, 128)}
        out["spark_n_executors_assumption"] = (
            "seconds at 100M users on N executors = the 2-worker extrapolation x 2/N: linear scale-out is "
            "ASSUMED (not measurable on this 2-core machine); the driver's share does not grow with users "
            "(results/scale_spark.json: driver peak memory)"
        )
    return out


def plot(payload: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in payload["rows"] if r.get("exit_code", 0) == 0 and r.get("stage_seconds")]
    duck = sorted(
        (r for r in rows if r["engine"] == "duckdb" and r["split"] == "dpne=1" and this_checkout(r)),
        key=lambda r: (r["policy"], r["users"]),
    )
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    ax = axes[0]
    stages = ["ingest", "dpne.k1", "dpne.k2", "dpne.k3", "dpne.k4", "dpne.k5", "validation"]
    # the policy's words on their own lines: "policy-gaussian" beside "weighted" ran together
    labels = [f"{r['users'] // 1000}k\n" + r["policy"].replace("-", "-\n") for r in duck]
    bottom = [0.0] * len(duck)
    for stage in stages + ["other"]:
        vals = []
        for r in duck:
            secs = r["stage_seconds"]
            vals.append(
                r["wall_seconds"] - sum(secs.get(s, 0) for s in stages)
                if stage == "other"
                else secs.get(stage, 0)
            )
        ax.bar(labels, vals, bottom=bottom, label=stage)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.axhline(TARGETS["wall_seconds"], color="red", linestyle="--", linewidth=1, label="1M target (120 s)")
    ax.set_ylabel("wall seconds")
    ax.set_title("DuckDB, T = 5, dpne=1: seconds per stage")
    ax.legend(fontsize=7, ncol=2)
    ax = axes[1]
    for policy in sorted({r["policy"] for r in duck}):
        pts = [r for r in duck if r["policy"] == policy]
        ax.plot(
            [r["users"] for r in pts],
            [r["peak_rss_bytes"] / 1e9 for r in pts],
            "o-",
            label=f"peak RSS ({policy})",
        )
        ax.plot(
            [r["users"] for r in pts],
            [r["peak_spill_bytes"] / 1e9 for r in pts],
            "s--",
            label=f"peak spill ({policy})",
        )
    spark = [r for r in payload["rows"] if r["engine"] == "spark" and r.get("peak_rss_bytes")]
    if spark:
        spark.sort(key=lambda r: r["users"])
        ax.plot(
            [r["users"] for r in spark],
            [r["peak_rss_bytes"] / 1e9 for r in spark],
            "^-",
            label=f"Spark driver peak RSS ({spark[0]['policy']})",
        )
    ax.axhline(4.4, color="red", linestyle="--", linewidth=1, label="4GB limit + 10%")
    ax.set_xscale("log")
    ax.set_xlabel("users")
    ax.set_ylabel("GB")
    ax.set_title("memory and spill")
    ax.legend(fontsize=7)
    fig.suptitle(f"machine: {payload.get('machine', {}).get('cpu_model', 'unknown')}, 2 cores", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def kept_rows(measured_rows: list[dict[str, Any]], old_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The committed DuckDB rows a ``--merge`` keeps: those not re-measured now, except the
    baseline rows of a point this session re-measured (their ratio against today's rows would mix
    two sessions' hosts, which differ by ±20%: only same-session pairs are compared)."""

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["engine"], r["users"], r["policy"], r["split"], r.get("code", "this checkout"))

    measured = {key(r) for r in measured_rows}
    points = {key(r)[:4] for r in measured_rows}
    return [
        r
        for r in old_rows
        if r["engine"] == "duckdb"
        and key(r) not in measured
        and (this_checkout(r) or key(r)[:4] not in points)
    ]


def write_payload(rows: list[dict[str, Any]], out: Path, png: Path) -> None:
    """Write ``out`` (rows, the 1M checks, same-session baseline ratios, the projection) and its plot."""
    spark_file = RESULTS / "scale_spark.json"
    if spark_file.exists():
        rows += [spark_row(r) for r in json.loads(spark_file.read_text()).get("rows", [])]
    one_m = [
        r
        for r in rows
        if r["engine"] == "duckdb"
        and r["users"] == TARGETS["users"]
        and r["split"] == "dpne=1"
        and r.get("exit_code") == 0
        and this_checkout(r)
    ]
    checks = {}
    for r in one_m:
        limit = 4e9 * TARGETS["rss_over_limit"]
        checks[r["policy"]] = {
            "wall_seconds": [r["wall_seconds"], r["wall_seconds"] <= TARGETS["wall_seconds"]],
            "ingest_seconds": [
                r["stage_seconds"].get("ingest"),
                (r["stage_seconds"].get("ingest") or 1e9) <= TARGETS["ingest_seconds"],
            ],
            "peak_rss_bytes": [r["peak_rss_bytes"], r["peak_rss_bytes"] <= limit],
            "spill_over_input": [
                round(r["peak_spill_bytes"] / r["input_bytes"], 3),
                r["peak_spill_bytes"] <= TARGETS["spill_over_input"] * r["input_bytes"],
            ],
        }
    payload = {
        "benchmark": "scale",
        "date": now(),
        "machine": machine(),
        "git_commit": git_commit(),
        "parameters": {
            "corpus": (
                f"dpngram.text.sample.write_sample(n_users=N, seed={SEED}, vocab_size={VOCAB}, "
                f"public_sentences={PUBLIC_SENTENCES})"
            ),
            "run": "dpngram run " + " ".join(DPNE_ARGS) + f" --memory-limit {MEMORY_LIMIT}",
        },
        "targets": TARGETS,
        "checks_at_1M": checks,
        "rows": rows,
        "baseline_ratios": baseline_ratios(rows),
        "projection": projection(rows),
    }
    write_result(out.name, payload)
    plot(payload, png)
    print(json.dumps({"checks_at_1M": checks, "projection": payload["projection"]}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--users",
        type=int,
        nargs="*",
        default=[100_000, 300_000, 1_000_000, 3_000_000],
        help="users per dpne=1 point (default: 100k 300k 1M 3M, about an hour with --baseline-commit; "
        "'--users' with no number: none, e.g. only --full-split)",
    )
    parser.add_argument(
        "--policy", nargs="+", default=["default"], help="DPSU policies ('default' = no flag)"
    )
    parser.add_argument("--full-split", action="store_true", help="also one run at 1M users with every stage")
    parser.add_argument("--plot-only", action="store_true", help="re-plot the committed results/scale.json")
    parser.add_argument(
        "--profile", action="store_true", help="record each run's per-statement SQL profile in its row"
    )
    parser.add_argument(
        "--baseline-commit",
        default=None,
        help="also run each point with the code of this commit, in the same session (a ratio that does "
        "not depend on the machine)",
    )
    parser.add_argument(
        "--no-floor",
        action="store_true",
        help="skip the machine floor (scale_floor.py) measured after each dpne=1 run",
    )
    parser.add_argument("--out", default="scale.json", help="result file under benchmarks/results/")
    parser.add_argument(
        "--merge", action="store_true", help="keep rows of results/scale.json not re-measured"
    )
    args = parser.parse_args()
    out = RESULTS / args.out
    png = out.with_suffix(".png")
    if args.plot_only:
        plot(json.loads(out.read_text()), png)
        return
    baseline = baseline_tree(args.baseline_commit) if args.baseline_commit else None
    rows: list[dict[str, Any]] = []
    for policy in args.policy:
        for users in args.users:
            print(f"== {users:,} users, policy {policy}", flush=True)
            row = run_point(users, policy, profile=args.profile, floor=not args.no_floor)
            print(json.dumps(row), flush=True)
            print(summary_line(row), flush=True)
            rows.append(row)
            if baseline:
                print(f"== {users:,} users, policy {policy}, code of {baseline.name}", flush=True)
                row = run_point(users, policy, profile=args.profile, code=baseline, floor=not args.no_floor)
                rows.append(row)
                print(json.dumps(rows[-1]), flush=True)
                print(summary_line(rows[-1]), flush=True)
    if args.full_split:
        print("== 1,000,000 users, default split (every stage)", flush=True)
        rows.append(run_point(1_000_000, "default", full_split=True, profile=args.profile))
        print(json.dumps(rows[-1]), flush=True)
        if baseline:
            print(f"== 1,000,000 users, default split, code of {baseline.name}", flush=True)
            rows.append(run_point(1_000_000, "default", full_split=True, profile=args.profile, code=baseline))
            print(json.dumps(rows[-1]), flush=True)
    failed = failed_runs(rows)
    if args.merge and out.exists():
        rows += kept_rows(rows, json.loads(out.read_text())["rows"])
    write_payload(rows, out, png)
    if failed:
        # the rows are written first (nothing measured is lost); the exit status tells make bench
        sys.exit("scale_bench: failed: " + "; ".join(failed))


def failed_runs(rows: list[dict[str, Any]]) -> list[str]:
    """One line per run of this invocation that failed: a product run with a non-zero exit, or a
    floor that could not be measured (its ratio is the figure issue 51 asks for)."""
    failed = []
    for row in rows:
        point = f"{row['users']:,} users, {row['split']}, {row['code']}"
        if row.get("exit_code"):
            failed.append(f"{point}: exit {row['exit_code']} {row.get('error') or ''}".rstrip())
        elif (row.get("floor") or {}).get("error"):
            failed.append(f"{point}: floor {row['floor']['error'].splitlines()[-1:]}")
    return failed


if __name__ == "__main__":
    main()
