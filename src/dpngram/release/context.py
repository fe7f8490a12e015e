"""A run's context: where one run keeps its state, and what a stage records or returns.

:class:`RunContext` ties a validated :class:`~dpngram.config.RunConfig` (with its run id) to the
run's private schema, its staged :class:`~dpngram.release.layout.Release` and the engine or DuckDB
warehouse it opens. A stage records its report part (:func:`record_part`, merged into report.json
by the ``report`` step through :func:`read_parts`) in the staged release, and its wall-clock time
(:func:`stage_timer`, :func:`read_timings`) in the run's operator directory, outside the release
(:func:`operator_path`). What a stage returns goes to logs and Airflow XCom
only through :func:`public_summary`, which keeps the keys of :data:`PUBLIC_SUMMARY_KEYS`
(identifiers, paths, row counts of released tables, ε/δ); :func:`released_summary` builds that
summary for a privacy-spending stage. :class:`StageResult` is what a stage's ``compute`` hands to
:func:`dpngram.release.spend.spend_once`.

Owns: :class:`RunContext`, :class:`StageResult`, run ids, report parts (and the privacy events they
record), stage timings, public summaries.
Imports: dpngram.release.layout, dpngram.engines, dpngram.config, dpngram.core; pyarrow.
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
from typing import TYPE_CHECKING, Any

from dpngram.config import RunConfig
from dpngram.core.accounting import PrivacyEvent
from dpngram.core.errors import ConfigError
from dpngram.engines.sql import run_schema_name
from dpngram.release.layout import PARTS_DIR, TIMINGS_DIR, Release, write_json_atomic

if TYPE_CHECKING:  # imported where used: a task that only skips, times or publishes needs neither
    # scipy (accounting) nor duckdb/pyarrow (the warehouse); see docs/orchestration.md
    from dpngram.core.accounting import PrivacyEvent
    from dpngram.engines.duckdb import Warehouse
    from dpngram.release.ledger import Ledger
    from dpngram.release.storage import ObjectRelease


def new_run_id() -> str:
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def with_run_id(config: RunConfig) -> RunConfig:
    """``config`` with its run id fixed: the one it names, or a new one (:func:`new_run_id`). The
    one place a run gets its id (the DAG names it from Airflow's run id,
    :func:`run_id_from`); the CLI fixes it before the run starts, so that it can show a failed
    run's quarantine, and :func:`dpngram.release.publish.prepare` for every other caller."""
    return config if config.run_id else config.with_values(run_id=new_run_id())


def make_release(config: RunConfig, run_id: str) -> Release | ObjectRelease:
    """The release of run ``run_id`` of ``config``'s dataset into ``config.out`` (local or object
    storage)."""
    from dpngram.release.storage import ObjectRelease, is_object_url, local_path

    if is_object_url(config.out):
        assert config.warehouse
        staging = Path(config.warehouse) / "staging" / config.dataset / run_id
        return ObjectRelease(config.out, run_id, config.dataset, staging)
    return Release(local_path(config.out), run_id, config.dataset)


@dataclass
class RunContext:
    """Where one run keeps its state. ``on_checkpoint``: called when a stage has persisted its
    noisy output (:meth:`checkpoint`); a deployment whose workers share no disk pushes the staged
    files to its run store there (:mod:`dpngram.release.run_store`)."""

    config: RunConfig
    on_checkpoint: Callable[[], None] | None = None

    def checkpoint(self) -> None:
        """A stage's noisy output and report part are persisted: make them durable beyond this
        machine, where the deployment asks for it (:attr:`on_checkpoint`)."""
        if self.on_checkpoint is not None:
            self.on_checkpoint()

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
    def release(self) -> Release | ObjectRelease:
        """The run's staged release: under a local ``OUT``, or (``OUT`` on object storage) staged
        in ``WAREHOUSE/staging/DATASET/RUN_ID`` and published by upload
        (:class:`~dpngram.release.storage.ObjectRelease`)."""
        return make_release(self.config, self.run_id)

    def _needs_schema(self) -> bool:
        """Whether opening the warehouse creates the run schema: not for a published run, whose
        schema the publish dropped (an empty one would be left behind by every later command
        that opens the warehouse: a re-run with its id, a retried publish task)."""
        return not self.release.published

    @contextmanager
    def ledger(self) -> Iterator[Ledger]:
        """The privacy ledger (:func:`dpngram.release.ledger.open_ledger`: ``DPNGRAM_LEDGER``, set
        by ``--ledger`` and by the DAG from its connection, else the per-user file), closed after."""
        from dpngram.release.ledger import open_ledger

        ledger = open_ledger()
        try:
            yield ledger
        finally:
            ledger.close()

    @contextmanager
    def engine(self) -> Iterator[Any]:
        """The engine the configuration selects (:func:`dpngram.engines.select.open_engine`): the
        run's DuckDB warehouse, or a Spark engine. The run schema exists in it, unless the run is
        published (:meth:`_needs_schema`)."""
        from dpngram.engines.select import open_engine

        engine = open_engine(self.config)
        try:
            if self._needs_schema():
                engine.run_schema(self.run_id)
            yield engine
        finally:
            engine.close()

    @contextmanager
    def warehouse(self, read_only: bool = False) -> Iterator[Warehouse]:
        from dpngram.engines.select import open_warehouse

        wh = open_warehouse(self.config, read_only=read_only)
        try:
            if not read_only and self._needs_schema():
                wh.run_schema(self.run_id)
            yield wh
        finally:
            wh.close()


