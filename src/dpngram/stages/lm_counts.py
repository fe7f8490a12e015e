"""Step ``lm_counts``: DP-noisy n-gram counts for the language model, and the mixture weight λ.

:func:`run_lm_counts` wires the step's mechanisms to the run: it reads the released vocabulary and
k-grams and the public corpus into the count domain (:func:`dpngram.mechanisms.lm_counts.build_domain`),
has the engine sum the private n-gram counts per user (:func:`~dpngram.mechanisms.lm_counts.weighted_counts`)
and releases them (:func:`~dpngram.mechanisms.lm_counts.release_counts`) to
``released/lm_counts.parquet``; with ``lm_mix_weight='auto'`` it has λ (and β) selected on disjoint
selection users (:mod:`dpngram.mechanisms.lm_selection`), and with verdict users the private-domain
verdict measured (:mod:`dpngram.mechanisms.lm_verdict`) on the models of
:mod:`dpngram.mechanisms.lm_models`. It spends the whole lm_counts share through
:func:`dpngram.release.spend.spend_once`, charging the events the count release names. The released
model M, built for the verdict, is stored in the public-model cache and scored beside P on the
held-out public sentences (report part key ``heldout_public``) for step ``lm``. The privacy
argument is in :mod:`dpngram.mechanisms.lm_counts` and ``docs/lm_privacy.md``.

Owns: the ``lm_counts`` step (its inputs from the release, the users' split, the wiring of the
count release, the selection and the verdict, the file and its report part).
Imports: dpngram.mechanisms.lm_counts, dpngram.mechanisms.lm_models, dpngram.mechanisms.lm_selection,
dpngram.mechanisms.lm_verdict, dpngram.lm, dpngram.release, dpngram.engines, dpngram.config,
dpngram.core; polars, pyarrow.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow.parquet as pq

from dpngram.config import RunConfig, stages
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.lm.build import (
    ReleasedInputs,
    adapted_public,
    heldout_public_metrics,
    heldout_public_part,
    released_mixture,
)
from dpngram.mechanisms.lm_counts import (
    WORK_TABLES,
    CountDomain,
    CountRelease,
    build_domain,
    release_counts,
    released_kgrams,
    weighted_counts,
)
from dpngram.mechanisms.lm_models import UNRESOLVED_UNIGRAMS, CandidateModels, private_model, public_scorer
from dpngram.mechanisms.lm_selection import candidate_grid, fixed_mix_weight, select_mix_weight
from dpngram.mechanisms.lm_verdict import private_domain_verdict
from dpngram.release.context import RunContext, StageResult, released_summary
from dpngram.release.identity import public_cache_dir
from dpngram.release.layout import LM_COUNTS, VOCABULARY
from dpngram.release.publish import public_problem
from dpngram.release.spend import spend_once

if TYPE_CHECKING:
    from dpngram.lm.backoff_scorer import BackoffScorer

log = logging.getLogger(__name__)

#: The stage's one name (declared in :mod:`dpngram.config.stages`).
STAGE = stages.LM_COUNTS.name


def run_lm_counts(ctx: RunContext, *, noise: NoiseSource | None = None) -> dict[str, Any]:
    """Stage ``lm_counts``: write ``released/lm_counts.parquet`` (n, ngram, noisy_count) and, with
    ``lm_mix_weight='auto'``, the selected weight λ (report part ``lm_counts``), via
    :func:`dpngram.release.spend.spend_once`. Returns a summary safe for XCom."""
    config = ctx.config
    epsilon, delta = config.stage_share(STAGE)
    split = _user_split(config)

    def compute(wh: Engine) -> StageResult:
        source = noise or NoiseSource.secure()
        root = ctx.release.root
        dp_vocab = _read_dp_vocabulary(root)
        domain = _count_domain(config, root, dp_vocab)
        # Keys the selection/counting partition of the users by id: parallel composition holds for
        # any salt, and it reaches the release only through the noise below (a selection salt:
        # running out of memory in the counting SQL charges nothing; docs/faults.md).
        salt = source.selection_salt()
        # A worker thread builds P's scorer (and with it the compiled code's start-up, 0.4-0.7 s
        # in a fresh process) and scores P on the held-out public sentences while the engine
        # counts, and stores M while this thread scores it: public data only.
        with ThreadPoolExecutor(1, thread_name_prefix="lm-scorer") as pool:
            step = _Step(ctx, wh, pool, source, salt, split, epsilon, delta)
            try:
                return step.count_and_release(domain, dp_vocab)
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise

    result = spend_once(ctx, STAGE, [LM_COUNTS], compute, engine=True)
    return released_summary(ctx, STAGE, result, [LM_COUNTS])


@dataclass(frozen=True)
class _UserSplit:
    """The users by keyed hash h in [0, 1000): selection [0, holdout), verdict [holdout, verdict),
    counting [verdict, 1000): disjoint, so the three parts compose in parallel (docs/lm_privacy.md).
    ``candidates``: the selection's (β, λ); with one, there are no selection users."""

    candidates: list[tuple[float, float]]
    holdout: int
    verdict: int

    @property
    def auto(self) -> bool:
        return len(self.candidates) > 1

    @property
    def has_verdict(self) -> bool:
        """Verdict users exist: the verdict builds the released model M here (else step ``lm``
        builds it and scores both models)."""
        return self.verdict > self.holdout


