"""The plan of a release: one ordered list of steps, used by the CLI and by the Airflow DAG.

A step has one name everywhere: the Airflow task id, the stage name the CLI prints, the report part
its stage records and the ledger entry it charges (``dpne.k2`` is task ``k2`` of task group ``dpne``,
report part ``report.parts/dpne.k2.json`` and ledger stage ``dpne.k2``). Each step says what it runs
(a stage function, named by an import a reader and an IDE can follow, but imported only when the
step runs, so that parsing the DAG file and skipping a task stay cheap: see "The stages" below) and
when it runs (:meth:`Step.skip_reason`, decided from the validated configuration alone, by the
rules of :mod:`dpngram.config.budget_plan`). The CLI runs the steps that apply in one process
(:func:`run_release`); the DAG makes one task per step and a task skips itself when its step does
not apply, so the order and the skip rules are written once, here.

Around the steps: :func:`dpngram.release.publish.prepare` (the privacy pre-check; task
``privacy_precheck``) before, and :func:`dpngram.release.publish.publish_run` (task ``publish``)
after.

Why one module (over 600 lines): the steps, their order, the DAG's task graph derived from them
(upstreams, groups, display names) and the runner are one contract; the CLI and the DAG must read
the same list, and each piece is small.

Owns: the steps (``STEPS``), their order and skip rules, the DAG's tasks (``TASKS``: the levels
k = 2..T run in one task), :func:`release_steps`, :func:`run_release`, :class:`TaskRefused`.
Imports: dpngram.stages (inside the functions that call them, when a step runs), dpngram.release,
dpngram.config, dpngram.core.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dpngram.config import RunConfig
from dpngram.config.budget_plan import lm_skip_reason, triehh_skip_reason
from dpngram.config.stages import BAYES, DPNE, LM_COUNTS, SYNTH, TRIEHH, BudgetedStage
from dpngram.core.errors import WarehouseBusy

if TYPE_CHECKING:
    from dpngram.release.context import RunContext


def _group_and_task_id(name: str) -> tuple[str | None, str]:
    """``dpne.k2`` -> (``dpne``, ``k2``); a name without a dot has no group."""
    group, dot, task_id = name.partition(".")
    return (group, task_id) if dot else (None, name)


class TaskRefused(SystemExit):
    """A task ends because the run is refused (invalid parameters, a budget the ledger will not
    grant): retrying cannot help. The DAG logs the one-line reason, then raises this. It is a
    SystemExit so that Airflow's task runner records "Task exited" without a traceback, and the
    DAG's retry policy fails the task at once instead of retrying it (docs/orchestration.md)."""

    def __init__(self, reason: str) -> None:
        super().__init__(1)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


#: The longest n-gram the configuration allows (``max_n``'s maximum): the DAG has a level task up to it.
MAX_LEVEL = 12


def _needs_budget(stage: str) -> Callable[[RunConfig], str | None]:
    def skip(config: RunConfig) -> str | None:
        return config.stage_skip_reason(stage)

    return skip


def _level(k: int) -> Callable[[RunConfig], str | None]:
    def skip(config: RunConfig) -> str | None:
        return None if k <= config.dpne.max_n else f"level {k} is beyond this run's T = {config.dpne.max_n}"

    return skip


def _kgrams(config: RunConfig) -> str | None:
    return None if config.dpne.max_n >= 2 else "T = 1: no k-grams beyond the vocabulary"


# ----------------------------------------------------------------------------------------------
# The stages. Each step calls one of these; each imports its stage function when called, so the
# DAG file (which imports this module) loads no stage and no heavy library when it is parsed.
# Go-to-definition on the imported name leads to the stage; import-linter sees the imports too.
# ----------------------------------------------------------------------------------------------
StageFunction = Callable[..., dict[str, Any]]


