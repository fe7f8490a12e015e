"""Charging the privacy budget: :func:`spend_once`, the only way a stage spends.

A stage hands :func:`spend_once` a ``compute`` function that draws the noise, writes the stage's
outputs into the staged release and returns its privacy events. The ledger is charged an upper
bound *before* the first random draw (a ``pending`` entry, in one transaction with the dataset's
lifetime check), the noisy output and the stage's report part (its events, the composed (ε, δ)
and what the ledger is charged) are persisted, and the entry is then finalized to the exact
charge: a crash can only over-charge. A stage that fails before its first draw (e.g. out of memory
in its SQL; selection salts do not count as draws) is not charged and can be resumed. A retried
stage reloads its persisted output; a stage whose noise was drawn but whose output is incomplete is
refused, never drawn again (docs/faults.md). A
sub-stage ``parent.part`` (e.g. ``dpne.k3``) shares its parent's budget; a charge that would take
the stage's composed ε past its (calibrated) share is refused. What the ledger is charged is the
increment of the run's composed ε that the stage's events add to the events already committed by
the run, so a run's ledger total is its composed total (docs/accounting.md, "Joint calibration"
and "What the ledger is charged").

Owns: :func:`spend_once` (charge-before-draw, persist, finalize; the per-stage ledger charge).
Imports: dpngram.release (layout, context, identity, ledger), dpngram.engines, dpngram.config,
dpngram.core.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpngram.config import RunConfig
from dpngram.core.accounting import Accountant, PrivacyEvent
from dpngram.core.budget import Budget
from dpngram.core.errors import ResourceExhausted, ResumeError
from dpngram.core.noise import before_first_draw
from dpngram.engines.base import Engine, resource_failure
from dpngram.release.context import RunContext, StageResult, read_parts, write_part
from dpngram.release.identity import verify_staging
from dpngram.release.layout import PARTS_DIR
from dpngram.release.ledger import Ledger


def spend_once(
    ctx: RunContext,
    stage: str,
    outputs: list[str],
    compute: Callable[[Engine], StageResult],
    *,
    engine: bool = False,
) -> dict[str, Any]:
    """Run a privacy-spending stage at most once per run, and never draw its noise twice.

    ``engine=True``: ``compute`` receives the configured engine (:meth:`RunContext.engine`: DuckDB
    or Spark) instead of the run's DuckDB warehouse; the ledger is its own store either way
    (:meth:`RunContext.ledger`).

    ``compute`` draws the noise, writes every file named in ``outputs`` (relative to the release,
    via :meth:`Release.writing`) and returns its events. In this order:

    1. just before ``compute``'s first random draw (:func:`~dpngram.core.noise.before_first_draw`:
       any noise, or :meth:`~dpngram.core.noise.NoiseSource.salt`; not a
       :meth:`~dpngram.core.noise.NoiseSource.selection_salt`), the ledger is charged an upper
       bound (:func:`_pending_bound`) as a ``pending`` entry, in one transaction with the
       dataset's lifetime check;
    2. ``compute`` draws and writes the outputs; then the stage's marker (events + report
       fragment) is written;
    3. the ledger entry is finalized to the exact charge.

    A crash anywhere leaves at most an over-charge. On a retry: marker and every output present
    -> reused (nothing recomputed; the entry is finalized idempotently); the ledger has an entry
    but an output or the marker is missing -> the noise was drawn and the draw is not (fully)
    persisted, so the stage is refused (:class:`~dpngram.core.errors.ResumeError`) rather than
    drawn again; no entry -> the stage never drew, and runs.

    A resource failure in ``compute`` (out of memory or disk, :func:`resource_failure`) is raised
    as :class:`~dpngram.core.errors.ResourceExhausted`, saying whether the stage was charged: not
    charged (it failed before its first draw, e.g. in the heavy SQL) -> resume with the same run id
    and more memory; charged -> the stage cannot be resumed.
    """
    release = ctx.release
    marker = release.path(PARTS_DIR, f"{stage}.json")
    dataset, run_id = ctx.config.dataset, ctx.run_id
    with ctx.ledger() as ledger, ctx.engine() if engine else ctx.warehouse() as wh:
        # reuse is driven by the staged files: they must be this run's, registered in this ledger
        verify_staging(release, ledger)
        reused = marker.exists() and all((release.root / o).exists() for o in outputs)
        if reused:
            fragment = json.loads(marker.read_text(encoding="utf-8"))
            events = [PrivacyEvent(**e) for e in fragment["privacy"]["events"]]
        else:
            result = _charge_then_compute(ctx, ledger, stage, lambda: compute(wh))
            events = result.events
            fragment = _persist(ctx, stage, outputs, result, marker)
        privacy = fragment["privacy"]
        ledger.finalize(dataset, run_id, stage, privacy["charged_epsilon"], privacy["charged_delta"], events)
    return {
        "stage": stage,
        "reused": reused,
        "epsilon": privacy["epsilon"],
        "charged_epsilon": privacy["charged_epsilon"],
        "outputs": outputs,
    }


def _charge_then_compute(
    ctx: RunContext, ledger: Ledger, stage: str, compute: Callable[[], StageResult]
) -> StageResult:
    """Steps 1 and 2 of :func:`spend_once` for a stage with no persisted output: refuse it if the
    ledger already has its entry (its noise was drawn before a crash), else run ``compute`` with
    the ledger charged the pending bound just before its first random draw. A resource failure is
    raised as :class:`~dpngram.core.errors.ResourceExhausted`, saying whether that charge was made."""
    dataset, run_id = ctx.config.dataset, ctx.run_id
    if ledger.entry(dataset, run_id, stage) is not None:
        raise ResumeError(
            f"stage {stage} of run '{run_id}' drew its noise before a crash but its output is "
            "incomplete; it is not drawn again (the ledger keeps its charge): start a new run "
            "with a new --run-id"
        )
    bound = _pending_bound(ctx, ledger)
    charged = False

    def charge_before_drawing() -> None:
        nonlocal charged
        ledger.charge_pending(dataset, run_id, stage, bound)
        charged = True

    try:
        with before_first_draw(charge_before_drawing):
            return compute()
    except Exception as err:
        resource = resource_failure(err)
        if resource is None:
            raise
        # Out of memory/disk: say whether the stage was charged (resumable, or not).
        raise ResourceExhausted(stage, run_id, resource, charged=charged) from err


def _persist(
    ctx: RunContext, stage: str, outputs: list[str], result: StageResult, marker: Path
) -> dict[str, Any]:
    """The end of step 2 of :func:`spend_once`: check that ``compute`` wrote every output and that
    the stage's composed epsilon fits its share, then write the stage's marker (its report
    fragment: events, composed (ε, δ), what the ledger is charged) and checkpoint the release.
    Returns the fragment."""
    missing = [o for o in outputs if not (ctx.release.root / o).exists()]
    if missing:
        raise RuntimeError(f"stage {stage} did not write {missing}")
    stage_eps, stage_delta = _stage_share(ctx.config, stage)
    summary = _charged_summary(ctx, stage, result.events, stage_delta)
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
    ctx.checkpoint()  # the noisy output is persisted where every worker finds it
    return fragment


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
