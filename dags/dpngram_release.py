"""Airflow DAG ``dpngram_release``: one differentially private release of n-grams (and, when a
stage releases a trigram distribution or synthetic text, a KenLM language model) from private
user text.

Thin by design: the tasks are the steps of :data:`dpngram.orchestration.plan.STEPS` (the same
list the CLI runs), each made from one task function; every task rebuilds the validated
:class:`dpngram.config.RunConfig` from the run's Params plus the run id and runs its step (``dpngram``
knows nothing of Airflow). Tasks (dependencies derived from what each step reads and writes,
:func:`dpngram.orchestration.plan.task_upstreams`)::

    privacy_precheck -> ingest -> dpne.k1 -> dpne.kgrams -> lm_counts ─┐
                                     │            └──────> bayes ──────┼─> validation
                                     └───────────────────> synth ──────┘
    validation -> lm -> report -> publish -> publish_lm

(``dpne.*`` form the task group ``dpne``: k1 is the vocabulary, after TrieHH word discovery when it
runs; kgrams runs the k-gram levels k = 2..T one after another in one process, then merges them.
Each level keeps its own name ``dpne.kK`` in the report, the timings and the ledger. The UI shows
plain names: "Vocabulary", "LM counts", "Bayesian trigram distribution", "Synthetic text", ...
The graph folds the tasks before and after the three parallel stages into the groups "Prepare"
and "Release", derived from the edges by :func:`dpngram.orchestration.plan.graph_groups`, so that
it is four nodes long and readable at the default zoom; the task ids do not change.)

* ``privacy_precheck`` consults the privacy ledger *before any data is read*: a run that would
  take the dataset past ``lifetime_epsilon``/``lifetime_delta`` fails here with the ledger's
  one-line reason (no traceback, no retry: see "Refusals" below). It also fixes ``run_id`` = the
  Airflow run id made safe for paths (:func:`dpngram.release.context.run_id_from`) and stages the
  run's parameters.
* The tasks are :data:`dpngram.orchestration.plan.TASKS`. A task that does not apply to the run (a
  stage without a budget share, ``bayes`` without a public corpus, ``lm`` without a source, T = 1)
  skips itself (AirflowSkipException) with the plan's reason, decided before any pipeline module is
  imported; the tasks after ``ingest`` use ``trigger_rule='none_failed'``. With every default, only
  ``triehh`` is skipped.
* XCom carries only :func:`dpngram.release.context.public_summary` of each stage: paths, row counts of
  released tables, epsilon/delta. Exact statistics and raw text stay in the private warehouse.
* Retries are safe: every privacy-spending stage persists its noisy output before its spend is
  committed (:func:`dpngram.release.spend.spend_once`), so a retried task (or a re-run of the same DAG run)
  reuses it and is not charged twice; publishing is atomic for readers (a rename locally; on object
  storage the manifest is written last and the pointer ``latest.json`` moved after it), so a failed
  run leaves ``OUT/DATASET/latest`` at the previous release. See docs/orchestration.md.
* Refusals (invalid parameters, a budget refusal, any of the pipeline's one-line user errors): the
  reason is logged as one error line, then the task raises
  :class:`dpngram.orchestration.plan.TaskRefused` (a SystemExit: Airflow logs "Task exited", no
  traceback) and the tasks' retry policy fails it at once (no retry).
* Every task runs in :func:`dpngram.orchestration.task.task_scope`: the privacy ledger is the
  Airflow connection ``dpngram_ledger`` (PostgreSQL) when it exists, else the embedded per-user
  file; the task takes its run's lock in the ledger (the tasks of one run take turns on any worker;
  a task that finds it held is rescheduled after ``DPNGRAM_LOCK_WAIT_SECONDS`` instead of holding
  its slot); with ``DPNGRAM_RUN_STORE`` (workers that share no disk) the run's state is pulled from
  the run store before the step and pushed after it. No pool: each run has a warehouse file of its
  own, so different datasets run side by side (``max_active_runs``: ``DPNGRAM_MAX_ACTIVE_RUNS``, 4).
* Assets, one set per dataset (the interface for downstream teams; event ``extra`` from
  :func:`dpngram.release.publish.release_asset_metadata`: run_id, dataset, epsilon, delta, ledger charge,
  released sizes, the release's location and each file's location and SHA-256). The dataset is a
  run parameter, so the tasks emit the events through asset aliases (declared here) for the assets
  of the run's dataset (:func:`dpngram.release.layout.asset_key`), whose URIs name the storage:

  - ``OUT/DATASET/latest/released`` (vocabulary + k-grams) and ``OUT/DATASET/latest`` (the
    whole release) are updated by ``publish`` (aliases ``dpngram_ngrams_events``,
    ``dpngram_release_events``);
  - ``OUT/DATASET/latest/model`` is updated by ``publish_lm`` (alias
    ``dpngram_language_model_events``) only when the run built a model (a skipped task emits no
    asset event). ``dpngram_consume_lm`` is scheduled on one dataset's model asset.

Schedule: ``DPNGRAM_SCHEDULE`` at parse time (a cron expression or preset, or ``none``),
``catchup=False``. Every scheduled refresh spends (epsilon, delta), so a schedule needs a lifetime
budget: without ``lifetime_epsilon`` in ``DPNGRAM_PARAMS`` the default is no schedule (triggered
runs only: a fresh install never starts a run by itself), and an explicit ``DPNGRAM_SCHEDULE`` is
an import error naming the missing setting. With it, the default is ``@weekly``; once the ledger
says the next run would exceed the lifetime budget, refreshes fail at ``privacy_precheck``
(one-line reason, nothing read) until the budget is raised.

The trigger form (:mod:`dpngram.orchestration.form`): the essentials first (dataset, input, public
corpus, output, epsilon, delta, budget split, T), then collapsed sections; only ``input`` and
``out`` are required; every description states the parameter's bounds.

Param defaults (trigger form and scheduled runs): ``input``/``public`` point at the demo's sample
corpus and ``out`` at the demo's output, resolved from environment variables so the same file works
for the demo, tests and deployments:

* ``DPNGRAM_DEMO_DIR`` (default ``<repo>/.dpngram``): ``sample/users.jsonl.gz`` and
  ``sample/public.txt.gz`` live there;
* ``DPNGRAM_OUT`` (default ``<repo>/demo-output``): where releases are published (a directory, or
  an fsspec URL such as ``s3://bucket/prefix``);
* ``DPNGRAM_WAREHOUSE`` (each worker's own; default ``~/.local/share/dpngram/warehouse``): the
  directory of the runs' private tables when the run's ``warehouse`` Param is empty;
* ``DPNGRAM_RUN_STORE`` (optional): an fsspec URL where workers that share no disk keep each run's
  working state (docs/orchestration.md, "Several workers");
* ``DPNGRAM_PARAMS`` (optional): a JSON object of Param defaults for this deployment, e.g.
  ``{"dataset": "support-chats", "input": "/data/in/chats.jsonl.gz", "lifetime_epsilon": 40}``;
* ``DPNGRAM_TASK_RETRIES`` (default 2), ``DPNGRAM_RETRY_DELAY_SECONDS`` (default 30).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Asset, AssetAlias, Param, TaskGroup, dag, task
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule

# Parse-time imports stay light (pydantic and the configuration, no numpy/scipy/duckdb/polars/GX/
# kenlm): every task process parses this file first. tests/test_dag.py checks it.
from dpngram.config import RunConfig
from dpngram.config.run import flat_fields
from dpngram.orchestration.form import form_params
from dpngram.orchestration.plan import (
    GROUP_LABELS,
    MAX_LEVEL,
    TASK_LABELS,
    TASKS,
    Task,
    TaskRefused,
    dag_upstreams,
    graph_groups,
    group_tip,
)

REPO = Path(__file__).resolve().parent.parent
DEMO_DIR = Path(os.environ.get("DPNGRAM_DEMO_DIR", str(REPO / ".dpngram"))).resolve()
#: Where releases are published: a directory, or an fsspec URL (s3://bucket/prefix) on object storage.
_OUT = os.environ.get("DPNGRAM_OUT", str(REPO / "demo-output"))
OUT_DIR = _OUT if "://" in _OUT and not _OUT.startswith("file://") else str(Path(_OUT).resolve())
DAG_ID = "dpngram_release"
#: Runs of this DAG at once (each dataset's run has a warehouse of its own; the tasks of one run
#: take turns through the run's lock in the ledger): ``DPNGRAM_MAX_ACTIVE_RUNS``, default 4.
MAX_ACTIVE_RUNS = int(os.environ.get("DPNGRAM_MAX_ACTIVE_RUNS", "4"))

#: The whole published release (report, validation, every released table): asset
#: ``OUT/DATASET/latest`` of the run's dataset, emitted through this alias.
RELEASE_ALIAS = AssetAlias("dpngram_release_events")
#: The released vocabulary and k-grams: asset ``OUT/DATASET/latest/released``.
NGRAMS_ALIAS = AssetAlias("dpngram_ngrams_events")
#: The KenLM language model (model/model.binary, model.arpa, MODEL_CARD.md): asset
#: ``OUT/DATASET/latest/model``.
LM_ALIAS = AssetAlias("dpngram_language_model_events")

#: Fields that are not Params: the run id is the Airflow run id.
NOT_PARAMS = ("run_id",)

_SCHEMA = RunConfig.param_schema()
assert MAX_LEVEL == int(_SCHEMA["max_n"]["maximum"]), "the plan has a level task per allowed T"


def _param_defaults() -> dict[str, Any]:
    """Param defaults that differ from RunConfig's: this deployment's paths, then DPNGRAM_PARAMS."""
    defaults: dict[str, Any] = {
        "input": str(DEMO_DIR / "sample" / "users.jsonl.gz"),
        "public": str(DEMO_DIR / "sample" / "public.txt.gz"),
        "out": OUT_DIR,
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


def _schedule() -> str | None:
    """``DPNGRAM_SCHEDULE`` (any Airflow preset/cron, 'none', or unset/empty for the default). Every
    refresh spends budget, so a
    schedule needs ``lifetime_epsilon`` in the deployment's defaults: without it there is no
    schedule by default, and an explicit one is refused here (an import error naming the fix)
    rather than failing every scheduled run."""
    capped = PARAM_DEFAULTS.get("lifetime_epsilon") is not None
    value = os.environ.get("DPNGRAM_SCHEDULE", "").strip() or ("@weekly" if capped else "none")
    if value.lower() in ("none", "null", "off"):
        return None
    if not capped:
        raise ValueError(
            f"DPNGRAM_SCHEDULE={value!r} needs a lifetime budget: every refresh spends epsilon; set "
            'lifetime_epsilon in DPNGRAM_PARAMS (e.g. {"lifetime_epsilon": 40}) or DPNGRAM_SCHEDULE=none'
        )
    return value


def _params() -> dict[str, Param]:
    """The trigger form: essentials first, then sections (dpngram.orchestration.form)."""
    params = {}
    for name, fragment in form_params(PARAM_DEFAULTS, skip=NOT_PARAMS).items():
        fragment = dict(fragment)
        default = fragment.pop("default")
        params[name] = Param(default, **fragment)
    return params


#: A refused run fails at once; anything else keeps the default retries.
REFUSALS_ARE_FINAL = ExceptionRetryPolicy(
    rules=[RetryRule(exception=TaskRefused, action=RetryAction.FAIL, reason="run refused: not retried")]
)


DEFAULT_ARGS: dict[str, Any] = {
    "retries": int(os.environ.get("DPNGRAM_TASK_RETRIES", "2")),
    "retry_policy": REFUSALS_ARE_FINAL,
    "retry_delay": dt.timedelta(seconds=float(os.environ.get("DPNGRAM_RETRY_DELAY_SECONDS", "30"))),
}


def _is_scheduled(context: dict[str, Any]) -> bool:
    """True for a run the schedule created (not triggered by a person, an asset or a test)."""
    run_type = getattr(context.get("dag_run"), "run_type", None)
    if run_type is not None:
        return str(getattr(run_type, "value", run_type)) == "scheduled"
    return str(context.get("run_id", "")).startswith("scheduled__")


def _fail_fast(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the pipeline's one-line bad-input errors into a refusal (:func:`_refuse`: one line, no
    retry), after releasing the run's budget reservation when no stage was charged (a refusal at
    ingest, e.g. too much quarantined input or delta >= 1/users, leaves nothing reserved). Other
    errors (a killed process, a full disk) are retried."""

    @functools.wraps(fn)
    def wrapper(**context: Any) -> Any:
        from dpngram.core.errors import USER_ERRORS

        try:
            return fn(**context)
        except USER_ERRORS as err:
            line = f"{type(err).__name__}: {err}"
            released = _release_if_unspent(context)
            suffix = f"; {released}" if released else ""
            _refuse(line + suffix, context, note=getattr(err, "brief", line) + suffix)

    return wrapper