def _user_split(config: RunConfig) -> _UserSplit:
    """The users' split from the configuration, after its checks (ConfigError before any work)."""
    order = config.lm.order
    if order > 3:
        raise ConfigError(f"lm_order: the noisy-count model has at most order 3 (got {order})")
    if (problem := public_problem(config)) is not None:
        raise ConfigError(problem)
    candidates = candidate_grid(config.lm.mix_weight, config.lm.unigram_adaptation)
    holdout = int(round(1000 * config.lm.holdout)) if len(candidates) > 1 else 0
    verdict = holdout + int(round(1000 * config.lm.verdict_holdout))
    if verdict >= 1000:
        raise ConfigError(
            f"lm_holdout + lm_verdict_holdout: must leave users to count (got {config.lm.holdout:g} + "
            f"{config.lm.verdict_holdout:g})"
        )
    return _UserSplit(candidates, holdout, verdict)


@dataclass(frozen=True)
class _Step:
    """One execution of the step inside ``spend_once``: the engine, the worker thread, the noise
    source, the selection salt, the users' split and the stage's (ε, δ) its mechanisms are given."""

    ctx: RunContext
    wh: Engine
    pool: ThreadPoolExecutor
    noise: NoiseSource
    salt: int
    split: _UserSplit
    epsilon: float
    delta: float

    def count_and_release(self, domain: CountDomain, dp_vocab: list[str]) -> StageResult:
        """The step's work, in the order its noise is drawn: the counts, the selection's
        report-noisy-max, the verdict; then the file, the report part and the release's events.
        P's scorer and its held-out public scores run on the worker meanwhile."""
        config, pool, split = self.ctx.config, self.pool, self.split
        scorer = pool.submit(public_scorer, domain.public_model)
        public_heldout = (
            pool.submit(lambda: heldout_public_metrics(domain.public_model, config, scorer.result()))
            if split.has_verdict
            else None
        )
        counts = self._release_counts(domain)
        private = private_model(
            counts, domain.public_model, config.lm.order, discount_sigmas=config.lm.count_discount
        )
        models = CandidateModels(domain.public_model, private, scorer.result(), adapt=adapted_public)
        if split.has_verdict:
            models.union_ahead(pool)
        adaptation, weight, selection = self._choose_weight(models)
        private_domain = self._verdict(models, adaptation, weight) if split.has_verdict else None
        with self.ctx.release.writing(LM_COUNTS) as tmp_path:
            pq.write_table(counts.table, tmp_path)
        self.wh.drop(self.ctx.schema, *WORK_TABLES)
        report = _counts_report(
            config,
            domain=domain,
            dp_vocab=dp_vocab,
            counts=counts,
            adaptation=adaptation,
            weight=weight,
            selection=selection,
            epsilon=self.epsilon,
            delta=self.delta,
            noise_mode=self.noise.mode,
        )
        report["private_domain"] = private_domain
        model = models.released_models.get((adaptation, weight))
        if model is not None and public_heldout is not None:
            released = models.released(adaptation, weight)
            report["heldout_public"] = _for_step_lm(
                pool, config, self.ctx.release.root, report, model, released, public_heldout
            )
        return StageResult(events=counts.events(STAGE), report=report)

    def _release_counts(self, domain: CountDomain) -> CountRelease:
        """The counting users' bounded sums from the engine, released with the stage's (ε, δ)."""
        lm = self.ctx.config.lm
        clip, power = float(lm.count_clip), float(lm.count_power)
        return release_counts(
            weighted_counts(
                self.wh,
                self.ctx.schema,
                domain,
                salt=self.salt,
                holdout=self.split.verdict,
                clip=clip,
                power=power,
            ),
            domain,
            epsilon=self.epsilon,
            delta=self.delta,
            clip=clip,
            threshold_sigmas=lm.count_threshold,
            noise=self.noise,
        )

    def _choose_weight(self, models: CandidateModels) -> tuple[float, float, dict[str, Any]]:
        """(adaptation, weight) and the selection's report: selected on the selection users at
        :func:`selection_epsilon`, or the configured pair."""
        if not self.split.auto:
            return fixed_mix_weight(self.split.candidates)
        return select_mix_weight(
            self.wh,
            self.ctx.schema,
            models,
            self.split.candidates,
            salt=self.salt,
            holdout=self.split.holdout,
            epsilon=selection_epsilon(self.ctx.config),
            noise=self.noise,
            pool=self.pool,
        )

    def _verdict(self, models: CandidateModels, adaptation: float, weight: float) -> dict[str, Any]:
        """The private-domain verdict on the verdict users at the stage's (ε, δ): the released
        model M at the chosen (β, λ) against P."""
        return private_domain_verdict(
            self.wh,
            self.ctx.schema,
            public=models.public(0.0),
            released=models.released(adaptation, weight),
            salt=self.salt,
            holdout=self.split.holdout,
            verdict=self.split.verdict,
            epsilon=self.epsilon,
            delta=self.delta,
            noise=self.noise,
            pool=self.pool,
        )


