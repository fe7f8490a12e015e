"""The LM benchmark's baseline row: the same release made by an earlier commit's code (a git
worktree under benchmarks/.data/, ``_common.baseline_tree``), run as that commit's own
``dpngram run`` in a subprocess with this checkout's venv, on the same training file, public corpus,
ε, δ, T, stage split and memory limit. Only its model is used: it is scored by this checkout's
evaluation, like every other row, so the two rows differ only in the code that built the model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lm.common import MAX_N, STAGE_BUDGET


def baseline_release(
    tree: Path, eps: float, train: Path, public: Path, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """One release by the code in ``tree``; returns its model's path and wall seconds. A tree from
    before 2026-12-06 takes a warehouse *file* (its ledger lived there), a newer one a directory:
    the file's folder serves both."""
    out, warehouse = work / "out", work / "wh" / "warehouse.duckdb"
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    split = ",".join(f"{k}={v:g}" for k, v in STAGE_BUDGET.items())
    command = [
        sys.executable,  # this checkout's venv (the tree has none of its own)
        "-m",
        "dpngram.cli",
        "run",
        "--dataset",
        f"lm-bench-baseline-eps{eps:g}",
        "--input",
        str(train),
        "--public",
        str(public),
        "--out",
        str(out),
        "--warehouse",
        str(warehouse),
        "--epsilon",
        f"{eps:g}",
        "--delta",
        f"{args.delta:g}",
        "--max-n",
        str(MAX_N),
        "--stage-budget",
        split,
        "--memory-limit",
        args.memory_limit,
        "--quiet",
        "--json",
    ]
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
    seconds = round(time.perf_counter() - started, 1)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"baseline release ({tree.name}) failed ({proc.returncode}):\n{tail}")
    model = Path(json.loads(proc.stdout)["release"]) / "model" / "model.binary"
    if not model.is_file():
        raise RuntimeError(f"baseline release ({tree.name}) wrote no model: {model}")
    return {"model": model, "run_seconds": seconds}
