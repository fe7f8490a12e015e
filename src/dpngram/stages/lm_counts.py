"""Step ``lm_counts``: DP-noisy n-gram counts for the language model, and the mixture weight λ.

:func:`run_lm_counts` builds the count domain from public data and DP outputs only (the released
vocabulary and k-grams, the public corpus), counts the private n-grams per user in the engine
(``sql/lm_counts/weighted.sql``, the trigrams of ``sql/bayes/_trigrams.sql`` inline, matched
to the domain by integer keys), releases the noisy counts to
``released/lm_counts.parquet`` and, with ``lm_mix_weight='auto'``, selects λ on disjoint selection
users; it spends the whole lm_counts share through :func:`dpngram.release.spend.spend_once`. The
released model M, built here for the private-domain verdict, is stored in the public-model cache
and scored beside P on the held-out public sentences (report part key ``heldout_public``) for step
``lm``. The steps and their privacy argument are in :mod:`dpngram.mechanisms.lm_counts` and
``docs/lm_privacy.md``.

Owns: the ``lm_counts`` step (wiring the domain, the counting SQL, the release and its report part).
Imports: dpngram.mechanisms.lm_counts, dpngram.lm, dpngram.release, dpngram.engines,
dpngram.config, dpngram.core; numpy, polars, pyarrow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from dpngram.config import RunConfig
from dpngram.core.accounting import PrivacyEvent
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.lm.build import ReleasedInputs, heldout_public_metrics, heldout_public_part, released_mixture
from dpngram.mechanisms.lm_counts import (
    COUNTING_PARAMS,
    COUNTS_SCHEMA,
    DOMAIN_TABLE,
    SCORE_DEVIATION_CLIP_NATS,
    SCORE_RANGE_NATS,
    STAGE,
    VOCABULARY_TABLE,
    WEIGHTED_TABLE,
    WORK_TABLES,
    CountDomain,
    build_domain,
    candidate_grid,
    counting_tables,
    noisy_release,
    release_verdict,
    released_kgrams,
    score_selection_users,
    score_verdict_users,
    select_weight,
    selection_noise,
)
from dpngram.release.context import RunContext, StageResult, released_summary
from dpngram.release.identity import public_cache_dir
from dpngram.release.layout import LM_COUNTS, VOCABULARY
from dpngram.release.publish import public_problem
from dpngram.release.spend import spend_once

if TYPE_CHECKING:
    from dpngram.lm.backoff_scorer import BackoffScorer

log = logging.getLogger(__name__)


def run_lm_counts(ctx: RunContext, *, noise: NoiseSource | None = None) -> dict[str, Any]:
    """Stage ``lm_counts``: write ``released/lm_counts.parquet`` (n, ngram, noisy_count) and, with
    ``lm_mix_weight='auto'``, the selected weight λ (report part ``lm_counts``), via
    :func:`dpngram.release.spend.spend_once`. Returns a summary safe for XCom."""
    config = ctx.config
    epsilon, delta = config.stage_share(STAGE)
    order = config.lm.order
    if order > 3:
        raise ConfigError(f"lm_order: the noisy-count model has at most order 3 (got {order})")
    if (problem := public_problem(config)) is not None:
        raise ConfigError(problem)
    candidates = candidate_grid(config.lm.mix_weight, config.lm.unigram_adaptation)
    auto = len(candidates) > 1
    holdout = int(round(1000 * config.lm.holdout)) if auto else 0
    # Users by keyed hash h in [0, 1000): selection [0, holdout), verdict [holdout, verdict),
    # counting [verdict, 1000): disjoint, so the three parts compose in parallel (docs/lm_privacy.md).
    verdict = holdout + int(round(1000 * config.lm.verdict_holdout))
    if verdict >= 1000:
        raise ConfigError(
            f"lm_holdout + lm_verdict_holdout: must leave users to count (got {config.lm.holdout:g} + "
            f"{config.lm.verdict_holdout:g})"
        )

    def compute(wh: Engine) -> StageResult:
        # A worker thread builds P's scorer (and with it the compiled code's start-up, 0.4-0.7 s
        # in a fresh process) and scores P on the held-out public sentences while the engine
        # counts, and stores M while this thread scores it: public data only.
        with ThreadPoolExecutor(1, thread_name_prefix="lm-scorer") as pool:
            try:
                return count_and_release(wh, pool)
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise

    def count_and_release(wh: Engine, pool: ThreadPoolExecutor) -> StageResult:
        source = noise or NoiseSource.secure()
        root, schema = ctx.release.root, ctx.schema
        dp_vocab = _read_dp_vocabulary(root)
        domain = _count_domain(config, root, dp_vocab)
        # Keys the selection/counting partition of the users by id: parallel composition holds for
        # any salt, and it reaches the release only through the noise below (a selection salt:
        # running out of memory in the counting SQL charges nothing; docs/faults.md).
        salt = source.selection_salt()
        public_scorer = pool.submit(_public_scorer, domain.public_model)
        # (only when the verdict builds M here: else step lm builds and scores both models)
        public_heldout = (
            pool.submit(lambda: heldout_public_metrics(domain.public_model, config, public_scorer.result()))
            if verdict > holdout
            else None
        )
        clip, power = float(config.lm.count_clip), float(config.lm.count_power)
        weighted = _weighted_counts(wh, schema, domain, salt=salt, holdout=verdict, clip=clip, power=power)
        noisy, calibration = noisy_release(weighted, epsilon=epsilon, delta=delta, clip=clip, noise=source)
        del weighted
        sigma = calibration.sigma
        threshold = config.lm.count_threshold * sigma
        released, table = _thresholded_release(domain, noisy, threshold)
        private = _private_model(released, domain, order, threshold, config.lm.count_discount * sigma, sigma)
        selection: dict[str, Any]
        models = _Models(domain.public_model, private, public_scorer.result())
        if verdict > holdout:  # the verdict builds the released model M here
            models.union_ahead(pool)
        if auto:
            adaptation, weight, selection = _select_mix_weight(
                wh,
                schema,
                models,
                candidates,
                salt=salt,
                holdout=holdout,
                epsilon=selection_epsilon(config),
                source=source,
                pool=pool,
            )
        else:
            adaptation, weight = candidates[0]
            selection = {"method": "fixed (configuration)"}
        private_domain = None
        if verdict > holdout:
            private_domain = _private_domain_verdict(
                wh,
                schema,
                models,
                adaptation=adaptation,
                weight=weight,
                salt=salt,
                holdout=holdout,
                verdict=verdict,
                epsilon=epsilon,
                delta=delta,
                source=source,
                pool=pool,
            )
        with ctx.release.writing(LM_COUNTS) as tmp_path:
            pq.write_table(table, tmp_path)
        wh.drop(schema, *WORK_TABLES)
        report = _counts_report(
            config,
            domain=domain,
            dp_vocab=dp_vocab,
            calibration=calibration,
            threshold=threshold,
            released=released,
            adaptation=adaptation,
            weight=weight,
            selection=selection,
            epsilon=epsilon,
            delta=delta,
            noise_mode=source.mode,
        )
        report["private_domain"] = private_domain
        model = models.released_models.get((adaptation, weight))
        if model is not None and public_heldout is not None:
            report["heldout_public"] = _for_step_lm(
                pool, config, root, report, model, models.released(adaptation, weight), public_heldout
            )
        return StageResult(events=[_counts_event(calibration)], report=report)

    result = spend_once(ctx, STAGE, [LM_COUNTS], compute, engine=True)
    return released_summary(ctx, STAGE, result, [LM_COUNTS])


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
    )


def _load_domain_tables(wh: Engine, schema: str, domain: CountDomain) -> None:
    """Load the model vocabulary and the n-gram domain, as word ids, into the engine's work tables."""
    vocab_table, domain_table = counting_tables(domain.vocabulary, domain.frame, domain.keys)
    wh.load_table(schema, VOCABULARY_TABLE, [vocab_table], vocab_table.schema)
    wh.load_table(schema, DOMAIN_TABLE, [domain_table], domain_table.schema)


