"""Airflow DAG ``dpngram_release``: one differentially private release of n-grams from user text.

Thin by design: every task rebuilds the validated :class:`pipeline.config.RunConfig` from the
run's Params plus the run id, and calls one pipeline function (``pipeline/`` knows nothing of
Airflow). Tasks::

    prepare -> ingest -> vocabulary -> dpne_level_2 -> ... -> dpne_level_12 -> kgrams
            -> bayes -> synth -> validate -> lm -> report -> publish

* ``prepare`` checks the dataset's lifetime budget before any data is read and fixes
  ``run_id`` = the Airflow run id made safe for paths (:func:`pipeline.run.run_id_from`).
* There is one ``dpne_level_k`` task per k up to the largest T the Params schema allows; a level
  beyond the run's T skips itself (AirflowSkipException); the
  levels after the first and the tasks after the levels use ``trigger_rule='none_failed'``.
* XCom carries only :func:`pipeline.run.public_summary` of each stage: paths, row counts of
  released tables, epsilon/delta. Exact statistics and raw text stay in the private warehouse.
* Tasks that open the DuckDB warehouse run in the one-slot pool ``dpngram_warehouse`` (DuckDB
  allows one writing process per file). Create it once:
  ``airflow pools set dpngram_warehouse 1 "dpngram DuckDB warehouse: one writer at a time"``
  (``dpngram demo`` does). ``airflow dags test`` runs tasks in-process one at a time and does
  not need the pool to exist.
* ``publish`` updates the Asset ``dpngram://release/latest`` so downstream DAGs can be scheduled
  on new releases (event extra: run_id and release path).

Param defaults (trigger form): ``input``/``public`` point at the demo's sample corpus and ``out``
at the demo's output, resolved from environment variables so the same file works for the demo,
tests and deployments:

* ``DPNGRAM_DEMO_DIR`` (default ``<repo>/.dpngram``): ``sample/users.jsonl.gz``,
  ``sample/public.txt.gz`` and ``warehouse.duckdb`` live there;
* ``DPNGRAM_OUT`` (default ``<repo>/demo-output``): where releases are published.

``schedule=None`` for now (triggered runs only); production scheduling is a later change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Asset, Param, dag, task

from pipeline.config import RunConfig

REPO = Path(__file__).resolve().parent.parent
DEMO_DIR = Path(os.environ.get("DPNGRAM_DEMO_DIR", str(REPO / ".dpngram"))).resolve()
OUT_DIR = Path(os.environ.get("DPNGRAM_OUT", str(REPO / "demo-output"))).resolve()
POOL = "dpngram_warehouse"
RELEASE_ASSET = Asset(name="dpngram_release", uri="dpngram://release/latest")

#: Param defaults that differ from RunConfig's (paths resolved for this deployment).
PARAM_DEFAULTS: dict[str, Any] = {
    "input": str(DEMO_DIR / "sample" / "users.jsonl.gz"),
    "public": str(DEMO_DIR / "sample" / "public.txt.gz"),
    "out": str(OUT_DIR),
    "warehouse": str(DEMO_DIR / "warehouse.duckdb"),
}
#: Fields that are not Params: the run id is the Airflow run id.
NOT_PARAMS = ("run_id",)

_SCHEMA = RunConfig.param_schema()
MAX_LEVEL = int(_SCHEMA["max_n"]["maximum"])


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


def _config(context: dict[str, Any]) -> RunConfig:
    """RunConfig of this Airflow run: its Params plus run_id (raises ConfigError if invalid)."""
    from pipeline.run import run_id_from

    params = context["params"]
    values = {name: params[name] for name in RunConfig.model_fields if name in params}
    return RunConfig.build(**values, run_id=run_id_from(context["run_id"]))


def _ctx(context: dict[str, Any]) -> Any:
    from pipeline.run import RunContext

    return RunContext(_config(context))


def _budgeted_stage(context: dict[str, Any], stage: str, run: Any) -> dict[str, Any]:
    """Run a privacy-spending stage that is optional: skipped unless ``stage_budget`` gives it a
    share. Returns only the public summary (XCom)."""
    from airflow.sdk.exceptions import AirflowSkipException

    from pipeline.run import public_summary, stage_timer

    ctx = _ctx(context)
    if stage not in ctx.config.stage_budget:
        raise AirflowSkipException(f"stage_budget has no '{stage}' share")
    with stage_timer(ctx, stage):
        return public_summary(run(ctx))


@dag(
    dag_id="dpngram_release",
    description="Differentially private vocabulary and k-grams (DPSU + DPNE) from private user text",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=_params(),
    tags=["dpngram", "differential-privacy"],
    doc_md=__doc__,
)
def dpngram_release() -> None:
    @task(pool=POOL, multiple_outputs=False)
    def prepare(**context: Any) -> dict[str, Any]:
        """Budget pre-check (before any data is read); fixes run_id; stages the parameters."""
        from pipeline.run import prepare as prepare_run

        return {"run_id": prepare_run(_config(context)).run_id}

    @task(pool=POOL, multiple_outputs=False)
    def ingest(**context: Any) -> dict[str, Any]:
        from pipeline.ingest import run_ingest
        from pipeline.run import public_summary, stage_timer

        ctx = _ctx(context)
        with stage_timer(ctx, "ingest"):
            return public_summary(run_ingest(ctx))

    @task(pool=POOL, multiple_outputs=False)
    def vocabulary(**context: Any) -> dict[str, Any]:
        from pipeline.dpsu import run_vocabulary
        from pipeline.run import public_summary, stage_timer

        ctx = _ctx(context)
        with stage_timer(ctx, "vocabulary"):
            return public_summary(run_vocabulary(ctx))

    def level(k: int) -> Any:
        # none_failed: a skipped level k-1 (k-1 > T) lets level k run and skip itself at once,
        # which is faster than the scheduler's one-task-per-loop skip cascade; a failure upstream
        # still stops it.
        @task(task_id=f"dpne_level_{k}", pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
        def dpne_level(**context: Any) -> dict[str, Any]:
            from airflow.sdk.exceptions import AirflowSkipException

            config = _config(context)
            if k > config.max_n:
                raise AirflowSkipException(f"level {k} is beyond this run's T = {config.max_n}")
            from pipeline.dpne import run_level
            from pipeline.run import RunContext, public_summary, stage_timer

            ctx = RunContext(config)
            with stage_timer(ctx, f"dpne_level_{k}"):
                return public_summary(run_level(ctx, k))

        return dpne_level()

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    def kgrams(**context: Any) -> dict[str, Any]:
        """Merge the released levels into released/kgrams.parquet (post-processing, no spend)."""
        from airflow.sdk.exceptions import AirflowSkipException

        from pipeline.dpne import finalize_kgrams
        from pipeline.run import public_summary, stage_timer

        ctx = _ctx(context)
        if ctx.config.max_n < 2:
            raise AirflowSkipException("T = 1: no k-grams beyond the vocabulary")
        with stage_timer(ctx, "kgrams"):
            return public_summary(finalize_kgrams(ctx))

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    def bayes(**context: Any) -> dict[str, Any]:
        """Bayesian trigram distribution with the public prior (skipped without a 'bayes' budget)."""
        from pipeline.bayes import run_bayes

        return _budgeted_stage(context, "bayes", run_bayes)

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    def synth(**context: Any) -> dict[str, Any]:
        """Chen et al. n-gram tree + synthetic sequences (skipped without a 'synth' budget)."""
        from pipeline.synth import run_synth

        return _budgeted_stage(context, "synth", run_synth)

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    def validate(**context: Any) -> dict[str, Any]:
        """Great Expectations suites; a failure stops the run before publish."""
        from pipeline.run import stage_timer
        from pipeline.validate import validate_run

        ctx = _ctx(context)
        with stage_timer(ctx, "validate"):
            return {"success": validate_run(ctx)["success"]}

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    def lm(**context: Any) -> dict[str, Any]:
        """KenLM language model from the released DP artifacts only (post-processing, no spend);
        skipped when lm_route is 'off' or no stage releases a trigram distribution/synthetic text."""
        from airflow.sdk.exceptions import AirflowSkipException

        from lm.build import lm_enabled

        ctx = _ctx(context)
        if not lm_enabled(ctx.config):
            raise AirflowSkipException("language model not enabled for this run (lm_route / stage_budget)")
        from lm.build import run_lm
        from pipeline.run import public_summary, stage_timer

        with stage_timer(ctx, "lm"):
            return public_summary(run_lm(ctx))

    @task(pool=POOL, multiple_outputs=False, trigger_rule="none_failed")
    def report(**context: Any) -> dict[str, Any]:
        from pipeline.report import write_report
        from pipeline.run import stage_timer

        ctx = _ctx(context)
        with stage_timer(ctx, "report"):
            return {"path": str(write_report(ctx))}

    @task(outlets=[RELEASE_ASSET], multiple_outputs=False)
    def publish(**context: Any) -> dict[str, Any]:
        from pipeline.run import publish_run

        path = publish_run(_ctx(context))
        context["outlet_events"][RELEASE_ASSET].extra = {"run_id": path.name, "path": str(path)}
        return {"path": str(path), "run_id": path.name}

    chain = [prepare(), ingest(), vocabulary()]
    chain += [level(k) for k in range(2, MAX_LEVEL + 1)]
    chain += [kgrams(), bayes(), synth(), validate(), lm(), report(), publish()]
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        upstream >> downstream


dpngram_release()