def _release_if_unspent(context: dict[str, Any]) -> str | None:
    """After a refusal: release the run's reservation if nothing was charged (the sentence to add
    to the reason), else None."""
    from dpngram.orchestration.plan import release_if_unspent
    from dpngram.release.context import RunContext

    try:
        config = _config(context)
    except TaskRefused:
        return None
    if release_if_unspent(RunContext(config)):
        return f"run '{config.run_id}' spent nothing: its budget reservation was released"
    return None


def _config(context: dict[str, Any]) -> RunConfig:
    """RunConfig of this Airflow run: its Params plus run_id. Invalid parameters fail the task
    without retry (a retry cannot fix them), with the one-line ConfigError message."""
    from dpngram.core.errors import ConfigError
    from dpngram.release.context import run_id_from

    params = context["params"]
    values = {name: params[name] for name, *_ in flat_fields() if name in params}
    try:
        return RunConfig.build(**values, run_id=run_id_from(context["run_id"]))
    except ConfigError as err:
        _refuse(str(err), context)
        raise  # unreachable: _refuse raises


def _log_forecast(config: Any, location: str) -> None:
    """The operator's view of the lifetime budget, in the pre-check's log: how many more refreshes
    at this run's (epsilon, delta) it allows and, with a schedule, on which date it would stop."""
    import datetime as dt
    import logging

    from dpngram.release.forecast import schedule_stop
    from dpngram.release.ledger import open_ledger

    log = logging.getLogger("dpngram")
    with open_ledger() as ledger:
        after_this = ledger.forecast(config.dataset, per_run=config.budget)
    log.info("privacy ledger: %s", location)
    log.info("%s", after_this.sentence())
    stop = schedule_stop(_schedule(), after_this.runs_left, dt.datetime.now(dt.UTC))
    if stop:
        log.info("%s", stop)