def _weighted_counts(
    wh: Engine, schema: str, domain: CountDomain, *, salt: int, holdout: int, clip: float, power: float
) -> np.ndarray:
    """The summed per-user l2-bounded n-gram counts over the domain (index gid - 1), before noise:
    each user's counts to the power ``power`` (``lm_count_power``), the vector scaled to norm ≤ ``clip``."""
    _load_domain_tables(wh, schema, domain)
    wh.execute(
        load_sql(
            "lm_counts/weighted",
            schema=schema,
            target=WEIGHTED_TABLE,
            source="sentences",
            vocabulary=VOCABULARY_TABLE,
            domain=DOMAIN_TABLE,
        ),
        {
            "salt": int(salt),
            "holdout_per_mille": holdout,
            "clip": clip,
            **COUNTING_PARAMS,
            "count_power": power,
        },
    )
    cols = wh.fetch_numpy(f"SELECT gid, weighted FROM {schema}.{WEIGHTED_TABLE}")
    weighted = np.zeros(domain.size, dtype=np.float64)
    weighted[np.asarray(cols["gid"], dtype=np.int64) - 1] = np.asarray(cols["weighted"], dtype=np.float64)
    return weighted


def _thresholded_release(
    domain: CountDomain, noisy: np.ndarray, threshold: float
) -> tuple[pl.DataFrame, pa.Table]:
    """The released rows (every unigram; longer n-grams at or above the threshold) and their table,
    sorted by (n, ngram) (the domain's higher orders end with the released k-grams it adds)."""
    released = domain.frame.with_columns(noisy_count=pl.Series(noisy)).filter(
        (pl.col("n") == 1) | (pl.col("noisy_count") >= threshold)
    )
    ones = released["n"] == 1
    released = pl.concat([released.filter(ones), released.filter(~ones).sort("n", "ngram")])
    table = pa.table(
        {
            "n": pa.array(released["n"].to_numpy().astype(np.int8)),
            "ngram": pa.array(released["ngram"].to_list(), pa.string()),
            "noisy_count": pa.array(released["noisy_count"].to_numpy(), pa.float64()),
        },
        schema=COUNTS_SCHEMA,
    )
    return released, table


