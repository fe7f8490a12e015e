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
import re
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

__all__ = [
    "RunContext",
    "new_run_id",
    "prepare",
    "spend_once",
    "record_part",
    "read_parts",
    "StageResult",
    "run_id_from",
    "public_summary",
    "released_summary",
    "read_timings",
    "stage_timer",
    "publish_run",
    "release_asset_metadata",
    "release_plan",
    "run_release",
]

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
    def engine(self) -> Iterator[Any]:
        """The engine the configuration selects (:func:`pipeline.engine.open_engine`): the DuckDB
        warehouse, or a Spark engine (whose ``.con`` is the DuckDB warehouse, for the ledger).
        The run schema exists in it."""
        if self.config.engine == "duckdb":
            with self.warehouse() as wh:
                yield wh
            return
        from pipeline.engine import open_engine

        engine = open_engine(self.config)
        try:
            engine.run_schema(self.run_id)
            yield engine
        finally:
            engine.close()

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
            config.dataset,
            config.epsilon,
            config.delta,
            config.lifetime_epsilon,
            config.lifetime_delta,
            ctx.run_id,
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
            summary = {
                **summary,
                "parent_total_epsilon": parent_total,
                "charged_epsilon": charged_epsilon,
                "charged_delta": charged_delta,
            }
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


def released_summary(
    ctx: RunContext, stage: str, spent: dict[str, Any], outputs: list[str], **extra: Any
) -> dict[str, Any]:
    """The public summary of a privacy-spending stage after :func:`spend_once`: released row
    count of its first output (a released table, so the count is public), epsilon, reuse flag and
    paths. ``extra`` adds public identifiers such as ``k`` or ``method``."""
    import pyarrow.parquet as pq

    paths = [ctx.release.root / o for o in outputs]
    return {
        "stage": stage,
        **extra,
        "released_rows": pq.ParquetFile(paths[0]).metadata.num_rows,
        "epsilon": spent["epsilon"],
        "reused": spent["reused"],
        "paths": [str(p) for p in paths],
    }


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


# ----------------------------------------------------------------------------------------------
# Orchestration helpers shared by the CLI and the Airflow DAG (appended; see pipeline/cli.py and
# dags/dpngram_release.py)
# ----------------------------------------------------------------------------------------------
TIMINGS_DIR = "report.timings"  # wall-clock seconds per stage, merged into report.json

#: Keys of a stage's return value that may go to logs and Airflow XCom: identifiers, paths, row
#: counts of released tables and epsilon/delta. Anything else a stage returns is dropped.
PUBLIC_SUMMARY_KEYS = (
    "stage",
    "k",
    "method",
    "run_id",
    "released_rows",
    "epsilon",
    "delta",
    "paths",
    "outputs",
    "skipped",
    "reused",
    "ok",
    "success",
    "path",
)


def run_id_from(external_id: str) -> str:
    """A run id usable as a directory and schema name from an external id (e.g. Airflow's
    ``manual__2026-01-01T00:00:00+00:00`` -> ``manual__2026-01-01T00_00_00_00_00``)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]", "_", external_id).strip("._-")[:128]
    if not cleaned:
        raise ConfigError(f"run_id: cannot derive a run id from {external_id!r}")
    return cleaned


def public_summary(result: dict[str, Any] | None) -> dict[str, Any]:
    """The part of a stage's return value that is safe for XCom/logs (:data:`PUBLIC_SUMMARY_KEYS`)."""
    return {k: v for k, v in (result or {}).items() if k in PUBLIC_SUMMARY_KEYS}


def read_timings(ctx: RunContext) -> dict[str, float]:
    timings_dir = ctx.release.root / TIMINGS_DIR
    if not timings_dir.is_dir():
        return {}
    out = {}
    for path in sorted(timings_dir.glob("*.json"), key=lambda p: p.stat().st_mtime):
        out[path.stem] = float(json.loads(path.read_text(encoding="utf-8"))["seconds"])
    return out


@contextmanager
def stage_timer(ctx: RunContext, stage: str) -> Iterator[None]:
    """Record the wall-clock time of a stage in the staged release (only when it succeeds)."""
    started = time.perf_counter()
    yield
    write_json_atomic(
        ctx.release.path(TIMINGS_DIR, f"{stage}.json"), {"seconds": round(time.perf_counter() - started, 3)}
    )