def ingest(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.ingest import run_ingest

    return run_ingest(ctx, **kwargs)


def triehh(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.triehh import run_triehh

    return run_triehh(ctx, **kwargs)


def vocabulary(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.vocabulary import run_vocabulary

    return run_vocabulary(ctx, **kwargs)


def dpne_level(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.dpne import run_level

    return run_level(ctx, **kwargs)


def dpne_kgrams(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.dpne import finalize_kgrams

    return finalize_kgrams(ctx, **kwargs)


def dpne_baseline(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.dpne import run_baseline

    return run_baseline(ctx, **kwargs)


def lm_counts(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.lm_counts import run_lm_counts

    return run_lm_counts(ctx, **kwargs)


def bayes(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.bayes import run_bayes

    return run_bayes(ctx, **kwargs)


def synth(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.synth import run_synth

    return run_synth(ctx, **kwargs)


def validation(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.validate import validate_run

    return validate_run(ctx, **kwargs)


def lm(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.lm import run_lm

    return run_lm(ctx, **kwargs)


def report(ctx: RunContext, **kwargs: Any) -> dict[str, Any]:
    from dpngram.stages.report import run_report

    return run_report(ctx, **kwargs)


@dataclass(frozen=True)
class Step:
    """One step of a release.

    ``name`` is the step's one name (see the module docstring); ``group`` is the Airflow task group
    (the part of ``name`` before the dot). ``target`` is the stage function (one of the functions
    above, which import the stage when called), called as ``target(ctx, **kwargs)``. ``skip``
    returns why the step does not run for a configuration.
    ``reads`` and ``writes`` name the artifacts (private tables, released files, report parts) the
    step consumes and produces: the DAG's dependencies are derived from them
    (:func:`task_upstreams`), so a step runs after exactly the steps whose output it reads."""

    name: str
    target: StageFunction
    kwargs: dict[str, Any] = field(default_factory=dict)
    skip: Callable[[RunConfig], str | None] = lambda config: None
    doc: str = ""
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    @property
    def group(self) -> str | None:
        return _group_and_task_id(self.name)[0]

    @property
    def task_id(self) -> str:
        """The task id inside its group (Airflow prefixes the group: ``dpne`` + ``k2`` = ``dpne.k2``)."""
        return _group_and_task_id(self.name)[1]

    def skip_reason(self, config: RunConfig) -> str | None:
        return self.skip(config)

    def run(self, ctx: RunContext, **extra: Any) -> dict[str, Any]:
        return self.target(ctx, **self.kwargs, **extra)


#: The artifacts that are private tables in the run's warehouse (every other artifact is a file
#: of the staged release): a task that writes one leaves state that later tasks read from the
#: warehouse itself, which a deployment whose workers share no disk must carry to them
#: (:attr:`Task.writes_private`, :mod:`dpngram.release.run_store`). The DPNE levels' private
#: tables are rebuilt from the released files when missing, so they are not listed.
PRIVATE_ARTIFACTS = ("tokens",)

#: The released tables (what validation checks and the report describes).
RELEASED = (
    "vocabulary",
    "oov_words",
    "kgrams",
    "lm_counts",
    "trigram_dist",
    "ngram_counts_noisy",
    "synthetic_sequences",
)


def _budgeted_step(
    stage: BudgetedStage, target: StageFunction, skip: Callable[[RunConfig], str | None] | None = None
) -> Step:
    """The step of a budgeted stage, from its declaration (:mod:`dpngram.config.stages`)."""
    skip = skip or _needs_budget(stage.name)
    return Step(stage.name, target, skip=skip, doc=stage.doc, reads=stage.reads, writes=stage.writes)


def _dpne_steps() -> list[Step]:
    """The vocabulary, the DPNE levels k = 2..MAX_LEVEL and their merge (stage ``dpne``)."""
    vocabulary_step = Step(
        "dpne.k1",
        vocabulary,
        doc="vocabulary S_1 (DPSU)",
        reads=("tokens", "oov_words"),
        writes=("vocabulary",),
    )
    levels = [
        Step(
            f"dpne.k{k}",
            dpne_level,
            {"k": k},
            _level(k),
            f"k-gram level {k} (DPNE)",
            reads=("tokens", "vocabulary", *((f"level{k - 1}",) if k > 2 else ())),
            writes=(f"level{k}",),
        )
        for k in range(2, MAX_LEVEL + 1)
    ]
    merge = Step(
        "dpne.kgrams",
        dpne_kgrams,
        skip=_kgrams,
        doc="merge the levels",
        reads=tuple(f"level{k}" for k in range(2, MAX_LEVEL + 1)),
        writes=("kgrams",),
    )
    return [vocabulary_step, *levels, merge]


def _steps() -> tuple[Step, ...]:
    after_release = (
        Step(
            "validation",
            validation,
            doc="Great Expectations suites",
            reads=("tokens", *RELEASED),
            writes=("validation",),
        ),
        Step(
            "lm",
            lm,
            skip=lm_skip_reason,
            doc="KenLM model (post-processing)",
            reads=("validation", *RELEASED),
            writes=("model",),
        ),
        Step(
            "report",
            report,
            doc="report.json, report.html, plots",
            reads=("validation", "model", *RELEASED),
            writes=("report",),
        ),
    )
    return (
        Step("ingest", ingest, doc="raw text -> private tables, quarantine", writes=("tokens",)),
        _budgeted_step(TRIEHH, triehh, skip=triehh_skip_reason),
        *_dpne_steps(),
        _budgeted_step(LM_COUNTS, lm_counts),
        _budgeted_step(BAYES, bayes),
        _budgeted_step(SYNTH, synth),
        *after_release,
    )


#: Every step a release can take, in order (the DAG's tasks between ``privacy_precheck`` and ``publish``).
STEPS: tuple[Step, ...] = _steps()
STEP_BY_NAME: dict[str, Step] = {step.name: step for step in STEPS}


@dataclass(frozen=True)
class Task:
    """One Airflow task of the release DAG: one step, or several consecutive steps that run in one
    process (TrieHH then the vocabulary: task ``dpne.k1``; the DPNE levels k = 2..T and their
    merge: task ``dpne.kgrams``). Each step keeps its one name (report part, timing, ledger entry);
    the task skips itself only when none of its steps applies. Fewer tasks: fewer process start-ups
    and no skipped tasks in a default run."""

    name: str
    steps: tuple[Step, ...]
    doc: str = ""
    #: What the Airflow UI shows for the task (``task_display_name``): plain words, not the id.
    label: str = ""

    @property
    def group(self) -> str | None:
        return _group_and_task_id(self.name)[0]

    @property
    def writes(self) -> frozenset[str]:
        return frozenset(a for step in self.steps for a in step.writes)

    @property
    def writes_private(self) -> bool:
        """Whether the task writes private tables later tasks read (:data:`PRIVATE_ARTIFACTS`)."""
        return bool(self.writes & set(PRIVATE_ARTIFACTS))

    @property
    def reads(self) -> frozenset[str]:
        """What the task's steps read that its own steps do not write."""
        return frozenset(a for step in self.steps for a in step.reads) - self.writes

    @property
    def task_id(self) -> str:
        """The task id inside its group (Airflow prefixes the group: ``dpne`` + ``k2`` = ``dpne.k2``)."""
        return _group_and_task_id(self.name)[1]

    def applicable(self, config: RunConfig) -> list[Step]:
        return [step for step in self.steps if step.skip_reason(config) is None]

    def skip_reason(self, config: RunConfig) -> str | None:
        """Why the task does not run (the last step's reason), or None when a step applies."""
        if self.applicable(config):
            return None
        return self.steps[-1].skip_reason(config)


def _tasks() -> tuple[Task, ...]:
    levels = tuple(STEP_BY_NAME[f"dpne.k{k}"] for k in range(2, MAX_LEVEL + 1))
    folded = {step.name: "dpne.kgrams" for step in levels} | {TRIEHH.name: "dpne.k1"}
    members: dict[str, list[Step]] = {}
    for step in STEPS:
        members.setdefault(folded.get(step.name, step.name), []).append(step)
    members["dpne.kgrams"] = [*levels, STEP_BY_NAME["dpne.kgrams"]]
    docs = {
        "dpne.k1": "vocabulary S_1: DPSU (after LDP TrieHH word discovery when vocabulary_method uses it)",
        "dpne.kgrams": "k-gram levels 2..T (DPNE), one after another, then their merge",
    }
    return tuple(
        Task(name, tuple(steps), docs.get(name, steps[0].doc), TASK_LABELS[name])
        for name, steps in members.items()
    )


#: Plain-word names of the DAG's tasks (Airflow ``task_display_name``), by task name.
TASK_LABELS = {
    "privacy_precheck": "Privacy pre-check",
    "ingest": "Ingest",
    "dpne.k1": "Vocabulary",
    "dpne.kgrams": "k-grams, levels 2..T",
    **{stage.name: stage.label for stage in (LM_COUNTS, BAYES, SYNTH)},  # one task each
    "validation": "Validation",
    "lm": "Language model",
    "report": "Report",
    "publish": "Publish",
    "publish_lm": "Publish language model",
}

#: The DAG's tasks between ``privacy_precheck`` and ``publish``: every step of :data:`STEPS`, in
#: order, the levels folded into ``dpne.kgrams``.
TASKS: tuple[Task, ...] = _tasks()


def task_upstreams(tasks: tuple[Task, ...] = TASKS) -> dict[str, tuple[str, ...]]:
    """Each task's direct upstream tasks, derived from what its steps read: the earlier tasks that
    write it, minus those already implied through another upstream (a transitive reduction, so the
    graph shows the flow: ``lm_counts``, ``bayes`` and ``synth`` fan out after the DPNE tasks and
    join at ``validation``). A task that reads nothing another task writes has no upstream here
    (the DAG puts ``privacy_precheck`` before it)."""
    producers: dict[str, list[str]] = {}
    needs: dict[str, set[str]] = {}
    for task in tasks:
        needs[task.name] = {p for artifact in task.reads for p in producers.get(artifact, ())}
        for artifact in task.writes:
            producers.setdefault(artifact, []).append(task.name)
    ancestors: dict[str, set[str]] = {}
    for task in tasks:  # in order: every upstream comes earlier
        ancestors[task.name] = set().union(*({u} | ancestors[u] for u in needs[task.name]))
    return {
        task.name: tuple(
            u
            for u in (t.name for t in tasks if t.name in needs[task.name])
            if not any(u in ancestors[other] for other in needs[task.name] if other != u)
        )
        for task in tasks
    }


def dag_upstreams(tasks: tuple[Task, ...] = TASKS) -> dict[str, tuple[str, ...]]:
    """Every task of the DAG with its direct upstream tasks, in order: ``privacy_precheck``, the
    plan's tasks (:func:`task_upstreams`; one that reads nothing another task writes runs after the
    pre-check), ``publish`` after the tasks nothing else reads from, ``publish_lm`` after it."""
    within = task_upstreams(tasks)
    read = {u for ups in within.values() for u in ups}
    return {
        "privacy_precheck": (),
        **{name: ups or ("privacy_precheck",) for name, ups in within.items()},
        "publish": tuple(name for name in within if name not in read),
        "publish_lm": ("publish",),
    }


#: The graph's task groups by group id: display names, and tooltips where the list of their tasks
#: (:func:`group_tip`) is not enough. ``dpne`` holds the DPNE steps (their names say so); the others
#: are the chains :func:`graph_groups` folds.
GROUP_LABELS = {
    "prepare": "Prepare",
    DPNE.name: DPNE.label,
    "release": "Release",
}
GROUP_TIPS = {DPNE.name: "Vocabulary (DPSU, k = 1), then the DPNE k-gram levels k = 2..T and their merge"}
#: Ids of the groups :func:`graph_groups` folds the chains into: the one the graph starts with, the
#: one it ends with.
CHAIN_GROUPS = ("prepare", "release")


def graph_groups(upstreams: dict[str, tuple[str, ...]] | None = None) -> dict[str, tuple[str, ...]]:
    """The DAG's task groups (group id -> task names, in order), for a graph that is readable at
    Airflow's default zoom and still shows the flow. Airflow fits the whole graph into the panel
    and lays every node out at least 216 px wide, so a graph 9 nodes long is drawn at about a third
    of its size (~6 px text at 1440x900); folded, it is 4 nodes long. The parallel part stays
    unfolded: ``lm_counts``, ``bayes`` and ``synth`` between the DPNE group and the join.

    Derived from the edges: a task every other task depends on or depends on it is on the chain
    (one after another, nothing beside it). Each run of two or more consecutive chain tasks outside
    a named group (``dpne.*``) becomes a group (Airflow groups without a task-id prefix: the ids
    stay): the run that starts the graph ``prepare``, the one that ends it ``release``
    (:data:`CHAIN_GROUPS`); a run in between is an error until it has a name. The DPNE tasks form
    ``dpne``."""
    upstreams = dag_upstreams() if upstreams is None else upstreams
    ancestors: dict[str, set[str]] = {}
    for name, ups in upstreams.items():  # in order: every upstream comes earlier
        ancestors[name] = set().union(*({u} | ancestors[u] for u in ups))

    def on_chain(name: str) -> bool:
        return all(o == name or o in ancestors[name] or name in ancestors[o] for o in upstreams)

    groups: dict[str, list[str]] = {}
    runs: list[list[str]] = [[]]
    for name in upstreams:
        named = _group_and_task_id(name)[0]
        if named is not None:
            groups.setdefault(named, []).append(name)
        if named is None and on_chain(name):
            runs[-1].append(name)
        elif runs[-1]:
            runs.append([])
    names = list(upstreams)
    folded: dict[str, tuple[str, ...]] = {}
    for run in (run for run in runs if len(run) > 1):
        if run[0] == names[0]:
            folded[CHAIN_GROUPS[0]] = tuple(run)
        elif run[-1] == names[-1]:
            folded[CHAIN_GROUPS[-1]] = tuple(run)
        else:
            raise ValueError(f"a chain in the middle of the graph ({run[0]} .. {run[-1]}): give it a group")
    return {**folded, **{group: tuple(members) for group, members in groups.items()}}


def group_tip(group: str, members: tuple[str, ...]) -> str:
    """The tooltip of a group in the graph: its own, or its tasks' names in order."""
    return GROUP_TIPS.get(group) or " -> ".join(TASK_LABELS[name] for name in members)


#: Steps a DPSU baseline (``dpngram baseline``) replaces by one step ``dpne``.
_DPNE_STEPS = ("dpne.k1", "dpne.kgrams", *(f"dpne.k{k}" for k in range(2, MAX_LEVEL + 1)))


def release_steps(
    config: RunConfig, baseline: str | None = None, baseline_k: int | None = None
) -> list[Step]:
    """The steps that run for ``config``, in order. With ``baseline`` ('dpsu-all' | 'dpsu-even' |
    'dpsu-single'), one DPSU baseline (step ``dpne``, DPNE §3.1.2) replaces the vocabulary and the
    levels."""
    steps = [step for step in STEPS if step.skip_reason(config) is None]
    if baseline is None:
        return steps
    first = next(i for i, step in enumerate(steps) if step.name in _DPNE_STEPS)
    rest = [step for step in steps if step.name not in _DPNE_STEPS]
    baseline_step = Step(DPNE.name, dpne_baseline, {"method": baseline, "k": baseline_k}, doc="DPSU baseline")
    return [*rest[:first], baseline_step, *rest[first:]]


def run_release(
    config: RunConfig,
    *,
    baseline: str | None = None,
    baseline_k: int | None = None,
    on_stage: Callable[[str, str, dict[str, Any]], None] | None = None,
    ingest_progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run a whole release in this process: the privacy pre-check, every step of
    :func:`release_steps`, publish.

    ``on_stage(name, event, summary)`` is called with event 'start' and 'done' (summary: the
    step's public summary). Any exception propagates; nothing is published unless every step
    (including validation) succeeded. Returns run_id, the release (a path, or a URL on object
    storage), the summaries and the privacy ledger's location."""
    from dpngram.release.context import with_run_id
    from dpngram.release.ledger import open_ledger

    config = with_run_id(config)
    # one process runs every step: the run's lock keeps a second process (a resume started twice)
    # from working on the same run at the same time
    with open_ledger() as ledger, ledger.run_lock(config.run_id, wait=0) as locked:
        if not locked:
            raise WarehouseBusy(
                f"run '{config.run_id}' is being worked on by another process (its lock in the ledger "
                f"{ledger.location} is held); wait for it to finish"
            )
        return {
            **_run_steps(config, baseline, baseline_k, on_stage, ingest_progress),
            "ledger": ledger.location,
        }


def _run_steps(
    config: RunConfig,
    baseline: str | None,
    baseline_k: int | None,
    on_stage: Callable[[str, str, dict[str, Any]], None] | None,
    ingest_progress: Callable[[int], None] | None,
) -> dict[str, Any]:
    """:func:`run_release` once it holds the run's lock."""
    from dpngram.release.context import RunContext, public_summary, stage_timer
    from dpngram.release.publish import AlreadyPublished, prepare, publish_run

    def announce(name: str, event: str, summary: dict[str, Any]) -> None:
        if on_stage:
            on_stage(name, event, summary)

    announce("privacy_precheck", "start", {})
    try:
        config = prepare(config)
    except AlreadyPublished as err:
        if not err.completed:
            raise
        # a kill had interrupted this run's publish after its rename: prepare completed it
        announce("privacy_precheck", "done", {"run_id": config.run_id})
        announce("publish", "done", {"path": str(err.path)})
        return {"run_id": config.run_id, "release": str(err.path), "stages": {}}
    announce("privacy_precheck", "done", {"run_id": config.run_id})
    ctx = RunContext(config)
    summaries: dict[str, dict[str, Any]] = {}
    try:
        for step in release_steps(config, baseline, baseline_k):
            announce(step.name, "start", {})
            extra = {"progress": ingest_progress} if step.name == "ingest" and ingest_progress else {}
            with stage_timer(ctx, step.name):
                summaries[step.name] = public_summary(step.run(ctx, **extra))
            announce(step.name, "done", summaries[step.name])
        announce("publish", "start", {})
        path = publish_run(ctx)
    except (Exception, KeyboardInterrupt) as err:
        note = after_failure(ctx, err)
        if note:
            err.add_note(note)
        raise
    announce("publish", "done", {"path": str(path)})
    return {"run_id": ctx.run_id, "release": str(path), "stages": summaries}


def release_if_unspent(ctx: RunContext) -> bool:
    """After a failure or refusal: release the run's budget reservation if no stage was charged
    (:meth:`~dpngram.release.ledger.Ledger.suspend_if_unspent`). Returns whether the run holds no
    reservation now; never raises (False when, e.g., the ledger cannot be reached)."""
    try:
        if ctx.release.published:
            return False
        with ctx.ledger() as ledger:
            return ledger.suspend_if_unspent(ctx.run_id)
    except (Exception, KeyboardInterrupt):  # noqa: BLE001 - the caller says what is left reserved
        return False


def after_failure(ctx: RunContext, err: BaseException) -> str | None:
    """What a failed run leaves behind, in one sentence for the error line, after releasing its
    budget reservation when it spent nothing (no ledger entry: no stage drew noise,
    :meth:`~dpngram.release.ledger.Ledger.suspend_if_unspent`). A run that was charged, or whose
    ledger cannot be reached now, keeps its reservation: the sentence names the run id, how to
    resume it and how to release it. Never raises (it runs on the way out of a failure)."""
    from dpngram.core.errors import ResourceExhausted, ResumeError

    run_id = ctx.run_id
    if ctx.release.published:
        return None
    released = release_if_unspent(ctx)
    if released:
        if isinstance(err, ResourceExhausted):
            return None  # its message says how to resume; nothing is reserved any more
        return f"run '{run_id}' spent nothing: its budget reservation was released"
    release = f"dpngram gc{_ledger_flag()} --run-id {run_id} --delete"
    if isinstance(err, ResumeError) or (isinstance(err, ResourceExhausted) and err.charged):
        return f"release run '{run_id}''s budget reservation (its charges stay) with `{release}`"
    return (
        f"run '{run_id}' keeps its budget reservation and any charges: resume it with the same command "
        f"and --run-id {run_id}, or release the reservation (its charges stay) with `{release}`"
    )


def _ledger_flag() -> str:
    """`` --ledger LOCATION`` for a command the operator should run next, when this process's
    ledger is not the per-user default (a PostgreSQL URL is shown without its password)."""
    from dpngram.release.ledger_store import default_ledger_path, describe_location, ledger_location

    location = ledger_location()
    if location == str(default_ledger_path().resolve()):
        return ""
    return f" --ledger {shlex.quote(describe_location(location))}"
