"""Airflow DAG ``dpngram_release``: one differentially private release of n-grams (and, when a
stage releases a trigram distribution or synthetic text, a KenLM language model) from private
user text.

Thin by design: every task rebuilds the validated :class:`pipeline.config.RunConfig` from the
run's Params plus the run id, and calls one pipeline function (``pipeline/`` knows nothing of
Airflow). Tasks::

    privacy_precheck -> ingest -> triehh -> vocabulary -> dpne_level_2 -> ... -> dpne_level_12
        -> kgrams -> lm_counts -> bayes -> synth -> validate -> lm -> report -> publish -> publish_lm

* ``privacy_precheck`` consults the privacy ledger *before any data is read*: a run that would
  take the dataset past ``lifetime_epsilon``/``lifetime_delta`` fails here with the ledger's
  one-line reason (AirflowFailException: no retry). It also fixes ``run_id`` = the Airflow run id
  made safe for paths (:func:`pipeline.run.run_id_from`) and stages the run's parameters.
* There is one ``dpne_level_k`` task per k up to the largest T the Params schema allows; a level
  beyond the run's T skips itself (AirflowSkipException); the levels after the first and the
  tasks after the levels use ``trigger_rule='none_failed'``. ``triehh``, ``bayes``, ``synth`` and
  ``lm`` skip themselves when the run does not use them.
* XCom carries only :func:`pipeline.run.public_summary` of each stage: paths, row counts of
  released tables, epsilon/delta. Exact statistics and raw text stay in the private warehouse.
* Retries are safe: every privacy-spending stage persists its noisy output before its spend is
  committed (:func:`pipeline.run.spend_once`), so a retried task (or a re-run of the same DAG run)
  reuses it and is not charged twice; publishing is an atomic rename, so a failed run leaves
  ``OUT/latest`` at the previous release. Invalid parameters and budget refusals fail without
  retry (AirflowFailException). See docs/orchestration.md.
* Tasks that open the DuckDB warehouse run in the one-slot pool ``dpngram_warehouse`` (DuckDB
  allows one writing process per file). Create it once:
  ``airflow pools set dpngram_warehouse 1 "dpngram DuckDB warehouse: one writer at a time"``
  (``dpngram demo`` and the docker init job do). ``airflow dags test`` runs tasks in-process one
  at a time and does not need the pool to exist.
* Assets (the interface for downstream teams; event ``extra`` from
  :func:`pipeline.run.release_asset_metadata`: run_id, dataset, epsilon, delta, ledger charge,
  released sizes, absolute paths):

  - ``dpngram://release/ngrams`` (vocabulary + k-grams) and ``dpngram://release/latest`` (the
    whole release) are updated by ``publish``;
  - ``dpngram://release/language-model`` is updated by ``publish_lm`` only when the run built a
    model (a skipped task emits no asset event). ``dpngram_consume_lm`` is scheduled on it.

Schedule: ``DPNGRAM_SCHEDULE`` at parse time (default ``@weekly``; a cron expression or preset;
``none`` for triggered runs only), ``catchup=False``. Every scheduled refresh spends (epsilon,
delta) from the dataset's lifetime budget; once the ledger says the next run would exceed it,
refreshes fail at ``privacy_precheck`` (readable reason, nothing read) until the budget is raised.

Param defaults (trigger form and scheduled runs): ``input``/``public`` point at the demo's sample
corpus and ``out`` at the demo's output, resolved from environment variables so the same file works
for the demo, tests and deployments:

* ``DPNGRAM_DEMO_DIR`` (default ``<repo>/.dpngram``): ``sample/users.jsonl.gz``,
  ``sample/public.txt.gz`` and ``warehouse.duckdb`` live there;
* ``DPNGRAM_OUT`` (default ``<repo>/demo-output``): where releases are published;
* ``DPNGRAM_PARAMS`` (optional): a JSON object of Param defaults for this deployment, e.g.
  ``{"dataset": "support-chats", "input": "/data/in/chats.jsonl.gz", "lifetime_epsilon": 40}``;
* ``DPNGRAM_TASK_RETRIES`` (default 2), ``DPNGRAM_RETRY_DELAY_SECONDS`` (default 30).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Asset, Param, dag, task

from dpngram.config import RunConfig

REPO = Path(__file__).resolve().parent.parent
DEMO_DIR = Path(os.environ.get("DPNGRAM_DEMO_DIR", str(REPO / ".dpngram"))).resolve()
OUT_DIR = Path(os.environ.get("DPNGRAM_OUT", str(REPO / "demo-output"))).resolve()
POOL = "dpngram_warehouse"

#: The whole published release (report, validation, every released table).
RELEASE_ASSET = Asset(name="dpngram_release", uri="dpngram://release/latest")
#: The released vocabulary and k-grams (released/vocabulary.parquet, released/kgrams.parquet).
NGRAMS_ASSET = Asset(name="dpngram_ngrams", uri="dpngram://release/ngrams")
#: The KenLM language model (model/model.binary, model.arpa, MODEL_CARD.md).
LM_ASSET = Asset(name="dpngram_language_model", uri="dpngram://release/language-model")

#: Fields that are not Params: the run id is the Airflow run id.
NOT_PARAMS = ("run_id",)

_SCHEMA = RunConfig.param_schema()
MAX_LEVEL = int(_SCHEMA["max_n"]["maximum"])


def _schedule() -> str | None:
    """``DPNGRAM_SCHEDULE``: '@weekly' (default), any Airflow preset/cron, or 'none'."""
    value = os.environ.get("DPNGRAM_SCHEDULE", "@weekly").strip()
    return None if value.lower() in ("", "none", "null", "off") else value


def _param_defaults() -> dict[str, Any]:
    """Param defaults that differ from RunConfig's: this deployment's paths, then DPNGRAM_PARAMS."""
    defaults: dict[str, Any] = {
        "input": str(DEMO_DIR / "sample" / "users.jsonl.gz"),
        "public": str(DEMO_DIR / "sample" / "public.txt.gz"),
        "out": str(OUT_DIR),
        "warehouse": str(DEMO_DIR / "warehouse.duckdb"),
    }
    raw = os.environ.get("DPNGRAM_PARAMS", "").strip()
    if raw:
        try:
            extra = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ValueError(f"DPNGRAM_PARAMS: not valid JSON ({err.msg} at {err.pos})") from None
        if not isinstance(extra, dict):
            raise ValueError("DPNGRAM_PARAMS: must be a JSON object of Param defaults")
        unknown = sorted(set(extra) - (set(_SCHEMA) - set(NOT_PARAMS)))
        if unknown:
            raise ValueError(f"DPNGRAM_PARAMS: unknown parameter(s) {unknown}")
        defaults.update(extra)
    return defaults


PARAM_DEFAULTS = _param_defaults()


def _params() -> dict[str, Param]:
    params = {}
    for name, fragment in _SCHEMA.items():
        if name in NOT_PARAMS:
            continue
        fragment = dict(fragment)
        default = PARAM_DEFAULTS.get(name, fragment.pop("default", None))
        fragment.pop("default", None)
        params[name] = Param(default, **fragment)
    return params


DEFAULT_ARGS: dict[str, Any] = {
    "retries": int(os.environ.get("DPNGRAM_TASK_RETRIES", "2")),
    "retry_delay": dt.timedelta(seconds=float(os.environ.get("DPNGRAM_RETRY_DELAY_SECONDS", "30"))),
}


#: Errors a retry cannot fix: bad parameters or input, exhausted budget, failed validation.
BAD_INPUT_ERRORS = (
    ("dpngram.core.errors", "ConfigError"),
    ("dpngram.core.errors", "IngestError"),
    ("dpngram.core.errors", "BudgetError"),
    ("dpngram.core.errors", "ArpaError"),
    ("dpngram.core.errors", "ValidationFailed"),
    ("builtins", "FileNotFoundError"),
)


def _bad_input_errors() -> tuple[type[BaseException], ...]:
    """The classes of :data:`BAD_INPUT_ERRORS` whose modules are loaded (a module that was never
    imported cannot have raised its error; importing it here would cost seconds per task)."""
    found = (getattr(sys.modules.get(module), name, None) for module, name in BAD_INPUT_ERRORS)
    return tuple(cls for cls in found if isinstance(cls, type))


def _is_scheduled(context: dict[str, Any]) -> bool:
    """True for a run the schedule created (not triggered by a person, an asset or a test)."""
    run_type = getattr(context.get("dag_run"), "run_type", None)
    if run_type is not None:
        return str(getattr(run_type, "value", run_type)) == "scheduled"
    return str(context.get("run_id", "")).startswith("scheduled__")


def _fail_fast(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the pipeline's one-line bad-input errors into AirflowFailException (no retry; the
    message stays one line). Other errors (a killed process, a full disk) are retried."""

    @functools.wraps(fn)
    def wrapper(**context: Any) -> Any:
        from airflow.sdk.exceptions import AirflowFailException

        try:
            return fn(**context)
        except _bad_input_errors() as err:
            raise AirflowFailException(f"{type(err).__name__}: {err}") from None

    return wrapper