def publish_run(ctx: RunContext) -> Path:
    """Publish the staged release (atomic rename, then swap ``OUT/latest``).

    Refused unless the run passed validation (report part 'validation' with success) and its
    report was written: a run that failed anywhere before stays staged and unpublished, and
    ``latest`` keeps pointing at the previous release."""
    release = ctx.release
    if release.published:
        return release.publish()  # idempotent: a retried publish re-points latest
    validation = read_parts(ctx).get("validation")
    if not validation or validation.get("success") is not True:
        raise RuntimeError(
            f"run {ctx.run_id} has not passed validation; refusing to publish (staged in {release.staging})"
        )
    if not (release.staging / "report.json").is_file():
        raise RuntimeError(f"run {ctx.run_id} has no report.json; write the report before publishing")
    return release.publish()


def release_asset_metadata(release: Path) -> dict[str, Any]:
    """Public metadata of a published release, for downstream consumers (the ``extra`` of the
    Airflow asset events emitted by ``dags/dpngram_release.py``).

    Read only from the release's ``report.json`` (itself public: DP values, released row counts
    and parameters) and the file tree; never from the warehouse. Returns ``{"release": {...},
    "ngrams": {...}, "language_model": {...} | None}``; each holds run_id, dataset, the run's
    composed epsilon and its delta, what the ledger was charged, and absolute paths. The model
    entry is None when the run built no model."""
    release = Path(release).resolve()
    report = json.loads((release / "report.json").read_text(encoding="utf-8"))
    privacy = report.get("privacy", {})
    charged = privacy.get("ledger_charged", {})
    released = report.get("released", {})
    common = {
        "run_id": report.get("run_id", release.name),
        "dataset": report.get("dataset"),
        "epsilon": privacy.get("total", {}).get("epsilon"),
        "delta": privacy.get("delta"),
        "epsilon_budget": privacy.get("epsilon_budget"),
        "ledger_epsilon": charged.get("epsilon"),
        "ledger_delta": charged.get("delta"),
        "release": str(release),
        "report": str(release / "report.json"),
    }
    tables = {name: t.get("rows") for name, t in released.get("tables", {}).items() if "/" not in name}
    release_meta = {**common, "released_rows": tables}
    ngram_paths = {
        name: str(release / "released" / f"{name}.parquet")
        for name in ("vocabulary", "kgrams")
        if (release / "released" / f"{name}.parquet").is_file()
    }
    ngrams = {
        **common,
        "ngrams_per_k": released.get("ngrams_per_k", {}),
        "released_rows": {name: tables.get(name) for name in ngram_paths},
        "paths": ngram_paths,
    }
    model = report.get("model") or {}
    model_paths = {name: release / rel for name, rel in (model.get("paths") or {}).items()}
    language_model = None
    if model_paths.get("binary") is not None and model_paths["binary"].is_file():
        language_model = {
            **common,
            "order": model.get("order"),
            "route": model.get("route"),
            "ngram_counts": model.get("counts", {}),
            "paths": {name: str(p) for name, p in model_paths.items() if p.is_file()},
        }
    return {"release": release_meta, "ngrams": ngrams, "language_model": language_model}


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
    from pipeline import dpne, dpsu, ingest, report, validate

    plan: list[tuple[str, StageFn]] = [("ingest", lambda ctx: ingest.run_ingest(ctx, ingest_progress))]
    if getattr(config, "vocabulary_method", "dpsu") in ("triehh", "both"):  # LDP TrieHH words for S_1
        from pipeline import triehh

        plan.append(("triehh", triehh.run_triehh))
    if baseline is None:
        plan.append(("vocabulary", dpsu.run_vocabulary))
        for k in range(2, config.max_n + 1):
            plan.append((f"dpne_level_{k}", lambda ctx, k=k: dpne.run_level(ctx, k)))
        if config.max_n >= 2:
            plan.append(("kgrams", dpne.finalize_kgrams))
    else:
        plan.append((f"baseline_{baseline}", lambda ctx: dpne.run_baseline(ctx, baseline, baseline_k)))
    if "lm_counts" in config.stage_budget:  # noisy n-gram counts + mixture weight for the LM
        from pipeline import lm_counts

        plan.append(("lm_counts", lm_counts.run_lm_counts))
    if "bayes" in config.stage_budget:
        from pipeline import bayes

        plan.append(("bayes", bayes.run_bayes))
    if "synth" in config.stage_budget:
        from pipeline import synth

        plan.append(("synth", synth.run_synth))
    plan.append(("validate", validate.validate_run))
    from lm.build import lm_enabled

    if lm_enabled(config):  # language model from the released DP artifacts (post-processing)
        from lm.build import run_lm

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
