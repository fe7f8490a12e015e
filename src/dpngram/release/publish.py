"""Before and after the steps of a release: the privacy pre-check, publishing, asset metadata.

:func:`prepare` (Airflow task ``privacy_precheck``) fixes the run id, refuses a run that would take
the dataset past its lifetime budget before any data is read, and records the run's parameters in
the staged release. :func:`publish_run` (task ``publish``) publishes the staged release atomically,
and only if the ``validation`` step passed and the report was written; otherwise the run stays
staged and ``latest`` keeps pointing at the previous release. :func:`release_asset_metadata` reads
the public facts of a published release (from its report.json and file tree) for the Airflow
asset events.

Owns: :func:`prepare`, :func:`publish_run`, :func:`release_asset_metadata`.
Imports: dpngram.release (context, ledger), dpngram.config, dpngram.core.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError
from dpngram.release.context import RunContext, new_run_id, read_parts, record_part
from dpngram.release.layout import write_json_atomic
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


def published_parameters(config: RunConfig) -> dict[str, Any]:
    """The run's parameters as the report publishes them: paths withheld."""
    flat = json.loads(config.to_json())
    return {k: (WITHHELD if k in PATH_PARAMETERS and v is not None else v) for k, v in flat.items()}


def prepare(config: RunConfig, *, reserve: bool = True) -> RunConfig:
    """Fix the run id, register the run's identity and reserve its budget, and create the staging
    directory with the run's parameters; all before any private data is read.

    In one ledger transaction (:meth:`Ledger.open_run`): a resumed run id must have the same
    fingerprint (parameters and input, :mod:`dpngram.release.identity`), else a one-line
    :class:`~dpngram.core.errors.ResumeError` names what changed; the run's (ε, δ) is reserved
    against the dataset's lifetime budget (stored per dataset; a run's ``lifetime_*`` flags set it
    the first time), else a one-line :class:`~dpngram.core.errors.BudgetError`. ``reserve=False``
    (``dpngram ingest``: a run that spends nothing) reserves nothing."""
    from dpngram.core.budget import Budget
    from dpngram.release.identity import compare, fingerprint, operator_dir

    if not config.run_id:
        config = config.with_values(run_id=new_run_id())
    # the stages that read the public corpus (bayes: its prior; lm_counts and the model built from
    # lm_counts/synth: the public n-grams) would fail only after earlier stages have spent budget
    uses_public = any(stage in config.stage_budget for stage in ("bayes", "lm_counts", "synth"))
    if uses_public and config.public and not Path(config.public).is_file():
        raise ConfigError(f"public: {config.public} does not exist or is not a file")
    ctx = RunContext(config)
    if ctx.release.published:
        raise ConfigError(f"run_id: run '{ctx.run_id}' is already published in {ctx.release.final}")
    identity = fingerprint(config)
    with ctx.warehouse() as wh:
        Ledger(wh.con).open_run(
            config.dataset,
            ctx.run_id,
            identity,
            config.budget if reserve else Budget(0.0, 0.0),
            config.lifetime_epsilon,
            config.lifetime_delta,
            compare=compare,
        )
    operator = operator_dir(config)
    write_json_atomic(
        operator / "run.json",
        {"run_id": ctx.run_id, "fingerprint": identity, "staging": str(ctx.release.staging.resolve())},
    )
    record_part(ctx, "parameters", {"parameters": published_parameters(config), "run_id": ctx.run_id})
    return config


def publish_run(ctx: RunContext) -> Path:
    """Publish the staged release (atomic rename, then swap ``OUT/latest``).

    Refused unless the run passed validation (report part 'validation' with success) and its
    report was written: a run that failed anywhere before stays staged and unpublished, and
    ``latest`` keeps pointing at the previous release."""
    release = ctx.release
    if release.published:
        path = release.publish()  # idempotent: a retried publish re-points latest
        with ctx.warehouse() as wh:
            Ledger(wh.con).close_run(ctx.run_id)
        return path
    validation = read_parts(ctx).get("validation")
    if not validation or validation.get("success") is not True:
        raise RuntimeError(
            f"run {ctx.run_id} has not passed validation; refusing to publish (staged in {release.staging})"
        )
    if not (release.staging / "report.json").is_file():
        raise RuntimeError(f"run {ctx.run_id} has no report.json; write the report before publishing")
    path = release.publish()
    with ctx.warehouse() as wh:  # the run spends no more: its reservation is released
        Ledger(wh.con).close_run(ctx.run_id)
    return path


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