@dataclass
class StageResult:
    """What a privacy-spending stage computed: its privacy events and a report fragment."""

    events: list[PrivacyEvent]
    report: dict[str, Any]


def is_timing_key(key: str) -> bool:
    """Keys of wall-clock durations (``seconds``, ``tree_seconds``...): operator-only."""
    return key == "seconds" or key.endswith("_seconds")


def write_part(ctx: RunContext, path: Path, stage: str, fragment: dict[str, Any]) -> None:
    """Write a report part to ``path`` without its wall-clock durations: those go to the operator
    directory (``timings/STAGE.KEY.json``), since they grow with the private input's size."""
    for key, value in fragment.items():
        if is_timing_key(key) and isinstance(value, (int, float)):
            name = stage if key == "seconds" else f"{stage}.{key.removesuffix('_seconds')}"
            write_json_atomic(operator_path(ctx, TIMINGS_DIR, f"{name}.json"), {"seconds": float(value)})
    write_json_atomic(path, {k: v for k, v in fragment.items() if not is_timing_key(k)})


def record_part(ctx: RunContext, stage: str, fragment: dict[str, Any]) -> Path:
    """Store a stage's report fragment (JSON) in the staged release (durations: operator dir)."""
    path = ctx.release.path(PARTS_DIR, f"{stage}.json")
    write_part(ctx, path, stage, fragment)
    return path


def read_parts(ctx: RunContext) -> dict[str, dict[str, Any]]:
    parts_dir = ctx.release.root / PARTS_DIR
    if not parts_dir.is_dir():
        return {}
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(parts_dir.glob("*.json"))}


def part_events(part: dict[str, Any]) -> list[PrivacyEvent]:
    """The privacy events a report part recorded (none for a part without a ``privacy`` entry)."""
    return [PrivacyEvent(**e) for e in part.get("privacy", {}).get("events", [])]


def released_summary(
    ctx: RunContext, stage: str, spent: dict[str, Any], outputs: list[str], **extra: Any
) -> dict[str, Any]:
    """The public summary of a privacy-spending stage after :func:`spend_once`: released row
    count of its first output (a released table, so the count is public), epsilon (the stage's own
    events composed alone), charged epsilon (what the stage added to the run's composed total, as in
    the ledger and the final summary), reuse flag and paths. ``extra`` adds public identifiers such
    as ``k`` or ``method``."""
    import pyarrow.parquet as pq

    paths = [ctx.release.root / o for o in outputs]
    return {
        "stage": stage,
        **extra,
        "released_rows": pq.ParquetFile(paths[0]).metadata.num_rows,
        "epsilon": spent["epsilon"],
        "charged_epsilon": spent["charged_epsilon"],
        "reused": spent["reused"],
        "paths": [str(p) for p in paths],
    }


#: Keys of a stage's return value that may go to logs and Airflow XCom: identifiers, paths, row
#: counts of released tables and epsilon/delta. Anything else a stage returns is dropped.
PUBLIC_SUMMARY_KEYS = (
    "stage",
    "k",
    "method",
    "run_id",
    "released_rows",
    "epsilon",
    "charged_epsilon",
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


def operator_path(ctx: RunContext, *parts: str) -> Path:
    """A path in the run's operator directory (outside the release; parents created)."""
    from dpngram.release.identity import operator_dir

    target = operator_dir(ctx.config).joinpath(*parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def read_timings(ctx: RunContext) -> dict[str, float]:
    """Wall-clock seconds per stage (operator-only, from the operator directory)."""
    from dpngram.release.identity import operator_dir

    timings_dir = operator_dir(ctx.config) / TIMINGS_DIR
    if not timings_dir.is_dir():
        return {}
    out = {}
    for path in sorted(timings_dir.glob("*.json"), key=lambda p: p.stat().st_mtime):
        out[path.stem] = float(json.loads(path.read_text(encoding="utf-8"))["seconds"])
    return out


@contextmanager
def stage_timer(ctx: RunContext, stage: str) -> Iterator[None]:
    """Record the wall-clock time of a stage (only when it succeeds) in the run's operator
    directory: timings grow with the private input's size, so they are never published."""
    started = time.perf_counter()
    yield
    write_json_atomic(
        operator_path(ctx, TIMINGS_DIR, f"{stage}.json"), {"seconds": round(time.perf_counter() - started, 3)}
    )
