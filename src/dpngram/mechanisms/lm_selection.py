"""The mixture weight λ and the adaptation strength β of step ``lm_counts``, by report-noisy-max.

With ``lm_mix_weight`` or ``lm_unigram_adaptation`` set to 'auto', step ``lm_counts``
(:mod:`dpngram.stages.lm_counts`) picks the candidate (β, λ) of the mixture λ·Q + (1 − λ)·P_β
(Q: the model of the noisy counts of :mod:`dpngram.mechanisms.lm_counts`; P_β: the public model
adapted to Q's unigrams with strength β, P_0 = P; :mod:`dpngram.mechanisms.lm_models`) on the
*selection* users, a keyed-hash share of the users that is never counted (docs/lm.md, "Noisy
n-gram counts"; derivation in docs/lm_privacy.md, section 4):

1. the candidates are :data:`ADAPTATION_GRID` × :data:`WEIGHT_GRID` for the parameters set to
   'auto', the configured value otherwise (:func:`candidate_grid`); β = λ = 0, the public model,
   is a candidate whenever both are auto, so counts that carry no signal lead back to P (with
   high probability);
2. each selection user's score for a candidate is the mean natural log-probability of their events
   under it, less the user's mean over all candidates, clipped to [−C, C] and shifted by −C
   (:func:`centred_contributions`): a vector in [−2C, 0] per user;
3. the sums get Laplace noise of scale 2C/ε_sel on a power-of-two grid and the argmax is released
   (:func:`select_weight`).

Privacy map: report-noisy-max on monotone scores of sensitivity R = :data:`SCORE_RANGE_NATS`, noise
scale b = ⌈R/g⌉·g/ε_sel (:func:`selection_noise`): ε_sel-DP for every fixed output of the counts
(docs/lm_privacy.md, section 4). The selection users are disjoint from the counting and the verdict
users, so the step's ledger event is the counts' Gaussian alone (parallel composition, section 5);
ε_sel is what the run's composed total leaves a selection user beside the other stages (the stage
sizes it: ``dpngram.stages.lm_counts.selection_epsilon``).

Owns: the candidate grid, the selection users' scores and the report-noisy-max weight selection.
Imports: dpngram.mechanisms.heldout_scoring, dpngram.mechanisms.lm_models (types),
dpngram.lm.backoff_scorer (types), dpngram.engines, dpngram.core; numpy, numba.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import njit

from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.mechanisms.heldout_scoring import held_out_user_sums

if TYPE_CHECKING:
    from dpngram.lm.backoff_scorer import BackoffScorer
    from dpngram.mechanisms.lm_models import CandidateModels


#: Candidate mixture weights λ (0: the public model alone).
WEIGHT_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


#: Candidate strengths β of the public model's adaptation to Q's unigrams (0: no adaptation).
ADAPTATION_GRID = (0.0, 0.25, 0.5)


#: C: a selection user's mean natural log-probability per event under a candidate, less their mean
#: over all candidates, is clipped to [−C, C] (then shifted by −C: :func:`centred_contributions`).
#: Measured (2026-11-28, SOTU's and the generated corpus's held-out users): it binds for 0.05–0.5% of
#: users; the score's range was [−20, 0] nats before, ten times the noise.
SCORE_DEVIATION_CLIP_NATS = 1.0


#: The range of one selection user's contribution to every score, [−2C, 0]: the selection's
#: sensitivity (monotone: adding a user moves every score down by at most this, none up).
SCORE_RANGE_NATS = 2.0 * SCORE_DEVIATION_CLIP_NATS


def user_mean_logprobs(
    public_logprob10: np.ndarray, private_logprob10: np.ndarray, grid=WEIGHT_GRID
) -> np.ndarray:
    """One selection user's mean natural log-probability of their events under λ·Q + (1 − λ)·P,
    per candidate λ (not yet a score: :func:`centred_contributions`)."""
    p = np.power(10.0, np.asarray(public_logprob10, dtype=np.float64))
    q = np.power(10.0, np.asarray(private_logprob10, dtype=np.float64))
    lam = np.asarray(grid, dtype=np.float64)[:, None]
    mix = np.maximum(lam * q[None, :] + (1.0 - lam) * p[None, :], 1e-300)
    return np.log(mix).mean(axis=1)


def centred_contributions(mean_logprobs: np.ndarray) -> np.ndarray:
    """Selection users' contributions to the candidates' scores from their mean log-probabilities
    (candidates along axis 0, users along axis 1 if any): each user's deviation from their own mean
    over the candidates, clipped to [−C, C], minus C — a vector in [−2C, 0] (C =
    :data:`SCORE_DEVIATION_CLIP_NATS`). Unclipped, the argmax of the summed scores is the candidate
    of the highest summed mean log-probability (the user's own mean is the same for every
    candidate); the clip bounds what one user moves (docs/lm_privacy.md, section 4)."""
    values = np.asarray(mean_logprobs, dtype=np.float64)
    deviation = values - values.mean(axis=0, keepdims=True)
    c = SCORE_DEVIATION_CLIP_NATS
    return np.clip(deviation, -c, c) - c


def selection_noise(epsilon: float) -> tuple[float, float]:
    """(Laplace scale b, grid g) of :func:`select_weight` at pure ε, R = :data:`SCORE_RANGE_NATS`:
    g = 2^⌊log2(R/(1024ε))⌋ and b = ⌈R/g⌉·g/ε, which is exactly R/ε whenever g divides R (R = 2:
    every ε ≥ 2^-10) and never less (docs/lm_privacy.md, section 4)."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0 (got {epsilon})")
    grid = 2.0 ** math.floor(math.log2(SCORE_RANGE_NATS / (1024.0 * epsilon)))
    return math.ceil(SCORE_RANGE_NATS / grid) * grid / epsilon, grid


