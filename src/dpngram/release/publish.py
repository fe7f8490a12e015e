"""Before and after the steps of a release: the privacy pre-check, publishing, asset metadata.

:func:`prepare` (Airflow task ``privacy_precheck``) fixes the run id, refuses a run that would take
the dataset past its lifetime budget before any data is read, and records the run's parameters in
the staged release. :func:`publish_run` (task ``publish``) publishes the staged release atomically,
and only if the ``validation`` step passed and the report was written; otherwise the run stays
staged and ``latest`` keeps pointing at the previous release. :func:`release_asset_metadata` reads
the public facts of a published release (from its report.json and file tree) for the Airflow
asset events.

Owns: :func:`input_problem` and :func:`public_problem` (the one check of the input paths, for
the CLI, the DAG's pre-check and the stages), :func:`prepare`, :func:`publish_run`,
:func:`complete_publishes` (an interrupted publish is completed by the next command),
:func:`drop_private_tables` (a published run's private tables go), :func:`release_asset_metadata`.
Imports: dpngram.release (context, ledger), dpngram.engines (base, duckdb, sql; spark's default path),
dpngram.config, dpngram.core.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from dpngram.config import RunConfig
from dpngram.config.budget_plan import reads_public_corpus
from dpngram.core.errors import ConfigError
from dpngram.engines.base import is_remote_path
from dpngram.engines.duckdb import drop_run_schema
from dpngram.engines.sql import run_schema_name
from dpngram.release.context import RunContext, read_parts, record_part, with_run_id
from dpngram.release.layout import LegacyLayoutError, Release, check_out_layout, write_json_atomic
from dpngram.release.ledger import Ledger

#: Parameters holding paths of the operator's machine: withheld from the published report (they are
#: in the operator file, :func:`dpngram.release.identity.operator_dir`).
PATH_PARAMETERS = (
    "input",
    "out",
    "warehouse",
    "public",
    "known_vocabulary",
    "lm_eval_text",
    "spark_warehouse",
)
WITHHELD = "withheld (operator file)"


def input_problem(config: RunConfig) -> str | None:
    """Why the run's input cannot be read, decided from the path alone (no data is read): a local
    input that does not exist, or a Hadoop-style URI without the Spark engine. None when it may be
    read. The DAG's ``privacy_precheck`` and the CLI refuse on it before anything is reserved."""
    if is_remote_path(config.input):
        if config.engine.name != "spark":
            return f"input: {config.input} is a Hadoop-style URI; only the Spark engine reads those"
        return None
    if not Path(str(config.input).removeprefix("file://")).exists():
        return f"input: {config.input} does not exist"
    return None


def public_problem(config: RunConfig) -> str | None:
    """Why the run's public corpus cannot be read (it is given but is not a file), or None."""
    if config.public and not Path(config.public).is_file():
        return f"public: {config.public} does not exist or is not a file"
    return None


def published_parameters(config: RunConfig) -> dict[str, Any]:
    """The run's parameters as the report publishes them: paths withheld."""
    flat = json.loads(config.to_json())
    return {k: (WITHHELD if k in PATH_PARAMETERS and v is not None else v) for k, v in flat.items()}


class AlreadyPublished(ConfigError):
    """A run id that is already published. ``completed``: its publish had been interrupted (a kill
    between the rename and the ``latest`` swap) and was completed now."""

    def __init__(self, message: str, path: Path, completed: bool) -> None:
        super().__init__(message)
        self.path, self.completed = path, completed


