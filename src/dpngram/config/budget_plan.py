"""The budget plan: whether each budgeted stage runs, and with what share of the run's budget.

The single home of these rules: the plan (:mod:`dpngram.orchestration.plan`) skips a step with
:func:`stage_skip_reason` / :func:`lm_skip_reason`, a stage calibrates its noise to
:func:`stage_share` (``RunConfig.stage_share``), the report records :func:`budget_plan`, and the
CLI prints :func:`run_notices` before a run. A stage that does not run gets no budget: its
fraction goes to the running stages (:func:`budget_plan`).

Each stage's privacy shape (how its (epsilon, delta) becomes privacy events) is declared here, in
:func:`stage_privacy_shapes`, next to the calibration that composes them: the configuration sits
below the stages (docs/architecture.md), and the DAG file computes skip rules at parse time without
importing any stage; tests/test_budget_plan.py checks each shape against its stage's calibration.

Owns: ``STAGES``, ``DEFAULT_STAGE_BUDGET``, ``LM_SOURCE``, ``PUBLIC_READERS``, :func:`stage_skip_reason`,
:func:`triehh_skip_reason`, :func:`lm_skip_reason`, :func:`reads_public_corpus`,
:func:`run_notices`, :func:`nominal_share`, :func:`stage_share`, :func:`budget_plan`,
:func:`stage_privacy_shapes`.
Imports: dpngram.config.stages, dpngram.core (the accountant lazily: numpy and scipy only when a budget
is planned).
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any, Protocol

from dpngram.config.stages import BUDGETED_STAGES, LM_COUNTS, STAGE_BY_NAME
from dpngram.core.budget import Budget
from dpngram.core.errors import BudgetError, ConfigError

if TYPE_CHECKING:  # the accountant (numpy, scipy: ~1.5 s) is imported only when a budget is planned,
    # not when the Airflow DAG file is parsed (docs/orchestration.md, "Task start-up cost")
    from dpngram.core.accounting import BudgetPlan, StagePrivacy


class RunConfig(Protocol):
    """What the budget plan reads of a :class:`dpngram.config.run.RunConfig` (which imports this
    module: imports flow one way, so the plan names the parameters it needs instead)."""

    epsilon: float
    delta: float
    stage_budget: dict[str, float]
    budget_calibration: str
    public: Any
    follow_external_symlinks: bool
    dpne: Any
    lm: Any

    @property
    def budget(self) -> Budget: ...


#: Stages that spend privacy budget, in run order (declared in :mod:`dpngram.config.stages`).
#: ``stage_budget`` splits (epsilon, delta) among the ones that are enabled.
STAGES = tuple(stage.name for stage in BUDGETED_STAGES)

#: The default ``stage_budget`` (each stage's ``default_share``): every stage the product promises
#: (vocabulary and k-grams, the language model's noisy counts, the Bayesian trigram distribution,
#: synthetic text), so a run with every default publishes a language model. ``dpngram demo`` uses
#: the same split. Chosen by measuring the model against the split (docs/lm-history.md, "Budget
#: split: measured"): within 5% perplexity of the best split that delivers every artifact at ε 4
#: and 1, with as many DPNE k-grams as the previous default (dpne 0.4, lm_counts 0.3, bayes 0.15,
#: synth 0.15, 5.1% worse at ε = 1).
DEFAULT_STAGE_BUDGET: dict[str, float] = {s.name: s.default_share for s in BUDGETED_STAGES if s.default_share}

#: The stage whose release the language model is built from (step ``lm``; the routes that built one
#: from ``bayes`` or ``synth`` were retired on 2026-11-27, docs/lm.md).
LM_SOURCE = LM_COUNTS.name


#: Stages that read the public corpus: ``bayes`` (its prior) and ``lm_counts`` (the public n-grams of
#: its count domain and the public model the selection, the verdict and step ``lm`` build).
PUBLIC_READERS = tuple(stage.name for stage in BUDGETED_STAGES if stage.reads_public)


def stage_skip_reason(config: RunConfig, stage: str) -> str | None:
    """Why a budgeted stage will not run (None when it runs): no share, or a missing input it
    needs (the Bayesian stage's prior is the public corpus). A stage that does not run gets no
    budget: the running stages share the run's budget (:func:`budget_plan`)."""
    if stage not in config.stage_budget:
        return f"stage_budget has no '{stage}' share"
    if STAGE_BY_NAME[stage].needs_public and config.public is None:
        return f"no public corpus (the prior of the {stage} stage): set public to run it"
    return None


def dpne_share_problem(config: RunConfig) -> str | None:
    """Why the split cannot run: the DPNE steps always run (every other stage reads the vocabulary,
    and the k-gram levels follow it), and they draw noise from the dpne share unless the vocabulary
    is TrieHH's and T = 1. Without that share the run would stop at its vocabulary, after ingest.
    None when the split is runnable."""
    if "dpne" in config.stage_budget:
        return None
    method, max_n = config.dpne.vocabulary_method, config.dpne.max_n
    if method == "triehh" and max_n == 1:
        return None
    needs = "the DPSU vocabulary" if method != "triehh" else f"the k-gram levels 2..{max_n}"
    example = {"dpne": 0.5, **{s: round(0.5 / len(config.stage_budget), 4) for s in config.stage_budget}}
    return (
        f"stage_budget: {json.dumps(config.stage_budget)} has no 'dpne' share, but every run releases "
        f"{needs} from it (every other stage reads the vocabulary); give dpne a share, for example "
        f"{json.dumps(example)}"
    )


def triehh_skip_reason(config: RunConfig) -> str | None:
    """Why TrieHH word discovery does not run: the vocabulary method does not use it, or no share."""
    method = config.dpne.vocabulary_method
    if method not in ("triehh", "both"):
        return f"vocabulary_method is '{method}': no TrieHH stage"
    return stage_skip_reason(config, "triehh")


def lm_skip_reason(config: RunConfig) -> str | None:
    """Why the run builds no language model, or None when it builds one."""
    if config.lm.route == "off":
        return "lm_route is 'off'"
    if LM_SOURCE not in config.stage_budget:
        return f"stage_budget has no '{LM_SOURCE}' share (the model is built from its noisy counts)"
    return None


def reads_public_corpus(config: RunConfig) -> bool:
    """Whether a running stage reads the public corpus (:data:`PUBLIC_READERS`)."""
    return any(stage in config.stage_budget for stage in PUBLIC_READERS)


def run_notices(config: RunConfig) -> list[str]:
    """What an operator should know before a run starts, in one line each: budgeted stages that
    will not run (and why), and a language model without a public corpus (its vocabulary is then
    the DP vocabulary alone and its public part a uniform distribution)."""
    notices = [
        f"{name} will not run: {reason}"
        for name in config.stage_budget
        if (reason := stage_skip_reason(config, name)) is not None
    ]
    lm_reason = lm_skip_reason(config)
    if lm_reason is not None and config.lm.route != "off":
        notices.append(f"no language model: {lm_reason}")
    if config.public is None and lm_reason is None:
        notices.append(
            "no public corpus: the language model's vocabulary is the DP vocabulary alone and its "
            "public part is uniform; set public to a text of the same language for a useful model"
        )
    if config.follow_external_symlinks:
        notices.append(
            "follow_external_symlinks is on: files of the input directory whose symbolic link "
            "resolves outside it are read (the report records it)"
        )
    return notices


def nominal_share(config: RunConfig, stage: str) -> Budget:
    """``stage``'s fraction of the run's (epsilon, delta), as ``stage_budget`` gives it."""
    fraction = config.stage_budget.get(stage, 0.0)
    if fraction <= 0:
        raise ConfigError(f"stage_budget: stage '{stage}' has no budget (set stage_budget.{stage})")
    return config.budget * fraction


def stage_share(config: RunConfig, stage: str) -> Budget:
    """The (epsilon, delta) ``stage`` calibrates its noise to (unpacks as ``epsilon, delta``):
    its nominal share with epsilon scaled by the joint calibration's factor, so that all the
    stages together compose to exactly the run's budget (:func:`budget_plan`)."""
    nominal_share(config, stage)  # refuses a stage without a share
    calibrated = budget_plan(config).calibrated
    if stage not in calibrated:
        raise ConfigError(f"stage_budget: stage '{stage}' does not run: {stage_skip_reason(config, stage)}")
    return calibrated[stage]


def budget_plan(config: RunConfig) -> BudgetPlan:
    """Every running budgeted stage's calibrated budget
    (:func:`dpngram.core.accounting.joint_calibration`). Stages that will not run
    (:func:`stage_skip_reason`) get nothing: their fractions go to the running stages in
    proportion, so no budget is reserved for work that does not run. Pure function of the
    privacy parameters; computed once per distinct set of them."""
    running = {s: f for s, f in config.stage_budget.items() if stage_skip_reason(config, s) is None}
    if running:  # the shares of stages that do not run go to the others, proportionally
        scale = sum(config.stage_budget.values()) / sum(running.values())
        running = {s: min(1.0, f * scale) for s, f in running.items()}
    return _calibrated_plan(
        tuple(sorted(running.items())),
        config.epsilon,
        config.delta,
        config.dpne.threshold_delta,
        config.dpne.vocabulary_method,
        config.budget_calibration,
    )


def stage_privacy_shapes(threshold_delta: float, vocabulary_method: str) -> dict[str, StagePrivacy]:
    """How each budgeted stage turns its (epsilon, delta) into privacy events
    (:meth:`dpngram.config.stages.BudgetedStage.privacy_shape`; tests/test_budget_plan.py checks
    each against the events its mechanism returns)."""
    return {stage.name: stage.privacy_shape(threshold_delta, vocabulary_method) for stage in BUDGETED_STAGES}


@functools.lru_cache(maxsize=64)
def _calibrated_plan(
    fractions: tuple[tuple[str, float], ...],
    epsilon: float,
    delta: float,
    threshold_delta: float,
    vocabulary_method: str,
    calibration: str,
) -> BudgetPlan:
    from dpngram.core.accounting import joint_calibration

    shapes = stage_privacy_shapes(threshold_delta, vocabulary_method)
    try:
        return joint_calibration(
            shapes, dict(fractions), Budget(epsilon, delta), joint=calibration == "joint"
        )
    except BudgetError as err:
        raise ConfigError(f"stage_budget: {err}") from None
