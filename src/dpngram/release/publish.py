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
from dpngram.config.budget_plan import dpne_share_problem, reads_public_corpus
from dpngram.core.errors import ConfigError
from dpngram.engines.base import is_remote_path
from dpngram.engines.sql import run_schema_name
from dpngram.release.context import RunContext, read_parts, record_part, with_run_id
from dpngram.release.identity import remove_run_files
from dpngram.release.layout import (  # noqa: F401 - asset_key, ASSET_KINDS: the DAGs' import
    ASSET_KINDS,
    LegacyLayoutError,
    Release,
    asset_key,
    check_out_layout,
    write_json_atomic,
)
from dpngram.release.ledger import Ledger
from dpngram.release.storage import ObjectRelease, is_object_url, release_for_staged

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

    In this order, so that a refusal reserves nothing: the run id's registration in the privacy
    ledger (:meth:`Ledger.run`) must have the same fingerprint (parameters and input,
    :mod:`dpngram.release.identity`) and staging directory, else a one-line
    :class:`~dpngram.core.errors.ResumeError` names what changed; an existing staging directory must
    carry this ledger's identity and the run's registered fingerprint
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
    from dpngram.release.identity import compare, fingerprint

    config = with_run_id(config)
    _refuse_unreadable_paths(config)
    ctx = RunContext(config)
    release = ctx.release
    identity = fingerprint(config)
    with ctx.ledger() as ledger:
        if release.published:
            completed = complete_publish(release, ledger) if _open_in(ledger, ctx.run_id) else False
            note = " (its interrupted publish was completed now)" if completed else ""
            raise AlreadyPublished(
                f"run_id: run '{ctx.run_id}' is already published in {release.final}{note}",
                release.final,
                completed,
            )
        complete_publishes(ledger, out=release.out_dir)
        created = _check_or_create_staging(ctx, release, ledger, identity)
        try:
            ledger.open_run(
                config.dataset,
                ctx.run_id,
                identity,
                config.budget if reserve else Budget(0.0, 0.0),
                config.lifetime_epsilon,
                config.lifetime_delta,
                compare=compare,
                staging=release.staged_name,
                warehouse=config.warehouse,
            )
        except BaseException:
            if created:  # nothing was staged: leave no directory behind
                shutil.rmtree(release.staging, ignore_errors=True)
            raise
        _record_run(ctx, release, ledger, identity)
    return config


def _refuse_unreadable_paths(config: RunConfig) -> None:
    """:func:`prepare`'s checks of paths, before the ledger is opened: an OUT of the old shared
    layout, or a public corpus that the run's stages would read and that is not a file (they
    would fail only after earlier stages have spent budget)."""
    if (problem := dpne_share_problem(config)) is not None:  # it would stop after ingest
        raise ConfigError(problem)
    if not is_object_url(config.out):
        try:
            check_out_layout(config.out)  # an OUT of the old shared layout: refused, nothing reserved
        except LegacyLayoutError as err:
            raise ConfigError(str(err)) from None
    if reads_public_corpus(config) and (problem := public_problem(config)) is not None:
        raise ConfigError(problem)


def _check_or_create_staging(
    ctx: RunContext, release: Release | ObjectRelease, ledger: Ledger, identity: dict[str, Any]
) -> bool:
    """:func:`prepare`'s check of the run's identity before anything is reserved: a registered
    run id must have the same fingerprint (else :class:`~dpngram.core.errors.ResumeError`); an
    existing staging directory must carry the run's staging token, a new one gets it. Returns
    whether the staging directory was created now."""
    from dpngram.release.identity import check_staging, compare, staging_token, write_staging_token

    existing = ledger.run(ctx.run_id)
    if existing is not None:
        compare(existing["fingerprint"], identity)  # the dataset is a parameter too
    registered = existing["fingerprint"] if existing is not None else identity
    token = staging_token(ctx.run_id, registered, ledger.identity())
    created = not check_staging(release, token, ledger.location)
    if created:
        try:
            write_staging_token(release, token)
        except OSError as err:
            raise ConfigError(
                f"out: cannot create the staging directory {release.staging} (--out {ctx.config.out}): "
                f"{err.strerror or type(err).__name__}; nothing was reserved: remove it or choose "
                "another path"
            ) from None
    return created


