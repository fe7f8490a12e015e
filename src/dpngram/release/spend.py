"""Charging the privacy budget: :func:`spend_once`, the only way a stage spends.

A stage hands :func:`spend_once` a ``compute`` function that draws the noise, writes the stage's
outputs into the staged release and returns its privacy events. The noisy output and the stage's
report part (its events, the composed (ε, δ) and what the ledger is charged) are persisted before
the charge is committed to the ledger, so a retried stage reloads its output instead of drawing
fresh noise, and the ledger entry is written once. A sub-stage ``parent.part`` (e.g. ``dpne.k3``)
shares its parent's budget and is charged only the increment of the parent's composed ε, so the
ledger sum over the sub-stages is the exact composition (docs/accounting.md,
docs/orchestration.md). A charge that would exceed the stage's share is refused.

What the ledger is charged is the increment of the run's composed ε that the stage's events add to
the events already committed by the run, so a run's ledger total is its composed total
(docs/accounting.md, "Joint calibration" and "The ledger").

Owns: :func:`spend_once` (persist-then-commit, the per-stage ledger charge).
Imports: dpngram.release (layout, context, ledger), dpngram.engines, dpngram.config, dpngram.core.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from dpngram.config import RunConfig
from dpngram.core.accounting import Accountant, PrivacyEvent
from dpngram.core.budget import Budget
from dpngram.engines.duckdb import Warehouse
from dpngram.release.context import RunContext, StageResult, read_parts
from dpngram.release.layout import PARTS_DIR, write_json_atomic
from dpngram.release.ledger import Ledger


def spend_once(
    ctx: RunContext,
    stage: str,
    outputs: list[str],
    compute: Callable[[Warehouse], StageResult],
    *,
    engine: bool = False,
) -> dict[str, Any]:
    """Run a privacy-spending stage at most once per run.

    ``engine=True``: ``compute`` receives the configured engine (:meth:`RunContext.engine`: DuckDB
    or Spark) instead of the DuckDB warehouse; the ledger is in the DuckDB file either way.

    ``compute`` draws the noise, writes every file named in ``outputs`` (relative to the release,
    via :meth:`Release.writing`) and returns its events. Then, in this order: the stage's
    marker (events + report fragment) is written, and the spend is committed to the ledger.
    If the marker and all outputs already exist (a retry), nothing is recomputed; the ledger entry
    is (re)committed idempotently.
    """
    release = ctx.release
    marker = release.path(PARTS_DIR, f"{stage}.json")
    started = time.perf_counter()
    with ctx.engine() if engine else ctx.warehouse() as wh:
        reused = marker.exists() and all((release.root / o).exists() for o in outputs)
        if reused:
            fragment = json.loads(marker.read_text(encoding="utf-8"))
            events = [PrivacyEvent(**e) for e in fragment["privacy"]["events"]]
        else:
            result = compute(wh)
            missing = [o for o in outputs if not (release.root / o).exists()]
            if missing:
                raise RuntimeError(f"stage {stage} did not write {missing}")
            events = result.events
            stage_eps, stage_delta = _stage_share(ctx.config, stage)
            summary = _charged_summary(ctx, stage, events, stage_delta)
            parent_total = summary["parent_total_epsilon"]
            fragment = {
                **result.report,
                "privacy": {**summary, "budget_epsilon": stage_eps, "budget_delta": stage_delta},
                "outputs": outputs,
                "seconds": round(time.perf_counter() - started, 3),
            }
            if parent_total > stage_eps * (1 + 1e-6):
                raise RuntimeError(
                    f"stage {stage} brings its stage's epsilon to {parent_total:.6g} > its budget "
                    f"{stage_eps:.6g}; "
                    "refusing to commit (this is a bug in the stage's calibration)"
                )
            write_json_atomic(marker, fragment)
        privacy = fragment["privacy"]
        Ledger(wh.con).record(
            ctx.config.dataset,
            ctx.run_id,
            stage,
            privacy["charged_epsilon"],
            privacy["charged_delta"],
            events,
        )
    return {"stage": stage, "reused": reused, "epsilon": privacy["epsilon"], "outputs": outputs}


def _charged_summary(
    ctx: RunContext, stage: str, events: list[PrivacyEvent], stage_delta: float
) -> dict[str, Any]:
    """The stage's privacy summary plus what the ledger is charged (``parent_total_epsilon``,
    ``charged_epsilon``, ``charged_delta``).

    ``parent_total_epsilon`` is the stage's composed epsilon at its delta share, together with its
    sibling sub-stages (``dpne.k2`` with ``dpne.k1`` ...): it must fit the stage's calibrated share.
    The ledger is charged the increment of the whole run's composed epsilon (all events committed
    by the run so far, at the run's delta): the charges of a run telescope to its composed total,
    which the joint calibration makes equal to the run's epsilon. The run's delta is charged once,
    by the first stage whose events use delta."""
    summary = _summary(events, stage_delta)
    siblings = _committed_events(ctx, stage, siblings_only=True)
    parent_total = (
        _summary(siblings + list(events), stage_delta)["epsilon"] if siblings else summary["epsilon"]
    )
    earlier = _committed_events(ctx, stage, siblings_only=False)
    run_delta = ctx.config.budget_plan().target.delta
    before = _summary(earlier, run_delta)["epsilon"]
    after = _summary(earlier + list(events), run_delta)["epsilon"]
    used_before, used_after = _uses_delta(earlier), _uses_delta(earlier + list(events))
    return {
        **summary,
        "parent_total_epsilon": parent_total,
        "charged_epsilon": max(0.0, after - before),
        "charged_delta": run_delta if used_after and not used_before else 0.0,
    }


def _uses_delta(events: list[PrivacyEvent]) -> bool:
    """Whether a composition of ``events`` relies on delta (anything but pure-epsilon events)."""
    return any(e.mechanism != "laplace" for e in events)


def _stage_share(config: RunConfig, stage: str) -> Budget:
    """Budget of a stage; sub-stages ``parent.part`` (e.g. ``dpne.k3``) share their parent's."""
    return config.stage_share(stage.split(".", 1)[0])


def _summary(events: list[PrivacyEvent], delta: float) -> dict[str, Any]:
    return Accountant(list(events)).summary(delta) if events else {"epsilon": 0.0, "delta": 0.0}


def _committed_events(ctx: RunContext, stage: str, *, siblings_only: bool) -> list[PrivacyEvent]:
    """Events already committed in this run by other stages (only by ``stage``'s sibling
    sub-stages ``parent.*`` when ``siblings_only``)."""
    parent = stage.split(".", 1)[0]
    events: list[PrivacyEvent] = []
    for name, fragment in read_parts(ctx).items():
        if name == stage or "privacy" not in fragment:
            continue
        if siblings_only and ("." not in stage or name.split(".", 1)[0] != parent):
            continue
        events.extend(PrivacyEvent(**e) for e in fragment["privacy"].get("events", []))
    return events
