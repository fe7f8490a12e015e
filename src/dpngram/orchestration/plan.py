"""Run orchestration shared by the CLI and the Airflow DAG (no Airflow imports here).

A run is a sequence of stage functions, each taking the validated :class:`RunConfig` (with a
fixed ``run_id``) and returning a small JSON-able summary that is safe for logs and XCom (paths,
row counts of released tables, epsilon/delta). Stages communicate only through the warehouse
(private tables in the run's schema) and the staged release directory, so each can run in its
own process (an Airflow task) and be retried.

Privacy-spending stages go through :func:`spend_once`, which implements the retry rule: the
stage's noisy outputs are written (atomically) *before* its spend is committed to the ledger, and
a retried stage whose outputs exist reloads them instead of drawing fresh noise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpngram.config import RunConfig
from dpngram.core.noise import NoiseSource
from dpngram.mechanisms.dpne import level_stage
from dpngram.mechanisms.dpsu import VOCABULARY_STAGE
from dpngram.release.context import RunContext, public_summary, stage_timer
from dpngram.release.publish import prepare, publish_run
from dpngram.stages import bayes as bayes_stage
from dpngram.stages import dpne as dpne_stage
from dpngram.stages import ingest as ingest_stage
from dpngram.stages import lm_counts as lm_counts_stage
from dpngram.stages import synth as synth_stage
from dpngram.stages import triehh as triehh_stage
from dpngram.stages import validate as validate_stage
from dpngram.stages import vocabulary as vocabulary_stage

StageFn = Callable[[RunContext], dict[str, Any]]


def release_plan(
    config: RunConfig,
    baseline: str | None = None,
    baseline_k: int | None = None,
    ingest_progress: Callable[[int], None] | None = None,
) -> list[tuple[str, StageFn]]:
    """The stages of a full release, in order, after :func:`prepare` (the same order as the
    Airflow DAG's tasks): ingest, vocabulary, DPNE levels 2..T, merge, validate, report.
    With ``baseline`` ('dpsu-all' | 'dpsu-even' | 'dpsu-single'), one DPSU baseline replaces the
    vocabulary and the levels (DPNE §3.1.2)."""
    from dpngram.stages import report

    plan: list[tuple[str, StageFn]] = [("ingest", lambda ctx: ingest_stage.run_ingest(ctx, ingest_progress))]
    if config.dpne.vocabulary_method in ("triehh", "both"):  # LDP TrieHH words for S_1

        plan.append(("triehh", triehh_stage.run_triehh))
    if baseline is None:
        plan.append(("vocabulary", vocabulary_stage.run_vocabulary))
        for k in range(2, config.dpne.max_n + 1):
            plan.append((f"dpne_level_{k}", lambda ctx, k=k: dpne_stage.run_level(ctx, k)))
        if config.dpne.max_n >= 2:
            plan.append(("kgrams", dpne_stage.finalize_kgrams))
    else:
        plan.append((f"baseline_{baseline}", lambda ctx: dpne_stage.run_baseline(ctx, baseline, baseline_k)))
    if "lm_counts" in config.stage_budget:  # noisy n-gram counts + mixture weight for the LM

        plan.append(("lm_counts", lm_counts_stage.run_lm_counts))
    if "bayes" in config.stage_budget:

        plan.append(("bayes", bayes_stage.run_bayes))
    if "synth" in config.stage_budget:

        plan.append(("synth", synth_stage.run_synth))
    plan.append(("validate", validate_stage.validate_run))
    from dpngram.stages.lm import lm_enabled

    if lm_enabled(config):  # language model from the released DP artifacts (post-processing)
        from dpngram.stages.lm import run_lm

        plan.append(("lm", run_lm))
    plan.append(("report", lambda ctx: {"path": str(report.write_report(ctx))}))
    return plan


def run_release(
    config: RunConfig,
    *,
    baseline: str | None = None,
    baseline_k: int | None = None,
    on_stage: Callable[[str, str, dict[str, Any]], None] | None = None,
    ingest_progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run a whole release in this process: prepare, every stage of :func:`release_plan`, publish.

    ``on_stage(name, event, summary)`` is called with event 'start' and 'done' (summary: the
    stage's :func:`public_summary`). Any exception propagates; nothing is published unless every
    stage (including validation) succeeded. Returns run_id, the release path and the summaries."""
    config = prepare(config)
    ctx = RunContext(config)
    summaries: dict[str, dict[str, Any]] = {}
    for name, fn in release_plan(config, baseline, baseline_k, ingest_progress):
        if on_stage:
            on_stage(name, "start", {})
        with stage_timer(ctx, name):
            summaries[name] = public_summary(fn(ctx))
        if on_stage:
            on_stage(name, "done", summaries[name])
    if on_stage:
        on_stage("publish", "start", {})
    path = publish_run(ctx)
    if on_stage:
        on_stage("publish", "done", {"path": str(path)})
    return {"run_id": ctx.run_id, "release": str(path), "stages": summaries}


def run_dpne(
    ctx: RunContext, progress: Callable[[str], None] | None = None, *, noise: NoiseSource | None = None
) -> dict[str, Any]:
    """The DPNE stages in this process: vocabulary, levels 2..T and the k-gram merge;
    ``progress(stage_name)`` is called after each."""
    results = [vocabulary_stage.run_vocabulary(ctx, noise=noise)]
    if progress:
        progress(VOCABULARY_STAGE)
    for k in range(2, ctx.config.dpne.max_n + 1):
        results.append(dpne_stage.run_level(ctx, k, noise=noise))
        if progress:
            progress(level_stage(k))
    final = dpne_stage.finalize_kgrams(ctx)
    if progress:
        progress("dpne.finalize")
    return {
        "stages": [r["stage"] for r in results] + [final["stage"]],
        "released_rows": {"vocabulary": results[0]["released_rows"], "kgrams": final["released_rows"]},
        "paths": results[0]["paths"] + final["paths"],
    }