def select_weight(
    scores: np.ndarray, epsilon: float, noise: NoiseSource, grid=WEIGHT_GRID
) -> tuple[float, int]:
    """Report-noisy-max: argmax of the summed scores + grid·DiscreteLaplace(b/g) noise each
    (:func:`selection_noise`, b ≈ R/ε, R = :data:`SCORE_RANGE_NATS`). Each user adds a vector in
    [−R, 0]^|grid| (:func:`centred_contributions`): adding a user moves every score down by at most
    R, never up (monotone scores), so the one-sided argument of Dwork & Roth, Claim 3.9, holds with
    sensitivity R: for the output i and the others' noise fixed, i still wins on the smaller
    dataset when its noise is ⌈R/g⌉·g higher, and on the larger one when its noise is that much
    higher than the threshold of the smaller; on the noise grid that costs a factor exactly
    e^{⌈R/g⌉·g/b} = e^ε. ε-DP. Returns (λ, index)."""
    scale, grid_step = selection_noise(epsilon)
    noisy = np.asarray(scores, dtype=np.float64) + noise.laplace_on_grid(scale, len(grid), grid_step)
    best = int(np.argmax(noisy))
    return float(grid[best]), best


def candidate_grid(mix_weight: float | str, adaptation: float | str) -> list[tuple[float, float]]:
    """The (β, λ) candidates of the selection: every grid value of a parameter set to 'auto', the
    configured value otherwise. (0, 0) — the public model — is a candidate whenever both are auto."""
    betas = ADAPTATION_GRID if adaptation == "auto" else (float(adaptation),)
    lams = WEIGHT_GRID if mix_weight == "auto" else (float(mix_weight),)
    return [(b, lam) for b in betas for lam in lams]


def score_selection_users(
    wh: Engine,
    schema: str,
    *,
    salt: int,
    holdout_per_mille: int,
    publics: list[BackoffScorer],
    private: BackoffScorer,
    weights: tuple[float, ...] = WEIGHT_GRID,
    pool: Executor | None = None,
) -> tuple[np.ndarray, int]:
    """Summed :func:`selection_user_vector` over the selection users (streamed; PRIVATE sums, kept in the
    run's process): for each public model variant in ``publics`` (one per adaptation strength β),
    the scores of every λ in ``weights``, concatenated in that order. Also returns the number of
    selection users (PRIVATE: never reported). Scored by
    :func:`dpngram.mechanisms.heldout_scoring.held_out_user_sums` (``pool``: its idle worker)."""
    sql = load_sql("lm_counts/selection_sentences", schema=schema)
    params = {"salt": int(salt), "holdout_per_mille": int(holdout_per_mille)}
    return held_out_user_sums(
        wh,
        sql,
        params,
        [*publics, private],
        partial(selection_batch_sum, weights=tuple(weights)),
        len(publics) * len(weights),
        pool,
    )