def _log_notices(config: Any) -> None:
    """What the operator should know about this run (stages that will not run and why, a model
    without a public corpus): one warning line each in the pre-check's log, as the CLI prints them."""
    import logging

    from dpngram.config.budget_plan import run_notices

    for notice in run_notices(config):
        logging.getLogger("dpngram").warning("note: %s", notice)


def _refuse(reason: str, context: dict[str, Any] | None = None, note: str | None = None) -> None:
    """Fail the task without retry for a refusal (budget, parameters): the one-line reason is
    logged as the task's error line and written to the DAG run's note (:func:`_set_note`; ``note``
    when given, e.g. without exact counts), then :class:`TaskRefused` ends the task (Airflow logs
    "Task exited", no traceback; :data:`REFUSALS_ARE_FINAL` fails it without retry)."""
    import logging

    logging.getLogger("dpngram").error(reason)
    if context is not None:
        task_id = getattr(context.get("task_instance"), "task_id", None) or "a task"
        _set_note(context, f"Refused at {task_id}: {note or reason}")
    raise TaskRefused(reason) from None


#: The Airflow connection whose credentials let a task write its DAG run's note through the REST API
#: (``http://USER:PASSWORD@HOST:PORT`` of the api-server; a user allowed to edit DAG runs).
NOTE_CONNECTION = "dpngram_api"