def prepare(config: RunConfig, *, reserve: bool = True) -> RunConfig:
    """Fix the run id, register the run's identity and reserve its budget, and create the staging
    directory with the run's identity and parameters; all before any private data is read.

    In this order, so that a refusal reserves nothing: the run id's registration in the warehouse
    (:meth:`Ledger.run`) must have the same fingerprint (parameters and input,
    :mod:`dpngram.release.identity`) and staging directory, else a one-line
    :class:`~dpngram.core.errors.ResumeError` names what changed; an existing staging directory must
    carry this warehouse's identity and the run's registered fingerprint
    (:func:`~dpngram.release.identity.check_staging`), a new one gets it (an OUT that cannot be
    written is refused here); then, in one ledger transaction (:meth:`Ledger.open_run`), the run's
    (ε, δ) is reserved against the dataset's lifetime budget (stored per dataset; a run's
    ``lifetime_*`` flags set it the first time), else a one-line
    :class:`~dpngram.core.errors.BudgetError`. A failure after the reservation releases it (the run
    has drawn nothing). ``reserve=False`` (``dpngram ingest``: a run that spends nothing) reserves
    nothing.

    A run id that is already published is refused (:class:`AlreadyPublished`); if its publish had
    been interrupted (the ledger still has it open), the publish is completed first."""
    from dpngram.core.budget import Budget
    from dpngram.release.identity import (
        check_staging,
        compare,
        fingerprint,
        operator_dir,
        staging_token,
        write_staging_token,
    )

    config = with_run_id(config)
    try:
        check_out_layout(config.out)  # an OUT of the old shared layout: refused, nothing reserved
    except LegacyLayoutError as err:
        raise ConfigError(str(err)) from None
    # the stages that read the public corpus would fail only after earlier stages have spent budget
    if reads_public_corpus(config) and (problem := public_problem(config)) is not None:
        raise ConfigError(problem)
    ctx = RunContext(config)
    release = ctx.release
    identity = fingerprint(config)
    staging = str(release.staging.resolve())
    with ctx.warehouse() as wh:
        ledger = Ledger(wh.con)
        if release.published:
            completed = complete_publish(release, ledger) if _open_in(ledger, ctx.run_id) else False
            note = " (its interrupted publish was completed now)" if completed else ""
            raise AlreadyPublished(
                f"run_id: run '{ctx.run_id}' is already published in {release.final}{note}",
                release.final,
                completed,
            )
        complete_publishes(ledger, out=release.out_dir)
        existing = ledger.run(ctx.run_id)
        if existing is not None:
            compare(existing["fingerprint"], identity)  # the dataset is a parameter too
        registered = existing["fingerprint"] if existing is not None else identity
        token = staging_token(ctx.run_id, registered, ledger.warehouse_identity())
        created = not check_staging(release, token, config.warehouse)
        if created:
            try:
                write_staging_token(release, token)
            except OSError as err:
                raise ConfigError(
                    f"out: cannot create the staging directory {release.staging} (--out {config.out}): "
                    f"{err.strerror or type(err).__name__}; nothing was reserved: remove it or choose "
                    "another path"
                ) from None
        try:
            ledger.open_run(
                config.dataset,
                ctx.run_id,
                identity,
                config.budget if reserve else Budget(0.0, 0.0),
                config.lifetime_epsilon,
                config.lifetime_delta,
                compare=compare,
                staging=staging,
            )
        except BaseException:
            if created:  # nothing was staged: leave no directory behind
                shutil.rmtree(release.staging, ignore_errors=True)
            raise
        try:
            operator = operator_dir(config)
            write_json_atomic(
                operator / "run.json", {"run_id": ctx.run_id, "fingerprint": identity, "staging": staging}
            )
            record_part(ctx, "parameters", {"parameters": published_parameters(config), "run_id": ctx.run_id})
        except BaseException as err:
            if ledger.suspend_if_unspent(ctx.run_id):
                err.add_note(f"run '{ctx.run_id}' spent nothing: its budget reservation was released")
            raise
    return config


def _open_in(ledger: Ledger, run_id: str) -> bool:
    run = ledger.run(run_id)
    return run is not None and run["state"] != "closed"


def complete_publish(release: Release, ledger: Ledger) -> bool:
    """Finish an interrupted publish of a renamed release: point ``latest`` at it unless a newer
    release is ``latest`` (:meth:`Release.publish`), then close its ledger run (its reservation is
    released; its charges stay), and drop its private DuckDB schema (:func:`drop_private_tables`).
    Idempotent. Returns whether the run was still open."""
    was_open = _open_in(ledger, release.run_id)
    release.publish()
    ledger.close_run(release.run_id)
    drop_private_tables(ledger, release.run_id)
    return was_open


def complete_publishes(ledger: Ledger, out: Path | None = None) -> list[Path]:
    """Complete every interrupted publish this warehouse knows of (in ``out`` only, when given): a
    run not closed in the ledger whose staging directory was already renamed to its release. A
    renamed release is complete (validation passed, report written, temporary files removed before
    the rename), so completing it is always right; there is nothing to roll back. Returns the
    releases completed."""
    done = []
    for run in ledger.open_runs():
        if not run["staging"]:
            continue
        staging = Path(run["staging"])  # OUT/DATASET/runs/RUN_ID.staging
        try:
            release = Release(staging.parent.parent.parent, run["run_id"], run["dataset"])
        except ValueError:
            continue
        if release.staging != staging:
            continue  # registered in another layout (an older dpngram): not completed here
        if out is not None and release.out_dir.resolve() != Path(out).resolve():
            continue
        if release.published:
            complete_publish(release, ledger)
            done.append(release.final)
    return done


def publish_run(ctx: RunContext) -> Path:
    """Publish the staged release (atomic rename, then swap ``OUT/DATASET/latest``), then close the run in
    the ledger (its reservation is released; its charges stay) and drop its private tables
    (:func:`drop_private_tables`).

    Refused unless the run passed validation (report part 'validation' with success) and its
    report was written, and unless the staging directory carries the run's identity in this
    warehouse: a run that failed anywhere before stays staged and unpublished, and ``latest`` keeps
    pointing at the previous release. A kill after the rename leaves a complete release that the
    next command (a re-run, ``dpngram gc``, another run into the same OUT) finishes publishing
    (:func:`complete_publishes`)."""
    from dpngram.release.identity import verify_staging

    release = ctx.release
    with ctx.warehouse() as wh:
        ledger = Ledger(wh.con)
        if release.published:  # a retried publish: complete it (re-point latest, close the run)
            complete_publish(release, ledger)
            return release.final
        verify_staging(release, ledger, ctx.config.warehouse)
        validation = read_parts(ctx).get("validation")
        if not validation or validation.get("success") is not True:
            raise RuntimeError(
                f"run {ctx.run_id} has not passed validation; refusing to publish "
                f"(staged in {release.staging})"
            )
        if not (release.staging / "report.json").is_file():
            raise RuntimeError(f"run {ctx.run_id} has no report.json; write the report before publishing")
        path = release.publish()
        ledger.close_run(ctx.run_id)  # the run spends no more: its reservation is released
        drop_private_tables(ledger, ctx.run_id, ctx.config)
    return path