def _record_run(
    ctx: RunContext, release: Release | ObjectRelease, ledger: Ledger, identity: dict[str, Any]
) -> None:
    """The last step of :func:`prepare`, once the budget is reserved: the operator file
    ``run.json`` and the report part 'parameters'. A failure here releases the reservation (the
    run has drawn nothing)."""
    from dpngram.release.identity import operator_dir

    try:
        operator = operator_dir(ctx.config)
        write_json_atomic(
            operator / "run.json",
            {"run_id": ctx.run_id, "fingerprint": identity, "staging": release.staged_name},
        )
        record_part(ctx, "parameters", {"parameters": published_parameters(ctx.config), "run_id": ctx.run_id})
    except BaseException as err:
        if ledger.suspend_if_unspent(ctx.run_id):
            err.add_note(f"run '{ctx.run_id}' spent nothing: its budget reservation was released")
        raise


def _open_in(ledger: Ledger, run_id: str) -> bool:
    run = ledger.run(run_id)
    return run is not None and run["state"] != "closed"


def complete_publish(release: Release | ObjectRelease, ledger: Ledger) -> bool:
    """Finish an interrupted publish of a complete release (renamed, or its manifest uploaded):
    point ``latest`` at it unless a newer release is ``latest``, then close its ledger run (its
    reservation is released; its charges stay), and remove its private tables
    (:func:`drop_private_tables`). Idempotent. Returns whether the run was still open."""
    from dpngram.release.run_store import forget_run

    was_open = _open_in(ledger, release.run_id)
    _publish(release, ledger)
    run = ledger.run(release.run_id)
    ledger.close_run(release.run_id)
    drop_private_tables(ledger, release.run_id, warehouse=run["warehouse"] if run else None)
    forget_run(release.run_id)
    return was_open


def _publish(release: Release | ObjectRelease, ledger: Ledger) -> Path | str:
    """Publish (or finish publishing) ``release``: a rename and a symlink swap locally, upload +
    manifest + pointer on object storage, under the ledger's lock ``publish:OUT/DATASET`` there (two
    publishers of one dataset must not both read the old pointer)."""
    if isinstance(release, ObjectRelease):
        return release.publish(lock=lambda: ledger.lock(f"publish:{release.home}"))
    return release.publish()


def complete_publishes(ledger: Ledger, out: str | Path | None = None) -> list[Path | str]:
    """Complete every interrupted publish the ledger knows of (in ``out`` only, when given): a run
    not closed in the ledger whose release is already complete (its staging directory renamed, or
    its manifest uploaded). A complete release passed validation and has its report, so completing
    it is always right; there is nothing to roll back. Returns the releases completed."""
    done = []
    for run in ledger.open_runs():
        release = _release_of(run)
        if release is None:
            continue
        if out is not None and str(release.out_dir).rstrip("/") != str(out).rstrip("/"):
            if is_object_url(str(out)) or Path(release.out_dir).resolve() != Path(out).resolve():
                continue
        if release.published:
            complete_publish(release, ledger)
            done.append(release.final)
    return done


def _release_of(run: dict[str, Any]) -> Release | ObjectRelease | None:
    """The release a ledger run stages (from its recorded staging name), or None."""
    staged = run.get("staging")
    if not staged:
        return None
    scratch = Path(run["warehouse"] or ".") / "staging" / run["dataset"] / run["run_id"]
    remote = release_for_staged(staged, run["run_id"], run["dataset"], scratch)
    if remote is not None:
        return remote
    staging = Path(staged)  # OUT/DATASET/runs/RUN_ID.staging
    try:
        release = Release(staging.parent.parent.parent, run["run_id"], run["dataset"])
    except ValueError:
        return None
    return release if release.staging == staging else None  # an older layout: not completed here