def _for_step_lm(
    pool: ThreadPoolExecutor,
    config: RunConfig,
    root: Path,
    report: dict[str, Any],
    model: Any,
    scorer: BackoffScorer,
    public_heldout: Future[dict[str, Any] | None],
) -> dict[str, Any] | None:
    """Best effort, once the counts are released: M (the model step ``lm`` writes, built here for
    the verdict) stored in the public-model cache by the worker thread while this one scores M on
    the held-out public sentences; M's and P's scores are returned for report part key
    ``heldout_public`` (None: step ``lm`` scores them). Public data and post-processing only. A
    failure here only leaves the work to step ``lm``; it must not fail this step, whose noise is
    drawn (such a step cannot be run again: docs/faults.md)."""
    storing = pool.submit(released_mixture, ReleasedInputs(root), config, report, lambda: model)
    try:
        scored = heldout_public_part(heldout_public_metrics(model, config, scorer), public_heldout.result())
    except Exception as err:  # noqa: BLE001 - step lm scores both models again
        log.warning("lm_counts: the held-out public comparison is left to step lm: %s", err)
        scored = None
    try:
        storing.result()
    except Exception as err:  # noqa: BLE001 - step lm builds M again and reports its own failure
        log.warning("lm_counts: the released model was not cached for step lm: %s", err)
    return scored