def drop_private_tables(
    ledger: Ledger, run_id: str, config: RunConfig | None = None, warehouse: str | None = None
) -> None:
    """Remove a run's private working tables: those of a published run are of no further use (a
    published run is never resumed), and a warehouse refreshed every week would otherwise keep
    every run's raw text and working tables (about the input's size again per run); ``dpngram gc
    --delete`` removes those of a failed run. Drops the run's DuckDB schema and, for a run on the
    Spark engine, its table directory under ``spark_warehouse`` when that is a local path (a
    Hadoop-style URI is left to the operator). The engine and ``spark_warehouse`` come from
    ``config``, else from the run's fingerprint in the ledger (``warehouse``: the DuckDB file's
    path, for Spark's default location beside it). Idempotent."""
    drop_run_schema(ledger.con, run_id)
    root = _spark_tables_root(ledger, run_id, config, warehouse)
    if root is not None and not is_remote_path(root):
        shutil.rmtree(Path(root.removeprefix("file://")) / run_schema_name(run_id), ignore_errors=True)


def _spark_tables_root(
    ledger: Ledger, run_id: str, config: RunConfig | None, warehouse: str | None
) -> str | None:
    """Where a Spark run kept its private tables (``spark_warehouse``, default beside the DuckDB
    file); None for a DuckDB run or a run the ledger does not know."""
    if config is not None:
        engine, spark_warehouse, base = config.engine.name, config.engine.spark_warehouse, config.warehouse
    else:
        run = ledger.run(run_id)
        parameters = run["fingerprint"].get("parameters", {}) if run is not None else {}
        engine, spark_warehouse = parameters.get("engine"), parameters.get("spark_warehouse")
        base = warehouse or parameters.get("warehouse")
    if engine != "spark":
        return None
    from dpngram.engines.spark import default_root  # sqlglot and the rest: Spark runs only

    return spark_warehouse or (default_root(str(base)) if base else None)


#: The assets a release of a dataset updates, and the last part of their URI (docs/orchestration.md).
ASSET_KINDS = {"release": "latest", "ngrams": "ngrams", "language_model": "language-model"}


def asset_key(dataset: str, kind: str) -> tuple[str, str]:
    """(name, URI) of the Airflow asset of kind ``kind`` (:data:`ASSET_KINDS`) of ``dataset``: one
    set of assets per dataset, e.g. ``("dpngram_chats_language_model", "dpngram://chats/language-model")``.
    A consumer schedules on the one dataset it wants by declaring this name and URI."""
    return f"dpngram_{dataset}_{kind}", f"dpngram://{dataset}/{ASSET_KINDS[kind]}"


def release_asset_metadata(release: Path, training_corpus: str | None = None) -> dict[str, Any]:
    """Public metadata of a published release, for downstream consumers (the ``extra`` of the
    Airflow asset events emitted by ``dags/dpngram_release.py``). ``training_corpus``: the public
    corpus the model was built from (a path the operator's machine sees; the report withholds it),
    given to the model's consumers so that they can check their evaluation text against it.

    Read only from the release's ``report.json`` (itself public: DP values, released row counts
    and parameters) and the file tree; never from the warehouse. Returns ``{"release": {...},
    "ngrams": {...}, "language_model": {...} | None}``; each holds run_id, dataset, the run's
    composed epsilon and its delta, what the ledger was charged, and absolute paths. The model
    entry is None when the run built no model. ``epsilon``/``ledger_epsilon`` are rounded to 6
    significant digits for people (``4.0``, not ``3.9999999999859774``); ``epsilon_exact`` and
    ``ledger_epsilon_exact`` hold the exact values."""
    release = Path(release).resolve()
    report = json.loads((release / "report.json").read_text(encoding="utf-8"))
    privacy = report.get("privacy", {})
    charged = privacy.get("ledger_charged", {})
    released = report.get("released", {})
    total = privacy.get("total", {})
    common = {
        "run_id": report.get("run_id", release.name),
        "dataset": report.get("dataset"),
        # rounded for people (6 significant digits, as report.json's); exact values beside them
        "epsilon": total.get("epsilon"),
        "epsilon_exact": total.get("epsilon_exact", total.get("epsilon")),
        "delta": privacy.get("delta"),
        "epsilon_budget": privacy.get("epsilon_budget"),
        "ledger_epsilon": charged.get("epsilon"),
        "ledger_epsilon_exact": charged.get("epsilon_exact", charged.get("epsilon")),
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
            "training_corpus": training_corpus,
        }
    return {"release": release_meta, "ngrams": ngrams, "language_model": language_model}