def _set_note(context: dict[str, Any], note: str) -> None:
    """Put a refusal's one line in the DAG run's note, the first thing the UI shows of a run (the
    Grid's run details and the runs list). Airflow 3's task execution API can read the note but
    not write it, so this uses the public REST API (``PATCH /api/v2/dags/{dag}/dagRuns/{run}``) with
    the credentials of the connection :data:`NOTE_CONNECTION`. Best effort: without the connection,
    or if the API does not answer, the task's log still has the line (docs/orchestration.md)."""
    import logging
    import urllib.parse
    import urllib.request

    log = logging.getLogger("dpngram")
    try:
        from airflow.sdk import Connection

        conn = Connection.get(NOTE_CONNECTION)
    except Exception:  # noqa: BLE001 - not configured: the log has the reason
        log.warning("the run's note is not set: no Airflow connection '%s'", NOTE_CONNECTION)
        return
    dag_run = context.get("dag_run")
    dag_id = getattr(dag_run, "dag_id", None) or getattr(context.get("dag"), "dag_id", DAG_ID)
    run_id = getattr(dag_run, "run_id", None) or context["run_id"]
    scheme = "https" if conn.conn_type == "https" else "http"
    base = f"{scheme}://{conn.host}" + (f":{conn.port}" if conn.port else "")

    def call(method: str, path: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
        request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method=method)
        request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"{}")

    try:
        token = call("POST", "/auth/token", {"username": conn.login, "password": conn.password})[
            "access_token"
        ]
        quoted = "/".join(urllib.parse.quote(part, safe="") for part in (dag_id, "dagRuns", run_id))
        call("PATCH", f"/api/v2/dags/{quoted}", {"note": note[:1000]}, token)
    except Exception as err:  # noqa: BLE001 - best effort: the log has the reason
        log.warning("the run's note could not be set (%s): see the error line above", type(err).__name__)


