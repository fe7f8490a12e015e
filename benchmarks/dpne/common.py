"""Shared by the DPNE benchmark's scenarios: paths, the paper's parameters, the public
reference's figures, corpora, results and their header.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from _common import git_commit, machine

#: The repository.
ROOT = Path(__file__).resolve().parent.parent.parent


DATA = ROOT.parent / "shared" / "data"
SOTU = DATA / "sotu_users.jsonl.gz"
CACHE = ROOT / "benchmarks" / ".data"
RESULTS = ROOT / "benchmarks" / "results"
SEED = 20261121  # same corpora (and cache folders) as benchmarks/ingest_bench.py
PUBLIC_SENTENCES = 20_000
#: DPNE alone, with the whole budget (the product's default split also funds other stages).
PAPER = {
    "epsilon": 4.0,
    "delta": 1e-7,
    "max_contribution": 100,
    "eta": 0.01,
    "pruning": "both",
    "stage_budget": {"dpne": 1.0},
}
TABLE4_T = 9
SPEED_T = 5
METHODS = ("dpne", "dpsu-all", "dpsu-even", "dpsu-single")
FALSE_FAILURE = 1e-4  # of the spurious-count upper bands

# The public DPNE implementation (PySpark local, 2 cores), as measured on this kind of machine
# (issue 3): eps = 4, delta = 1e-7, eta = 0.01, Delta = 100, T = 5, both-side pruning.
REFERENCE = {
    "implementation": "public DPNE reference (PySpark local, 2 cores, top-k per-user sampling)",
    "released_total_runs": [4237, 4364],
    "released_per_k_first_run": [1023, 1316, 1190, 505, 203],
    "end_to_end_seconds": 13.4 * 60,
    "end_to_end_seconds_tuned": 8.1 * 60,
    "tuning": "Spark with 4 shuffle partitions",
    "peak_rss_mb": 6.3 * 1024,
}


# ----------------------------------------------------------------------------------------------
# Environment
# ----------------------------------------------------------------------------------------------
def peak_rss_mb() -> float:
    """Peak resident set size of this process (and any waited-for children), MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024, 1)


def corpus(n_users: int) -> Path:
    """The generated corpus of ``n_users`` users (cached; same folders as ingest_bench.py)."""
    from dpngram.text.sample import GENERATOR_VERSION, write_sample

    folder = CACHE / f"sample_u{n_users}_s{SEED}_g{GENERATOR_VERSION}"
    users = folder / "users.jsonl.gz"
    if not users.is_file():
        started = time.perf_counter()
        print(f"generating {n_users:,} users into {folder} ...", file=sys.stderr, flush=True)
        write_sample(folder, n_users=n_users, seed=SEED, public_sentences=PUBLIC_SENTENCES)
        print(f"  generated in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return users


def write_sample_default(name: str) -> Any:
    from dpngram.text.sample import write_sample

    return inspect.signature(write_sample).parameters[name].default


def write_result(name: str, record: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    print(f"\nresults: {path.relative_to(ROOT)}")
    return path


def header(benchmark: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "benchmark": benchmark,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "machine": machine(),
        "parameters": parameters,
    }


def released_bars(
    ax: Any,
    runs: dict[str, Any],
    names: list[str],
    label: str,
    eps: float,
    colors: list[str],
    ticks: list[str],
) -> None:
    """One panel of released n-grams (mean and sd of the runs) per configuration on one corpus and
    epsilon; on SOTU at eps 4 with the issue's target and the public reference's mean."""
    import statistics

    means = [runs[f"{c} eps={eps:g}"]["released_total"]["mean"] for c in names]
    sds = [runs[f"{c} eps={eps:g}"]["released_total"]["sd"] for c in names]
    ax.bar(range(len(names)), means, yerr=sds, color=colors)
    ax.set_xticks(range(len(names)), ticks, fontsize=7)
    if label == "sotu" and eps == 4.0:
        ax.axhline(5450, color="red", linestyle=":", linewidth=1, label="target 5,450")
        ax.axhline(
            statistics.fmean(REFERENCE["released_total_runs"]),
            color="black",
            linestyle="--",
            linewidth=1,
            label="reference implementation",
        )
        ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"{label}, eps = {eps:g}", fontsize=9)
    ax.set_ylabel("released n-grams, k = 1..5")


def best_by_gain(
    grid: dict[str, Any], names: Any, baseline: str, epsilons: Any
) -> tuple[str, dict[str, float]]:
    """The entry of ``names`` with the largest geometric mean over ``epsilons`` of its released
    total relative to ``baseline``'s in ``grid`` (a :func:`dpne.budget.budget_runs` result), and
    every entry's score."""
    import math
    import statistics

    scores: dict[str, float] = {}
    for name in names:
        ratios = [
            grid["runs"][f"{name} eps={eps:g}"]["released_total"]["mean"]
            / grid["runs"][f"{baseline} eps={eps:g}"]["released_total"]["mean"]
            for eps in epsilons
        ]
        scores[name] = round(math.exp(statistics.fmean(math.log(r) for r in ratios)), 4)
    return max(scores, key=lambda n: scores[n]), scores