def _public_scorer(public_model: Any) -> BackoffScorer:
    """P's scorer (:class:`_Models` takes it built)."""
    from dpngram.lm.backoff_scorer import BackoffScorer

    return BackoffScorer.from_model(public_model)


class _Models:
    """The stage's models, as scorers built once each: Q, P and P adapted at each strength β the
    selection scores (P itself at β = 0), and the released model (the mixture merged into one
    backoff model, as step ``lm`` builds it) that the verdict scores."""

    def __init__(
        self, public_model: Any, private_model: Any, public_scorer: BackoffScorer | None = None
    ) -> None:
        self._public, self._private = public_model, private_model
        self._scorers: dict[str, BackoffScorer] = {} if public_scorer is None else {"public": public_scorer}
        self._adapted: dict[float, Any] = {}
        self._union: Future[Any] | None = None
        self.released_models: dict[tuple[float, float], Any] = {}

    def union_ahead(self, pool: ThreadPoolExecutor) -> None:
        """Have ``pool``'s worker compute the n-gram union of P and Q now, for the released model
        (:meth:`released`) that the verdict builds after the selection: the union is the same for
        every adapted P (P's rows), and the worker is idle while this thread adapts P for the
        selection. A failure there only makes :meth:`released` compute the union itself."""
        from dpngram.lm.mixture import NgramUnion

        self._union = pool.submit(NgramUnion.of, self._public, self._private)

    def _union_of(self) -> Any:
        if self._union is None:
            return None
        try:
            return self._union.result()
        except Exception as err:  # noqa: BLE001 - mix_models computes it again
            log.warning("lm_counts: the n-gram union computed ahead failed: %s", err)
            return None

    def _scorer(
        self, name: str, build: Callable[[], Any], like: BackoffScorer | None = None
    ) -> BackoffScorer:
        from dpngram.lm.backoff_scorer import BackoffScorer

        if name not in self._scorers:
            self._scorers[name] = BackoffScorer.from_model(build(), like)
        return self._scorers[name]

    def _adapted_model(self, beta: float) -> Any:
        from dpngram.lm.build import adapted_public

        if beta not in self._adapted:
            self._adapted[beta] = adapted_public(self._public, self._private, beta)
        return self._adapted[beta]

    def private(self) -> BackoffScorer:
        return self._scorer("private", lambda: self._private)

    def public(self, beta: float) -> BackoffScorer:
        if beta == 0:
            return self._scorer("public", lambda: self._public)
        return self._scorer(
            f"public_adapted_{beta!r}",
            lambda: self._adapted_model(beta),
            like=self.public(0),  # P's n-grams: its hash tables serve every β
        )

    def released(self, beta: float, weight: float) -> BackoffScorer:
        """The model step ``lm`` writes (``dpngram.lm.build.build_route_mixture``): weight·Q +
        (1 − weight)·P_β merged into one backoff model. Not the per-event mixture the selection
        scores: they differ where neither model lists an n-gram (docs/lm.md, "Mixture")."""
        from dpngram.lm.mixture import mix_models

        def build() -> Any:
            model = mix_models(self._adapted_model(beta), self._private, weight, union=self._union_of())
            self.released_models[(beta, weight)] = model
            return model

        return self._scorer(f"released_{beta!r}_{weight!r}", build)


#: How Q spreads the unigram mass below the threshold (``noisy_count_model``'s ``unresolved``;
#: report part key ``unresolved_unigrams``, which step ``lm`` reads back).
UNRESOLVED_UNIGRAMS = "empirical_bayes"