def _config(context: dict[str, Any]) -> RunConfig:
    """RunConfig of this Airflow run: its Params plus run_id. Invalid parameters fail the task
    without retry (a retry cannot fix them), with the one-line ConfigError message."""
    from airflow.sdk.exceptions import AirflowFailException

    from dpngram.core.errors import ConfigError
    from dpngram.release.context import run_id_from

    params = context["params"]
    values = {name: params[name] for name in RunConfig.model_fields if name in params}
    try:
        return RunConfig.build(**values, run_id=run_id_from(context["run_id"]))
    except ConfigError as err:
        raise AirflowFailException(str(err)) from None


def _ctx(context: dict[str, Any]) -> Any:
    from dpngram.release.context import RunContext

    return RunContext(_config(context))


def _skip(context: dict[str, Any], reason: str | None) -> None:
    """Skip the task when ``reason`` is set. Decided from the (already schema-validated) Params
    before the pipeline is imported: a skipped task then costs a fork, not a ~6 s import."""
    if reason:
        from airflow.sdk.exceptions import AirflowSkipException

        raise AirflowSkipException(reason)


def _skip_unless_budgeted(context: dict[str, Any], stage: str) -> None:
    if stage not in (context["params"].get("stage_budget") or {}):
        _skip(context, f"stage_budget has no '{stage}' share")


