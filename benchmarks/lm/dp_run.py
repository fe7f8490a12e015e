"""The LM benchmark's DP row: one release on the training users, with stage ``lm`` alone in a spawned
child process (its wall time and the peak RSS of it and the KenLM tools it runs).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue as queue_mod
import time
from pathlib import Path
from typing import Any

from lm.common import (
    MAX_N,
    STAGE_BUDGET,
    Corpus,
)


def _vm_hwm_mb() -> float | None:
    """This process's peak RSS (VmHWM: the high-water mark of its own address space, which, unlike
    getrusage's ru_maxrss, does not carry over the RSS of the parent it was forked from)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def _lm_child(config_json: str, out: mp.Queue) -> None:
    from dpngram.config import RunConfig
    from dpngram.release.context import RunContext, stage_timer
    from dpngram.stages.lm import run_lm

    try:
        # flat names (RunConfig.to_json): model_dump_json's nested sections do not validate back
        ctx = RunContext(RunConfig.build(**json.loads(config_json)))
        started = time.perf_counter()
        with stage_timer(ctx, "lm"):
            run_lm(ctx)
        out.put({"wall_seconds": round(time.perf_counter() - started, 2), "vm_hwm_mb": _vm_hwm_mb()})
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        out.put({"error": f"{type(err).__name__}: {err}"})


class TreeRss:
    """Samples the summed RSS of a process and its descendants (the KenLM tools the stage runs)
    every ``interval`` seconds in a thread; ``peak_mb`` is the largest sum seen."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        import threading

        self.pid, self.interval, self.peak_mb = pid, interval, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak_mb = max(self.peak_mb, total / 2**20)
            self._stop.wait(self.interval)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak_mb, 1)


def run_lm_stage(config_json: str) -> dict[str, Any]:
    """Stage lm alone in a spawned child process; its wall time and peak RSS."""
    spawn = mp.get_context("spawn")
    out: mp.Queue = spawn.Queue()
    child = spawn.Process(target=_lm_child, args=(config_json, out))
    child.start()
    sampler = TreeRss(child.pid)
    try:
        while True:
            try:
                result = out.get(timeout=5)
                break
            except queue_mod.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"lm stage child died (exit code {child.exitcode})") from None
        child.join()
    finally:
        tree = sampler.stop()
    if "error" in result:
        raise RuntimeError(f"lm stage failed: {result['error']}")
    hwm = result.pop("vm_hwm_mb")
    return {
        **result,
        "peak_rss_mb": round(max(hwm or 0.0, tree), 1),
        "peak_rss_mb_python": round(hwm, 1) if hwm is not None else None,
        "peak_rss_mb_sampled_tree": tree,
    }


def bench_config(
    corpus: Corpus,
    eps: float,
    train: Path,
    work: Path,
    args: argparse.Namespace,
    *,
    stage_budget: dict[str, float] | None = None,
    max_n: int | None = None,
    warehouse: Path | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """The run configuration of one release on the training users (every lm_* option at its
    default; also used by benchmarks/studies/lm_threshold_study.py and, with another
    ``stage_budget`` / ``max_n`` / a ``warehouse`` whose public-model cache is shared,
    benchmarks/studies/lm_split_study.py). ``options``: further settings by their flat names
    (benchmarks/studies/lm_forms_study.py's ``lm_count_clip``), over lm_bench's ``--option``s."""
    from dpngram.config import RunConfig

    return RunConfig.build(
        **{**getattr(args, "options", {}), **(options or {})},
        dataset=f"lm-bench-{corpus.name}-eps{eps:g}",
        input=str(train),
        public=str(corpus.public),
        out=str(work / "out"),
        warehouse=str(warehouse or work / "wh"),
        epsilon=eps,
        delta=args.delta,
        max_n=max_n or MAX_N,
        stage_budget=stage_budget or STAGE_BUDGET,
        memory_limit=args.memory_limit,
    )


def dp_run(
    corpus: Corpus, eps: float, train: Path, work: Path, args: argparse.Namespace, **overrides: Any
) -> dict[str, Any]:
    """One release on the training users; returns its paths, parts, timings and every step's public
    summary (released rows, ε, charged ε). ``overrides``: :func:`bench_config`'s keyword options."""
    from dpngram.orchestration.plan import release_steps
    from dpngram.release.context import RunContext, public_summary, read_parts, read_timings, stage_timer
    from dpngram.release.publish import prepare, publish_run

    config = bench_config(corpus, eps, train, work, args, **overrides)
    started = time.perf_counter()
    config = prepare(config)
    ctx = RunContext(config)
    lm_stage: dict[str, Any] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for step in release_steps(config):
        if step.name == "lm":
            lm_stage = run_lm_stage(ctx.config.to_json())
        else:
            with stage_timer(ctx, step.name):
                summaries[step.name] = public_summary(step.run(ctx))
    timings = read_timings(ctx)
    parts = read_parts(ctx)
    root = publish_run(ctx)
    return {
        "root": Path(root),
        # report parts no longer carry wall-clock seconds (operator-only): stage lm's time is the
        # operator timing of the child's stage_timer around run_lm
        "lm_seconds": timings.get("lm"),
        "budget_plan": config.budget_plan().report(),
        "run_seconds": round(time.perf_counter() - started, 1),
        "stage_seconds": timings,
        "lm_stage_child": lm_stage,
        "lm_counts": parts["lm_counts"],
        "lm": parts["lm"],
        "parts": parts,
        "summaries": summaries,
        "config": {
            k: v
            for k, v in json.loads(config.to_json()).items()
            if k not in ("input", "out", "warehouse", "run_id", "public", "dataset")
        },
    }


def study_releases(
    corpus: Corpus,
    epsilons: list[float],
    runs: int,
    train: Path,
    work: Path,
    args: argparse.Namespace,
    **options: Any,
):
    """A study's releases: ``runs`` per ε (:func:`dp_run`, fresh noise each, the public-model cache
    shared in ``work/wh`` unless ``options`` names a warehouse), each yielded as
    (ε, run, dp_run's result, its run configuration) and its folder removed afterwards."""
    import shutil

    options.setdefault("warehouse", work / "wh")
    for eps in epsilons:
        for run in range(runs):
            run_dir = work / f"eps{eps:g}_{run}"
            run_dir.mkdir()
            release = dp_run(corpus, eps, train, run_dir, args, **options)
            yield eps, run, release, bench_config(corpus, eps, train, run_dir, args, **options)
            shutil.rmtree(run_dir, ignore_errors=True)
