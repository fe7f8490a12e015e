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

import datetime as _dt
import json
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.accounting import Accountant, Ledger, PrivacyEvent
from pipeline.config import ConfigError, RunConfig
from pipeline.store import Release, Warehouse, run_schema_name, write_json_atomic

__all__ = ["RunContext", "new_run_id", "prepare", "spend_once", "record_part", "read_parts", "StageResult"]

PARTS_DIR = "report.parts"  # per-stage report fragments, merged into report.json by pipeline.report


def new_run_id() -> str:
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


@dataclass
class RunContext:
    """Where one run keeps its state."""

    config: RunConfig

    def __post_init__(self) -> None:
        if not self.config.run_id:
            raise ConfigError("run_id: is required once a run has started (call prepare() first)")

    @property
    def run_id(self) -> str:
        assert self.config.run_id
        return self.config.run_id

    @property
    def schema(self) -> str:
        return run_schema_name(self.run_id)

    @property
    def release(self) -> Release:
        return Release(self.config.out, self.run_id)

    @contextmanager
    def warehouse(self, read_only: bool = False) -> Iterator[Warehouse]:
        wh = Warehouse(
            self.config.warehouse,
            memory_limit=self.config.memory_limit,
            threads=self.config.threads,
            read_only=read_only,
        )
        try:
            if not read_only:
                wh.run_schema(self.run_id)
            yield wh
        finally:
            wh.close()


@dataclass
class StageResult:
    """What a privacy-spending stage computed: its privacy events and a report fragment."""

    events: list[PrivacyEvent]
    report: dict[str, Any]


def prepare(config: RunConfig) -> RunConfig:
    """Fix the run id, refuse a run that would exceed the dataset's lifetime budget (before any
    data is read), and create the staging directory with the run's parameters."""
    if not config.run_id:
        config = config.model_copy(update={"run_id": new_run_id()})
    ctx = RunContext(config)
    if ctx.release.published:
        raise ConfigError(f"run_id: run '{ctx.run_id}' is already published in {ctx.release.final}")
    with ctx.warehouse() as wh:
        Ledger(wh.con).check(
            config.dataset, config.epsilon, config.delta, config.lifetime_epsilon, config.lifetime_delta, ctx.run_id
        )
    record_part(ctx, "parameters", {"parameters": json.loads(config.to_json()), "run_id": ctx.run_id})
    return config


def record_part(ctx: RunContext, stage: str, fragment: dict[str, Any]) -> Path:
    """Store a stage's report fragment (JSON) in the staged release."""
    path = ctx.release.path(PARTS_DIR, f"{stage}.json")
    write_json_atomic(path, fragment)
    return path


def read_parts(ctx: RunContext) -> dict[str, dict[str, Any]]:
    parts_dir = ctx.release.root / PARTS_DIR
    if not parts_dir.is_dir():
        return {}
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(parts_dir.glob("*.json"))}


def spend_once(
    ctx: RunContext,
    stage: str,
    outputs: list[str],
    compute: Callable[[Warehouse], StageResult],
) -> dict[str, Any]:
    """Run a privacy-spending stage at most once per run.

    ``compute`` draws the noise, writes every file named in ``outputs`` (relative to the release,
    via :meth:`Release.writing`) and returns its events. Then, in this order: the stage's
    marker (events + report fragment) is written, and the spend is committed to the ledger.
    If the marker and all outputs already exist (a retry), nothing is recomputed; the ledger entry
    is (re)committed idempotently.
    """
    release = ctx.release
    marker = release.path(PARTS_DIR, f"{stage}.json")
    started = time.perf_counter()
    with ctx.warehouse() as wh:
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
            earlier = _earlier_sibling_events(ctx, stage)
            summary = _summary(events, stage_delta)
            if earlier:  # sub-stage (e.g. one DPNE level): charge only the increment of the composition
                before = _summary(earlier, stage_delta)["epsilon"]
                total = _summary(earlier + list(events), stage_delta)
                summary = {**summary, "parent_total_epsilon": total["epsilon"],
                           "incremental_epsilon": total["epsilon"] - before}
            fragment = {
                **result.report,
                "privacy": {**summary, "budget_epsilon": stage_eps, "budget_delta": stage_delta},
                "outputs": outputs,
                "seconds": round(time.perf_counter() - started, 3),
            }
            if summary["epsilon"] > stage_eps * (1 + 1e-6):
                raise RuntimeError(
                    f"stage {stage} spent epsilon={summary['epsilon']:.6g} > its budget {stage_eps:.6g}; "
                    "refusing to commit (this is a bug in the stage's calibration)"
                )
            write_json_atomic(marker, fragment)
        privacy = fragment["privacy"]
        charged = privacy.get("incremental_epsilon", privacy["epsilon"])
        charged_delta = privacy.get("budget_delta", 0.0) if "." not in stage or not privacy.get(
            "incremental_epsilon") else 0.0
        Ledger(wh.con).record(ctx.config.dataset, ctx.run_id, stage, charged, charged_delta, events)
    return {"stage": stage, "reused": reused, "epsilon": privacy["epsilon"], "outputs": outputs}


def _stage_share(config: RunConfig, stage: str) -> tuple[float, float]:
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