def _read_dp_vocabulary(root: Path) -> list[str]:
    """The DP vocabulary released by step ``dpne.k1`` (non-empty tokens)."""
    vocab_path = root / VOCABULARY
    if not vocab_path.is_file():
        raise ConfigError(
            "lm_counts: released/vocabulary.parquet is missing (run the vocabulary stage first)"
        )
    return [t for t in pq.read_table(vocab_path, columns=["token"])["token"].to_pylist() if t]


def _count_domain(config: RunConfig, root: Path, dp_vocab: list[str]) -> CountDomain:
    """The public n-gram domain counted by the stage (DP vocabulary, public corpus, released k-grams)."""
    order = config.lm.order
    kgrams = {n: released_kgrams(root, n) for n in range(2, order + 1)}
    return build_domain(
        dp_vocab,
        config.public,
        order=order,
        public_cap=config.lm.public_vocab_size,
        domain_cap=config.lm.count_domain,
        kgrams=kgrams,
        lowercase=config.lowercase,
        cache_dir=public_cache_dir(config),
        public_prune=config.lm.public_prune,
    )


def selection_epsilon(config: RunConfig) -> float:
    """The pure ε of the weight selection (report-noisy-max on the selection users). Not the
    stage's ε: a selection user pays every other stage plus this pure-ε mechanism, and under
    joint calibration the stage's ε is sized for a Gaussian, which composes sub-additively with
    the other stages' Gaussians where a pure-ε mechanism adds linearly. So the selection gets
    what the run's composed total leaves after the other stages (docs/lm_privacy.md, section 4):
    with the default split, 1.04 of a stage ε of 2.38 at run ε = 4, 0.25 of 0.60 at ε = 1."""
    from dpngram.config.budget_plan import stage_privacy_shapes
    from dpngram.core.accounting import parallel_pure_epsilon

    shapes = stage_privacy_shapes(config.dpne.threshold_delta, config.dpne.vocabulary_method)
    return parallel_pure_epsilon(config.budget_plan(), shapes, STAGE)


def _counts_report(
    config: RunConfig,
    *,
    domain: CountDomain,
    dp_vocab: list[str],
    counts: CountRelease,
    adaptation: float,
    weight: float,
    selection: dict[str, Any],
    epsilon: float,
    delta: float,
    noise_mode: str,
) -> dict[str, Any]:
    """Report part ``lm_counts``: the domain, the calibration, what was released, the chosen weight."""
    order = config.lm.order
    sigma, calibration, released = counts.sigma, counts.calibration, counts.rows
    return {
        "method": "Gaussian mechanism on per-user l2-bounded n-gram counts over a public domain, "
        f"each user's counts to the power {config.lm.count_power:g}",
        "order": order,
        "domain_size": domain.size,
        "domain_by_order": {
            str(n): int(domain.frame.filter(pl.col("n") == n).height) for n in range(1, order + 1)
        },
        "model_vocabulary_size": len(domain.vocabulary),
        "dp_vocabulary_size": len(dp_vocab),
        "clip_l2": float(config.lm.count_clip),
        "count_power": float(config.lm.count_power),
        "sigma": sigma,
        "grid": calibration.grid,
        "snapped_sensitivity": calibration.snapped_sensitivity,
        "threshold": counts.threshold,
        "discount": config.lm.count_discount * sigma,
        "unresolved_unigrams": UNRESOLVED_UNIGRAMS,
        "released_by_order": {
            str(n): int(released.filter(pl.col("n") == n).height) for n in range(1, order + 1)
        },
        "mix_weight": weight,
        "unigram_adaptation": adaptation,
        "weight_selection": selection,
        "differentially_private": True,
        "guarantee": (
            f"user-level ({epsilon:.4g}, {delta:.3g})-differential privacy for this stage (Gaussian "
            "counts on the counting users, report-noisy-max on the disjoint selection users at "
            "the pure epsilon the run's total leaves beside the other stages; docs/lm_privacy.md)"
        ),
        "noise_mode": noise_mode,
    }