def _private_model(
    released: pl.DataFrame,
    domain: CountDomain,
    order: int,
    threshold: float,
    discount: float,
    sigma: float,
) -> Any:
    """Q: the model of the released noisy counts (post-processing; lm/open_model.py)."""
    from dpngram.lm.open_model import noisy_count_model

    return noisy_count_model(
        released.select("n", "ngram", "noisy_count"),
        domain.public_model,
        order,
        threshold=threshold,
        discount=discount,
        unresolved=UNRESOLVED_UNIGRAMS,
        sigma=sigma,
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


def _select_mix_weight(
    wh: Engine,
    schema: str,
    models: _Models,
    candidates: list[tuple[float, float]],
    *,
    salt: int,
    holdout: int,
    epsilon: float,
    source: NoiseSource,
    pool: ThreadPoolExecutor | None = None,
) -> tuple[float, float, dict[str, Any]]:
    """(adaptation, weight) chosen by report-noisy-max on the selection users, and its report.
    ``pool``: the stage's worker, which scores every other model."""
    betas = sorted({b for b, _ in candidates})
    lams = tuple(sorted({lam for _, lam in candidates}))
    scores = _selection_scores(wh, schema, models, betas, lams, salt=salt, holdout=holdout, pool=pool)
    order_of_scores = [(b, lam) for b in betas for lam in lams]
    # Always through report-noisy-max, even with no selection user (the sum over nobody is
    # the zero vector): whether one user exists must not change what is released.
    _, best = select_weight(scores, epsilon, source, grid=tuple(range(len(order_of_scores))))
    adaptation, weight = order_of_scores[best]
    del scores
    selection = {
        "method": "report-noisy-max over the (adaptation, weight) grid on disjoint selection users",
        "grid": list(lams),
        "adaptation_grid": list(betas),
        "score_deviation_clip_nats": SCORE_DEVIATION_CLIP_NATS,
        "sensitivity_nats": SCORE_RANGE_NATS,
        "epsilon": epsilon,
        "laplace_scale": selection_noise(epsilon)[0],
        "selection_fraction": holdout / 1000.0,
    }
    return adaptation, weight, selection


def _selection_scores(
    wh: Engine,
    schema: str,
    models: _Models,
    betas: list[float],
    lams: tuple[float, ...],
    *,
    salt: int,
    holdout: int,
    pool: ThreadPoolExecutor | None = None,
) -> np.ndarray:
    """Summed clipped, centred scores of every (adaptation, weight) candidate over the selection users
    (PRIVATE, kept in the run's process), through the scorers of the private and public models
    (``pool``: the worker scores every other model)."""
    scores, _ = score_selection_users(
        wh,
        schema,
        salt=salt,
        holdout_per_mille=holdout,
        publics=[models.public(b) for b in betas],
        private=models.private(),
        weights=lams,
        pool=pool,
    )
    return scores


def _private_domain_verdict(
    wh: Engine,
    schema: str,
    models: _Models,
    *,
    adaptation: float,
    weight: float,
    salt: int,
    holdout: int,
    verdict: int,
    epsilon: float,
    delta: float,
    source: NoiseSource,
    pool: ThreadPoolExecutor | None = None,
) -> dict[str, Any]:
    """The private-domain verdict (docs/lm_privacy.md): the verdict users' clipped log-losses under
    the released model (the noisy-count model Q and the public model adapted at the chosen β, mixed
    at the chosen λ and merged into one backoff model: the model step ``lm`` writes) and under the
    public-only model, summed and released by the Gaussian mechanism at the stage's (ε, δ)
    (parallel composition: these users are neither counted nor selection users)."""
    sums = score_verdict_users(
        wh,
        schema,
        salt=salt,
        holdout_per_mille=holdout,
        verdict_per_mille=verdict,
        public=models.public(0.0),
        released=models.released(adaptation, weight),
        pool=pool,
    )
    out = release_verdict(sums, epsilon=epsilon, delta=delta, noise=source)
    del sums
    out["users_fraction"] = (verdict - holdout) / 1000.0
    out["estimand"] = (
        "the mean over held-out users of their per-token log-loss (natural log, each user's events "
        "weighted equally within the user, users weighted equally), clipped per user"
    )
    return out


def _counts_report(
    config: RunConfig,
    *,
    domain: CountDomain,
    dp_vocab: list[str],
    calibration: Any,
    threshold: float,
    released: pl.DataFrame,
    adaptation: float,
    weight: float,
    selection: dict[str, Any],
    epsilon: float,
    delta: float,
    noise_mode: str,
) -> dict[str, Any]:
    """Report part ``lm_counts``: the domain, the calibration, what was released, the chosen weight."""
    order = config.lm.order
    sigma = calibration.sigma
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
        "threshold": threshold,
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


def _counts_event(calibration: Any) -> PrivacyEvent:
    """The stage's privacy event: the Gaussian mechanism on the l2-bounded count vector."""
    return PrivacyEvent(
        stage=STAGE,
        mechanism="gaussian",
        sigma=calibration.sigma,
        sensitivity=calibration.snapped_sensitivity,
        note="noisy n-gram counts (l2-bounded per user); the weight selection runs on disjoint users",
    )