def selection_user_vector(
    publics: list[np.ndarray], private: np.ndarray, weights: tuple[float, ...]
) -> np.ndarray:
    """One selection user's contribution to every candidate's score: :func:`user_mean_logprobs` for
    every public variant, concatenated, through :func:`centred_contributions` (centred on the mean
    over all of them)."""
    return centred_contributions(np.concatenate([user_mean_logprobs(p, private, weights) for p in publics]))


def selection_batch_sum(
    publics: list[np.ndarray], private: np.ndarray, bounds: np.ndarray, weights: tuple[float, ...]
) -> np.ndarray:
    """Σ over the users of a batch of :func:`selection_user_vector`, on the batch's event arrays
    (user u's events: ``[bounds[u], bounds[u + 1])``) without a Python call per user: the users'
    mean log-probabilities come from one compiled pass per public variant
    (:func:`_mixture_user_means`), then go through :func:`centred_contributions`."""
    q = np.ascontiguousarray(private, dtype=np.float64)
    lam = np.asarray(weights, dtype=np.float64)
    user_bounds = np.ascontiguousarray(bounds, dtype=np.int64)
    means = np.empty((len(publics) * lam.size, user_bounds.size - 1), dtype=np.float64)
    for i, public in enumerate(publics):
        _mixture_user_means(
            np.ascontiguousarray(public, dtype=np.float64), q, user_bounds, lam, means[i * lam.size :]
        )
    return centred_contributions(means).sum(axis=1)


@njit(cache=True, nogil=True)
def _mixture_user_means(
    public: np.ndarray, private: np.ndarray, bounds: np.ndarray, lams: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled; tested through selection_batch_sum
    """out[j, u] = user u's mean over their events of ln(λ_j·q + (1 − λ_j)·p) (p, q from the log10
    probabilities; the mixture floored at 1e-300 as :func:`user_mean_logprobs` does). One pass over
    the events with no (candidates × events) temporaries: 7× the numpy version's speed, and the
    sums agree with it to rounding (tests/test_lm_heldout_scoring.py)."""
    sums = np.zeros(lams.size, dtype=np.float64)
    for u in range(bounds.size - 1):
        sums[:] = 0.0
        for e in range(bounds[u], bounds[u + 1]):
            p = 10.0 ** public[e]
            q = 10.0 ** private[e]
            for j in range(lams.size):
                sums[j] += math.log(max(lams[j] * q + (1.0 - lams[j]) * p, 1e-300))
        for j in range(lams.size):
            out[j, u] = sums[j] / (bounds[u + 1] - bounds[u])


def select_mix_weight(
    wh: Engine,
    schema: str,
    models: CandidateModels,
    candidates: list[tuple[float, float]],
    *,
    salt: int,
    holdout: int,
    epsilon: float,
    noise: NoiseSource,
    pool: Executor | None = None,
) -> tuple[float, float, dict[str, Any]]:
    """(adaptation, weight) chosen by report-noisy-max (:func:`select_weight`, pure ``epsilon``) on
    the selection users (keyed hash below ``holdout`` per mille under ``salt``), and its report.
    The scores go through the scorers of ``models`` (PRIVATE sums, kept in the run's process;
    ``pool``: the stage's worker, which scores every other model)."""
    betas = sorted({b for b, _ in candidates})
    lams = tuple(sorted({lam for _, lam in candidates}))
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
    order_of_scores = [(b, lam) for b in betas for lam in lams]
    # Always through report-noisy-max, even with no selection user (the sum over nobody is
    # the zero vector): whether one user exists must not change what is released.
    _, best = select_weight(scores, epsilon, noise, grid=tuple(range(len(order_of_scores))))
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


def fixed_mix_weight(candidates: list[tuple[float, float]]) -> tuple[float, float, dict[str, Any]]:
    """(adaptation, weight) and the selection's report when neither parameter is 'auto': the one
    candidate, configured; no selection user is scored and nothing is drawn."""
    ((adaptation, weight),) = candidates
    return adaptation, weight, {"method": "fixed (configuration)"}