def _skip(reason: str | None) -> None:
    """Skip the task when ``reason`` is set (decided from the validated Params before any pipeline
    module is imported: a skipped task costs a fork, not a ~6 s import)."""
    if reason:
        from airflow.sdk.exceptions import AirflowSkipException

        raise AirflowSkipException(reason)


@task(multiple_outputs=False, trigger_rule="none_failed")
@_fail_fast
def run_step(step_name: str, **context: Any) -> dict[str, Any]:
    """One task of the plan: skipped when none of its steps applies to this run's parameters,
    otherwise its steps run (each timed under its own name) in the task's scope (the run's lock;
    with a run store, the run's state brought to this worker and shared again after); returns only
    the public summary of its last step (XCom)."""
    task_spec: Task = TASK_BY_NAME[step_name]
    config = _config(context)
    _skip(task_spec.skip_reason(config))
    from dpngram.orchestration.task import task_scope
    from dpngram.release.context import public_summary, stage_timer

    _use_ledger()
    summary: dict[str, Any] = {}
    scope = task_scope(
        config, writes_private=task_spec.writes_private, lock_wait=LOCK_WAIT_SECONDS, busy=_reschedule
    )
    with scope as ctx:
        for step in task_spec.applicable(config):
            with stage_timer(ctx, step.name):
                summary = public_summary(step.run(ctx))
    return summary


#: How long a task waits for its run's lock (another task of the same run holds it: the three stages
#: after DPNE are scheduled side by side) before it is rescheduled, and when it tries again. A
#: rescheduled task frees its executor slot for other datasets' tasks (docs/orchestration.md).
LOCK_WAIT_SECONDS = float(os.environ.get("DPNGRAM_LOCK_WAIT_SECONDS", "30"))
RESCHEDULE_SECONDS = float(os.environ.get("DPNGRAM_RESCHEDULE_SECONDS", "5"))


def _reschedule() -> None:
    """Give the task's slot back and try again in :data:`RESCHEDULE_SECONDS` (state
    ``up_for_reschedule``; not a failure and not a retry)."""
    import logging

    from airflow.sdk.exceptions import AirflowRescheduleException

    logging.getLogger("dpngram").info(
        "another task of this run holds the run's lock: rescheduled in %g s", RESCHEDULE_SECONDS
    )
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=RESCHEDULE_SECONDS)
    raise AirflowRescheduleException(reschedule_date=when)


def _connection_uri(name: str) -> str | None:
    """The URI of Airflow connection ``name``, or None when it is not defined."""
    try:
        from airflow.sdk import Connection

        return Connection.get(name).get_uri()
    except Exception:  # noqa: BLE001 - not defined (the task SDK raises its own not-found error)
        return None


def _use_ledger() -> str:
    """This task's privacy ledger: the connection ``dpngram_ledger``, else the embedded file
    (:func:`dpngram.orchestration.task.use_ledger`); a deployment whose workers share no disk
    without a shared ledger is refused (one line, no retry)."""
    from dpngram.core.errors import ConfigError
    from dpngram.orchestration.task import use_ledger

    try:
        return use_ledger(_connection_uri)
    except ConfigError as err:
        _refuse(str(err))
        raise  # unreachable: _refuse raises


TASK_BY_NAME = {spec.name: spec for spec in TASKS}