def _budgeted_stage(context: dict[str, Any], stage: str, run: Any) -> dict[str, Any]:
    """Run a privacy-spending stage that is optional: skipped unless ``stage_budget`` gives it a
    share. Returns only the public summary (XCom)."""
    _skip_unless_budgeted(context, stage)
    from dpngram.release.context import public_summary, stage_timer

    ctx = _ctx(context)
    with stage_timer(ctx, stage):
        return public_summary(run(ctx))


@dag(
    dag_id="dpngram_release",
    description="Differentially private vocabulary, k-grams and language model from private user text",
    schedule=_schedule(),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=_params(),
    tags=["dpngram", "differential-privacy"],
    doc_md=__doc__,
)
def dpngram_release() -> None:
    @task(pool=POOL, multiple_outputs=False)
    @_fail_fast
    def privacy_precheck(**context: Any) -> dict[str, Any]:
        """Privacy pre-check: refuse the run (no retry, one-line reason) if the dataset's ledger
        says it would exceed its lifetime budget; nothing is read before this. Fixes run_id and
        stages the parameters."""
        from airflow.sdk.exceptions import AirflowFailException

        from dpngram.core.errors import BudgetError, ConfigError
        from dpngram.release.publish import prepare as prepare_run

        config = _config(context)
        if _is_scheduled(context) and config.lifetime_epsilon is None:
            raise AirflowFailException(
                "privacy pre-check refused the run: a scheduled refresh needs a lifetime budget "
                "(every refresh spends epsilon): set lifetime_epsilon in DPNGRAM_PARAMS"
            )
        try:
            return {"run_id": prepare_run(config).run_id}
        except (BudgetError, ConfigError) as err:
            raise AirflowFailException(f"privacy pre-check refused the run: {err}") from None

    @task(pool=POOL, multiple_outputs=False)
    @_fail_fast
    def ingest(**context: Any) -> dict[str, Any]:
        from dpngram.release.context import public_summary, stage_timer
        from dpngram.stages.ingest import run_ingest

        ctx = _ctx(context)
        with stage_timer(ctx, "ingest"):
            return public_summary(run_ingest(ctx))

    @task(pool=POOL, multiple_outputs=False)
    @_fail_fast
    def triehh(**context: Any) -> dict[str, Any]:
        """TrieHH out-of-vocabulary discovery (skipped unless vocabulary_method is triehh/both)."""
        method = context["params"].get("vocabulary_method", "dpsu")  # Param absent: DPSU only
        if method not in ("triehh", "both"):
            _skip(context, f"vocabulary_method is '{method}': no TrieHH stage")
        _skip_unless_budgeted(context, "triehh")
        from dpngram.stages.triehh import run_triehh

        return _budgeted_stage(context, "triehh", run_triehh)

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    @_fail_fast
    def vocabulary(**context: Any) -> dict[str, Any]:
        from dpngram.release.context import public_summary, stage_timer
        from dpngram.stages.vocabulary import run_vocabulary

        ctx = _ctx(context)
        with stage_timer(ctx, "vocabulary"):
            return public_summary(run_vocabulary(ctx))

    def level(k: int) -> Any:
        # none_failed: a skipped level k-1 (k-1 > T) lets level k run and skip itself at once,
        # which is faster than the scheduler's one-task-per-loop skip cascade; a failure upstream
        # still stops it.
        @task(task_id=f"dpne_level_{k}", pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
        @_fail_fast
        def dpne_level(**context: Any) -> dict[str, Any]:
            max_n = int(context["params"]["max_n"])
            if k > max_n:
                _skip(context, f"level {k} is beyond this run's T = {max_n}")
            from dpngram.release.context import public_summary, stage_timer
            from dpngram.stages.dpne import run_level

            ctx = _ctx(context)
            with stage_timer(ctx, f"dpne_level_{k}"):
                return public_summary(run_level(ctx, k))

        return dpne_level()

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    @_fail_fast
    def kgrams(**context: Any) -> dict[str, Any]:
        """Merge the released levels into released/kgrams.parquet (post-processing, no spend)."""
        if int(context["params"]["max_n"]) < 2:
            _skip(context, "T = 1: no k-grams beyond the vocabulary")
        from dpngram.release.context import public_summary, stage_timer
        from dpngram.stages.dpne import finalize_kgrams

        ctx = _ctx(context)
        with stage_timer(ctx, "kgrams"):
            return public_summary(finalize_kgrams(ctx))

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    @_fail_fast
    def lm_counts(**context: Any) -> dict[str, Any]:
        """Noisy n-gram counts and the mixture weight for the language model (skipped without an
        'lm_counts' budget)."""
        _skip_unless_budgeted(context, "lm_counts")
        from dpngram.stages.lm_counts import run_lm_counts

        return _budgeted_stage(context, "lm_counts", run_lm_counts)

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    @_fail_fast
    def bayes(**context: Any) -> dict[str, Any]:
        """Bayesian trigram distribution with the public prior (skipped without a 'bayes' budget)."""
        _skip_unless_budgeted(context, "bayes")
        from dpngram.stages.bayes import run_bayes

        return _budgeted_stage(context, "bayes", run_bayes)

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    @_fail_fast
    def synth(**context: Any) -> dict[str, Any]:
        """Chen et al. n-gram tree + synthetic sequences (skipped without a 'synth' budget)."""
        _skip_unless_budgeted(context, "synth")
        from dpngram.stages.synth import run_synth

        return _budgeted_stage(context, "synth", run_synth)

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    @_fail_fast
    def validate(**context: Any) -> dict[str, Any]:
        """Great Expectations suites; a failure stops the run before publish."""
        from dpngram.release.context import stage_timer
        from dpngram.stages.validate import validate_run

        ctx = _ctx(context)
        with stage_timer(ctx, "validate"):
            return {"success": validate_run(ctx)["success"]}

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    @_fail_fast
    def lm(**context: Any) -> dict[str, Any]:
        """KenLM language model from the released DP artifacts only (post-processing, no spend);
        skipped when lm_route is 'off' or no stage releases a trigram distribution/synthetic text."""
        if context["params"].get("lm_route") == "off":
            _skip(context, "lm_route is 'off'")
        from dpngram.stages.lm import lm_enabled

        ctx = _ctx(context)
        if not lm_enabled(ctx.config):
            _skip(context, "language model not enabled for this run (lm_route / stage_budget)")
        from dpngram.release.context import public_summary, stage_timer
        from dpngram.stages.lm import run_lm

        with stage_timer(ctx, "lm"):
            return public_summary(run_lm(ctx))

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    @_fail_fast
    def report(**context: Any) -> dict[str, Any]:
        from dpngram.release.context import stage_timer
        from dpngram.stages.report import write_report

        ctx = _ctx(context)
        with stage_timer(ctx, "report"):
            return {"path": str(write_report(ctx))}

    @task(outlets=[NGRAMS_ASSET, RELEASE_ASSET], multiple_outputs=False)
    @_fail_fast
    def publish(**context: Any) -> dict[str, Any]:
        """Atomic publish (staging -> runs/RUN_ID, then OUT/latest); emits the n-gram and release
        asset events with the release's public metadata."""
        from dpngram.release.publish import publish_run, release_asset_metadata

        path = publish_run(_ctx(context))
        metadata = release_asset_metadata(path)
        context["outlet_events"][NGRAMS_ASSET].extra = metadata["ngrams"]
        context["outlet_events"][RELEASE_ASSET].extra = metadata["release"]
        return {"path": str(path), "run_id": path.name}

    @task(outlets=[LM_ASSET], multiple_outputs=False)
    @_fail_fast
    def publish_lm(**context: Any) -> dict[str, Any]:
        """Emit the language-model asset event for the published release; skipped (no event)
        when the run built no model."""
        from dpngram.release.publish import release_asset_metadata

        path = _ctx(context).release.final
        metadata = release_asset_metadata(path)["language_model"]
        if metadata is None:
            _skip(context, "this release has no language model")
        context["outlet_events"][LM_ASSET].extra = metadata
        return {"path": metadata["paths"]["binary"], "run_id": path.name}

    chain = [privacy_precheck(), ingest(), triehh(), vocabulary()]
    chain += [level(k) for k in range(2, MAX_LEVEL + 1)]
    chain += [kgrams(), lm_counts(), bayes(), synth(), validate(), lm(), report(), publish(), publish_lm()]
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        upstream >> downstream


dpngram_release()
