"""Charging the privacy budget: :func:`spend_once`, the only way a stage spends.

A stage hands :func:`spend_once` a ``compute`` function that draws the noise, writes the stage's
outputs into the staged release and returns its privacy events. The ledger is charged an upper
bound *before* the first random draw (a ``pending`` entry, in one transaction with the dataset's
lifetime check), the noisy output and the stage's report part (its events, the composed (ε, δ)
and what the ledger is charged) are persisted, and the entry is then finalized to the exact
charge: a crash can only over-charge. A retried stage reloads its persisted output; a stage whose
noise was drawn but whose output is incomplete is refused, never drawn again (docs/faults.md). A
sub-stage ``parent.part`` (e.g. ``dpne.k3``) shares its parent's budget and is charged only the
increment of the parent's composed ε, so the ledger sum over the sub-stages is the exact
composition (docs/accounting.md, docs/orchestration.md). A charge that would exceed the stage's
share is refused.

Owns: :func:`spend_once` (charge-before-draw, persist, finalize; the per-stage ledger charge).
Imports: dpngram.release (layout, context, ledger), dpngram.engines, dpngram.config, dpngram.core.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dpngram.config import RunConfig
from dpngram.core.accounting import Accountant, PrivacyEvent
from dpngram.core.budget import Budget
from dpngram.core.errors import ResumeError
from dpngram.core.noise import before_first_draw
from dpngram.engines.duckdb import Warehouse
from dpngram.release.context import RunContext, StageResult, read_parts, write_part
from dpngram.release.layout import PARTS_DIR
from dpngram.release.ledger import Ledger


def spend_once(
    ctx: RunContext,
    stage: str,
    outputs: list[str],
    compute: Callable[[Warehouse], StageResult],
    *,
    engine: bool = False,
) -> dict[str, Any]:
    """Run a privacy-spending stage at most once per run, and never draw its noise twice.

    ``engine=True``: ``compute`` receives the configured engine (:meth:`RunContext.engine`: DuckDB
    or Spark) instead of the DuckDB warehouse; the ledger is in the DuckDB file either way.

    ``compute`` draws the noise, writes every file named in ``outputs`` (relative to the release,
    via :meth:`Release.writing`) and returns its events. In this order:

    1. just before ``compute``'s first random draw (:func:`~dpngram.core.noise.before_first_draw`),
       the ledger is charged an upper bound (:func:`_pending_bound`) as a ``pending`` entry, in
       one transaction with the dataset's lifetime check;
    2. ``compute`` draws and writes the outputs; then the stage's marker (events + report
       fragment) is written;
    3. the ledger entry is finalized to the exact charge.

    A crash anywhere leaves at most an over-charge. On a retry: marker and every output present
    -> reused (nothing recomputed; the entry is finalized idempotently); the ledger has an entry
    but an output or the marker is missing -> the noise was drawn and the draw is not (fully)
    persisted, so the stage is refused (:class:`~dpngram.core.errors.ResumeError`) rather than
    drawn again; no entry -> the stage never drew, and runs.
    """
    release = ctx.release
    marker = release.path(PARTS_DIR, f"{stage}.json")
    dataset, run_id = ctx.config.dataset, ctx.run_id
    with ctx.engine() if engine else ctx.warehouse() as wh:
        ledger = Ledger(wh.con)
        reused = marker.exists() and all((release.root / o).exists() for o in outputs)
        if reused:
            fragment = json.loads(marker.read_text(encoding="utf-8"))
            events = [PrivacyEvent(**e) for e in fragment["privacy"]["events"]]
        else:
            if ledger.entry(dataset, run_id, stage) is not None:
                raise ResumeError(
                    f"stage {stage} of run '{run_id}' drew its noise before a crash but its output is "
                    "incomplete; it is not drawn again (the ledger keeps its charge): start a new run "
                    "with a new --run-id"
                )
            bound = _pending_bound(ctx, ledger)

            def charge_before_drawing() -> None:
                # A connection of its own: compute may hold an open result on wh.con.
                Ledger(wh.con.cursor()).charge_pending(dataset, run_id, stage, bound)

            with before_first_draw(charge_before_drawing):
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
            }
            if parent_total > stage_eps * (1 + 1e-6):
                raise RuntimeError(
                    f"stage {stage} brings its stage's epsilon to {parent_total:.6g} > its budget "
                    f"{stage_eps:.6g}; "
                    "refusing to commit (this is a bug in the stage's calibration)"
                )
            write_part(ctx, marker, stage, fragment)
        privacy = fragment["privacy"]
        ledger.finalize(dataset, run_id, stage, privacy["charged_epsilon"], privacy["charged_delta"], events)
    return {"stage": stage, "reused": reused, "epsilon": privacy["epsilon"], "outputs": outputs}


def _pending_bound(ctx: RunContext, ledger: Ledger) -> Budget:
    """What the ledger is charged before a stage draws: an upper bound on its final charge.

    The run's budget minus what this run has charged so far. Every stage's charge fits in it:
    a stage's composed epsilon may not exceed its share (refused below), sub-stages are charged
    increments that telescope to their parent's composed epsilon, and the shares sum to at most
    the run's budget; so the run's charges sum to at most its (epsilon, delta). The bound also
    equals what the run has reserved (:meth:`Ledger.open_run`), so it never trips the lifetime
    check of a run that passed ``prepare``. A pending entry that is never finalized (a crash)
    thus over-charges, never under-charges."""
    charged = ledger.spent(ctx.config.dataset, ctx.run_id)
    return Budget(max(0.0, ctx.config.epsilon - charged.epsilon), max(0.0, ctx.config.delta - charged.delta))


def _charged_summary(
    ctx: RunContext, stage: str, events: list[PrivacyEvent], stage_delta: float
) -> dict[str, Any]:
    """The stage's privacy summary plus what the ledger is charged (``parent_total_epsilon``,
    ``charged_epsilon``, ``charged_delta``)."""
    earlier = _earlier_sibling_events(ctx, stage)
    summary = _summary(events, stage_delta)
    # What the ledger is charged. A sub-stage (e.g. one DPNE level) is charged only the
    # increment of its parent's composed epsilon, so the ledger sum over the parent's
    # sub-stages telescopes to the exact composition; the parent's delta is charged once,
    # by its first sub-stage.
    parent_total = summary["epsilon"]
    # A stage whose events are all pure-epsilon (Laplace) is charged (sum of epsilons, 0):
    # its composed epsilon at delta > 0 may be smaller, but that one needs the delta.
    uses_delta = any(e.mechanism != "laplace" for e in events)
    if uses_delta or not events:
        charged_epsilon, charged_delta = summary["epsilon"], stage_delta if events else 0.0
    else:
        charged_epsilon, charged_delta = sum(e.epsilon * e.count for e in events), 0.0
    if earlier:
        before = _summary(earlier, stage_delta)["epsilon"]
        parent_total = _summary(earlier + list(events), stage_delta)["epsilon"]
        charged_epsilon, charged_delta = max(0.0, parent_total - before), 0.0
    return {
        **summary,
        "parent_total_epsilon": parent_total,
        "charged_epsilon": charged_epsilon,
        "charged_delta": charged_delta,
    }


def _stage_share(config: RunConfig, stage: str) -> Budget:
    """Budget of a stage; sub-stages ``parent.part`` (e.g. ``dpne.k3``) share their parent's."""
    return config.stage_share(stage.split(".", 1)[0])


def _summary(events: list[PrivacyEvent], delta: float) -> dict[str, Any]:
    return Accountant(list(events)).summary(delta) if events else {"epsilon": 0.0, "delta": 0.0}


def _earlier_sibling_events(ctx: RunContext, stage: str) -> list[PrivacyEvent]:
    """Events already committed by sibling sub-stages (``parent.*``) of ``stage`` in this run."""
    if "." not in stage:
        return []
    parent = stage.split(".", 1)[0]
    events: list[PrivacyEvent] = []
    for name, fragment in read_parts(ctx).items():
        if name != stage and name.split(".", 1)[0] == parent and "privacy" in fragment:
            events.extend(PrivacyEvent(**e) for e in fragment["privacy"].get("events", []))
    return events