@dag(
    dag_id=DAG_ID,
    description="Differentially private vocabulary, k-grams and language model from private user text",
    schedule=_schedule(),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=MAX_ACTIVE_RUNS,
    default_args=DEFAULT_ARGS,
    params=_params(),
    tags=["dpngram", "differential-privacy"],
    doc_md=__doc__,
)
def dpngram_release() -> None:
    @task(multiple_outputs=False, task_display_name=TASK_LABELS["privacy_precheck"])
    @_fail_fast
    def privacy_precheck(**context: Any) -> dict[str, Any]:
        """Privacy pre-check: refuse the run (no retry, one-line reason) if the dataset's ledger
        says it would exceed its lifetime budget; nothing is read before this. Fixes run_id, stages
        the parameters, and logs how many more refreshes the lifetime budget allows."""
        from dpngram.core.errors import BudgetError, ConfigError
        from dpngram.orchestration.task import task_scope
        from dpngram.release.publish import input_problem, prepare

        config = _config(context)
        if _is_scheduled(context) and config.lifetime_epsilon is None:
            _refuse(
                "privacy pre-check refused the run: a scheduled refresh needs a lifetime budget "
                "(every refresh spends epsilon): set lifetime_epsilon in DPNGRAM_PARAMS",
                context,
            )
        problem = input_problem(config)
        if problem is not None:  # before the reservation: nothing is reserved
            _refuse(f"privacy pre-check refused the run: {problem}; nothing was reserved", context)
        location = _use_ledger()
        try:
            with task_scope(config):
                prepared = prepare(config)
        except (BudgetError, ConfigError) as err:
            _refuse(f"privacy pre-check refused the run: {err}", context)
        _log_notices(prepared)
        _log_forecast(prepared, location)
        return {"run_id": prepared.run_id}

    @task(
        outlets=[NGRAMS_ALIAS, RELEASE_ALIAS],
        multiple_outputs=False,
        task_display_name=TASK_LABELS["publish"],
    )
    @_fail_fast
    def publish(**context: Any) -> dict[str, Any]:
        """Atomic publish (locally: staging -> OUT/DATASET/runs/RUN_ID, then OUT/DATASET/latest; on
        object storage: upload, manifest, then the pointer OUT/DATASET/latest.json), the ledger run
        closed and the run's private tables removed (and its prefix in the run store); emits the
        dataset's n-gram and release asset events with the release's public metadata."""
        from dpngram.orchestration.task import task_scope
        from dpngram.release.publish import asset_key, publish_run, release_asset_metadata

        config = _config(context)
        _use_ledger()
        with task_scope(config, push=False, lock_wait=LOCK_WAIT_SECONDS, busy=_reschedule) as ctx:
            location = publish_run(ctx)  # also removes the run's prefix from the run store
        metadata = release_asset_metadata(location)
        for kind, alias in (("ngrams", NGRAMS_ALIAS), ("release", RELEASE_ALIAS)):
            name, uri = asset_key(config.dataset, kind, config.out)
            context["outlet_events"][alias].add(Asset(name=name, uri=uri), extra=metadata[kind])
        return {"path": str(location), "run_id": config.run_id}

    @task(outlets=[LM_ALIAS], multiple_outputs=False, task_display_name=TASK_LABELS["publish_lm"])
    @_fail_fast
    def publish_lm(**context: Any) -> dict[str, Any]:
        """Emit the dataset's language-model asset event for the published release; skipped (no
        event) when the run built no model. The event names the public corpus the model was built
        from, so that consumers can check their evaluation text against it."""
        from dpngram.release.context import RunContext
        from dpngram.release.publish import asset_key, release_asset_metadata

        config = _config(context)
        location = RunContext(config).release.final
        metadata = release_asset_metadata(location, training_corpus=config.public)["language_model"]
        if metadata is None:
            _skip("this release has no language model")
        name, uri = asset_key(config.dataset, "language_model", config.out)
        context["outlet_events"][LM_ALIAS].add(Asset(name=name, uri=uri), extra=metadata)
        return {"path": metadata["paths"]["binary"], "run_id": config.run_id}

    # the graph's groups (dpne, and the chains before and after the parallel stages, folded so
    # that the graph is readable at the default zoom) and edges: both from the plan
    group_of: dict[str, TaskGroup] = {}
    for group_id, members in graph_groups().items():
        group = TaskGroup(
            group_id,
            tooltip=group_tip(group_id, members),
            group_display_name=GROUP_LABELS[group_id],
            # dpne.k1 is task k1 of group dpne; a folded chain's tasks keep their ids
            prefix_group_id=all(name.startswith(f"{group_id}.") for name in members),
        )
        group_of.update(dict.fromkeys(members, group))
    made = {"privacy_precheck": privacy_precheck.override(task_group=group_of.get("privacy_precheck"))()}
    for spec in TASKS:
        options: dict[str, Any] = {
            "task_id": spec.task_id,
            "doc_md": spec.doc or None,
            "task_group": group_of.get(spec.name),
            "task_display_name": spec.label,
        }
        if spec.name == "ingest":
            options["trigger_rule"] = "all_success"
        made[spec.name] = run_step.override(**options)(step_name=spec.name)
    made["publish"] = publish.override(task_group=group_of.get("publish"))()
    made["publish_lm"] = publish_lm.override(task_group=group_of.get("publish_lm"))()
    # the plan's data flow: each task after the tasks whose outputs it reads
    for name, upstreams in dag_upstreams().items():
        for upstream in upstreams:
            made[upstream] >> made[name]


dpngram_release()