def publish_run(ctx: RunContext) -> Path | str:
    """Publish the staged release (locally: atomic rename, then swap ``OUT/DATASET/latest``; on
    object storage: upload, manifest, pointer), then close the run in the ledger (its reservation
    is released; its charges stay) and remove its private tables (:func:`drop_private_tables`).

    Refused unless the run passed validation (report part 'validation' with success) and its
    report was written, and unless the staging directory carries the run's identity in this
    ledger: a run that failed anywhere before stays staged and unpublished, and ``latest`` keeps
    pointing at the previous release. A kill after the commit point (the rename, or the manifest)
    leaves a complete release that the next command (a re-run, ``dpngram gc``, another run into the
    same OUT) finishes publishing (:func:`complete_publishes`)."""
    from dpngram.release.identity import verify_staging

    release = ctx.release
    with ctx.ledger() as ledger:
        if release.published:  # a retried publish: complete it (re-point latest, close the run)
            complete_publish(release, ledger)
            return release.final
        verify_staging(release, ledger)
        validation = read_parts(ctx).get("validation")
        if not validation or validation.get("success") is not True:
            raise RuntimeError(
                f"run {ctx.run_id} has not passed validation; refusing to publish "
                f"(staged in {release.staging})"
            )
        if not (release.staging / "report.json").is_file():
            raise RuntimeError(f"run {ctx.run_id} has no report.json; write the report before publishing")
        path = _publish(release, ledger)
        ledger.close_run(ctx.run_id)  # the run spends no more: its reservation is released
        drop_private_tables(ledger, ctx.run_id, ctx.config)
        from dpngram.release.run_store import forget_run

        forget_run(ctx.run_id)  # and its prefix in the run store, where workers share one
    return path


def drop_private_tables(
    ledger: Ledger, run_id: str, config: RunConfig | None = None, warehouse: str | None = None
) -> None:
    """Remove a run's private working tables: those of a published run are of no further use (a
    published run is never resumed), and ``dpngram gc --delete`` removes those of a failed run.
    Deletes the run's DuckDB file (``WAREHOUSE/runs/RUN_ID.duckdb``, with its spill and WAL) and,
    for a run on the Spark engine, its table directory under ``spark_warehouse`` when that is a
    local path (a Hadoop-style URI is left to the operator). The warehouse directory and the
    engine come from ``config``, else from the ledger (``warehouse``, or the run's registration).
    On this machine only: another worker's copy goes when that worker next starts a task
    (:func:`dpngram.release.run_store.sweep_closed`). Idempotent."""
    if config is not None:
        base: str | None = config.warehouse
    else:
        run = ledger.run(run_id)
        base = warehouse or (run["warehouse"] if run is not None else None)
    if base:
        remove_run_files(Path(base), run_id)
    root = _spark_tables_root(ledger, run_id, config, base)
    if root is not None and not is_remote_path(root):
        shutil.rmtree(Path(root.removeprefix("file://")) / run_schema_name(run_id), ignore_errors=True)


def _spark_tables_root(
    ledger: Ledger, run_id: str, config: RunConfig | None, warehouse: str | None
) -> str | None:
    """Where a Spark run kept its private tables (``spark_warehouse``, default
    ``WAREHOUSE/spark``); None for a DuckDB run or a run the ledger does not know."""
    if config is not None:
        engine, spark_warehouse, base = config.engine.name, config.engine.spark_warehouse, config.warehouse
    else:
        run = ledger.run(run_id)
        parameters = run["fingerprint"].get("parameters", {}) if run is not None else {}
        engine, spark_warehouse = parameters.get("engine"), parameters.get("spark_warehouse")
        base = warehouse
    if engine != "spark":
        return None
    from dpngram.engines.spark import default_root  # sqlglot and the rest: Spark runs only

    return spark_warehouse or (default_root(str(base)) if base else None)


def release_asset_metadata(release: Path | str, training_corpus: str | None = None) -> dict[str, Any]:
    """Public metadata of a published release, for downstream consumers (the ``extra`` of the
    Airflow asset events emitted by ``dags/dpngram_release.py``). ``release``: its directory, or
    its URL on object storage. ``training_corpus``: the public corpus the model was built from (a
    path the operator's machine sees; the report withholds it), given to the model's consumers so
    that they can check their evaluation text against it.

    Read only from the release's ``report.json`` (itself public: DP values, released row counts
    and parameters) and its ``MANIFEST.json``; never from the warehouse. Returns ``{"release":
    {...}, "ngrams": {...}, "language_model": {...} | None}``; each holds run_id, dataset, the
    run's composed epsilon and its delta, what the ledger was charged, the release's location and
    the locations (``paths``: absolute paths, or URLs on object storage) and SHA-256 (``sha256``,
    from the manifest) of its files. The model entry is None when the run built no model.
    ``epsilon``/``ledger_epsilon`` are rounded to 6 significant digits for people (``4.0``, not
    ``3.9999999999859774``); ``epsilon_exact`` and ``ledger_epsilon_exact`` hold the exact values."""
    from dpngram.release.storage import join, local_path, read_json, read_manifest

    remote = is_object_url(str(release))
    location = str(release).rstrip("/") if remote else str(local_path(release).resolve())
    report = (
        read_json(join(location, "report.json"))
        if remote
        else json.loads((Path(location) / "report.json").read_text(encoding="utf-8"))
    )
    files = read_manifest(location)["files"]
    released = report.get("released", {})
    common = _asset_common(report, location)
    tables = {name: t.get("rows") for name, t in released.get("tables", {}).items() if "/" not in name}
    release_meta = {**common, "released_rows": tables}
    ngram_files = _located(
        files, location, {name: f"released/{name}.parquet" for name in ("vocabulary", "kgrams")}
    )
    ngrams = {
        **common,
        "ngrams_per_k": released.get("ngrams_per_k", {}),
        "released_rows": {name: tables.get(name) for name in ngram_files["paths"]},
        **ngram_files,
    }
    model = report.get("model") or {}
    model_files = _located(files, location, dict(model.get("paths") or {}))
    language_model = None
    if "binary" in model_files["paths"]:
        language_model = {
            **common,
            "order": model.get("order"),
            "route": model.get("route"),
            "ngram_counts": model.get("counts", {}),
            **model_files,
            "training_corpus": training_corpus,
        }
    return {"release": release_meta, "ngrams": ngrams, "language_model": language_model}


def _asset_common(report: dict[str, Any], location: str) -> dict[str, Any]:
    """What every entry of :func:`release_asset_metadata` holds: the run, its privacy spend (as
    the report states it and as the ledger charged it) and where the release is."""
    from dpngram.release.storage import join

    privacy = report.get("privacy", {})
    charged = privacy.get("ledger_charged", {})
    total = privacy.get("total", {})
    return {
        "run_id": report.get("run_id", location.rsplit("/", 1)[-1]),
        "dataset": report.get("dataset"),
        # rounded for people (6 significant digits, as report.json's); exact values beside them
        "epsilon": total.get("epsilon"),
        "epsilon_exact": total.get("epsilon_exact", total.get("epsilon")),
        "delta": privacy.get("delta"),
        "epsilon_budget": privacy.get("epsilon_budget"),
        "ledger_epsilon": charged.get("epsilon"),
        "ledger_epsilon_exact": charged.get("epsilon_exact", charged.get("epsilon")),
        "ledger_delta": charged.get("delta"),
        "release": location,
        "report": join(location, "report.json"),
    }


def _located(files: dict[str, Any], location: str, rels: dict[str, str]) -> dict[str, Any]:
    """The locations and SHA-256 (from the manifest's ``files``) of the release files ``rels``
    (name -> path relative to the release) that the release holds."""
    from dpngram.release.storage import join

    present = {name: rel for name, rel in rels.items() if rel in files}
    return {
        "paths": {name: join(location, rel) for name, rel in present.items()},
        "sha256": {name: files[rel]["sha256"] for name, rel in present.items()},
    }
