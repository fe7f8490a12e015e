"""The private-domain verdict of step ``lm_counts``: does the released model fit this dataset's users
better than the public-only model?

Step ``lm_counts`` (:mod:`dpngram.stages.lm_counts`) answers it on the *verdict* users, a
keyed-hash share of the users that is neither counted nor scored for the weight selection
(``lm_verdict_holdout``; docs/lm_privacy.md, section 5a, "The private-domain verdict"):

1. each verdict user's per-token log-loss (natural log) under the released model M (the mixture
   merged into one backoff model, as step ``lm`` writes it) and under the public-only model P,
   each clipped to [0, B_v], their difference clipped to [−C_v, C_v], and B_v, which counts the
   user (:func:`verdict_user_vector`), are summed (:func:`score_verdict_users`);
2. the sum goes through the counts' release path (:func:`dpngram.mechanisms.lm_counts.noisy_release`:
   snapped to a power-of-two grid, rounded-Gaussian noise) at the stage's (ε, δ), and the
   perplexities, their intervals and the verdict follow by post-processing (:func:`release_verdict`).

Privacy map: the Gaussian mechanism on a vector of l2-sensitivity √(3B_v² + C_v²)
(:func:`verdict_sensitivity`), σ the analytic-Gaussian σ at the stage's (ε, δ) for the snapped
sensitivity: (ε, δ)-DP in a verdict user. The verdict users are disjoint from the counting and the
selection users, so the stage stays (ε, δ)-DP at its share and the ledger keeps the counts' one
Gaussian event (parallel composition, docs/lm_privacy.md, sections 5 and 5a); σ, the grid and the
sensitivity are named in the report part (``private_domain``).

Owns: the verdict users' clipped sums, their Gaussian release, the intervals and the verdict.
Imports: dpngram.mechanisms.lm_counts, dpngram.mechanisms.heldout_scoring,
dpngram.lm.backoff_scorer (types), dpngram.engines, dpngram.core; numpy, scipy.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.mechanisms.heldout_scoring import held_out_user_sums
from dpngram.mechanisms.lm_counts import noisy_release

if TYPE_CHECKING:
    from dpngram.lm.backoff_scorer import BackoffScorer


#: B_v: a verdict user's per-token log-loss (nats) is clipped to [0, B_v] (perplexity up to e^12).
VERDICT_LOSS_CLIP = 12.0

#: C_v: a verdict user's log-loss difference (released − public-only, nats) is clipped to [−C_v, C_v].
VERDICT_DIFF_CLIP = 2.0

#: Two-sided level of the released intervals (each is a Bonferroni box over the sum and the count).
VERDICT_LEVEL = 0.95


@dataclass(frozen=True)
class VerdictSums:
    """The verdict users' clipped sums (PRIVATE until noised): released loss, public-only loss,
    difference, and the number of users."""

    released_loss: float = 0.0
    public_loss: float = 0.0
    difference: float = 0.0
    users: int = 0


def verdict_user_vector(released_logprob: np.ndarray, public_logprob: np.ndarray) -> np.ndarray:
    """One verdict user's contribution (L_rel, L_pub, D, κ): their mean per-token log-loss (natural
    log) under the released and the public-only model, each clipped to [0, B_v], the clipped
    difference in [−C_v, C_v], and the constant κ = B_v that counts them. l2 norm at most
    √(2 B_v² + C_v² + B_v²): :func:`verdict_sensitivity`, for any input: a user with no event
    has loss 0, an infinite (or overflowing) loss counts as B_v, and an undefined difference
    (both losses infinite) as 0, so no coordinate is ever NaN."""
    rel_loss, pub_loss = _mean_loss(released_logprob), _mean_loss(public_logprob)
    rel = float(np.clip(np.nan_to_num(rel_loss, nan=0.0, posinf=VERDICT_LOSS_CLIP), 0.0, VERDICT_LOSS_CLIP))
    pub = float(np.clip(np.nan_to_num(pub_loss, nan=0.0, posinf=VERDICT_LOSS_CLIP), 0.0, VERDICT_LOSS_CLIP))
    raw_diff = np.nan_to_num(
        rel_loss - pub_loss, nan=0.0, posinf=VERDICT_DIFF_CLIP, neginf=-VERDICT_DIFF_CLIP
    )
    diff = float(np.clip(raw_diff, -VERDICT_DIFF_CLIP, VERDICT_DIFF_CLIP))
    return np.array([rel, pub, diff, VERDICT_LOSS_CLIP], dtype=np.float64)


def _mean_loss(logprob: np.ndarray) -> float:
    """−mean of natural log-probabilities (0 for no event; may be +inf)."""
    values = np.asarray(logprob, dtype=np.float64)
    if values.size == 0:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return float(-np.mean(values))


def verdict_sensitivity() -> float:
    """l2-sensitivity of the summed verdict vector under adding or removing one verdict user."""
    return math.sqrt(3.0 * VERDICT_LOSS_CLIP**2 + VERDICT_DIFF_CLIP**2)


def score_verdict_users(
    wh: Engine,
    schema: str,
    *,
    salt: int,
    holdout_per_mille: int,
    verdict_per_mille: int,
    public: BackoffScorer,
    released: BackoffScorer,
    pool: Executor | None = None,
) -> VerdictSums:
    """The verdict users' clipped sums (:func:`verdict_user_vector`; PRIVATE: kept in the run's
    process, only :func:`release_verdict` of them leaves): each user's mean natural log-loss
    under the released model (``released``: the mixture merged into one backoff model, as step
    ``lm`` writes it) and under the public-only model P (``public``). Scored by
    :func:`dpngram.mechanisms.heldout_scoring.held_out_user_sums` (``pool``: its idle worker)."""
    sql = load_sql("lm_counts/verdict_sentences", schema=schema)
    params = {
        "salt": int(salt),
        "holdout_per_mille": int(holdout_per_mille),
        "verdict_per_mille": int(verdict_per_mille),
    }
    total, _ = held_out_user_sums(wh, sql, params, [public, released], verdict_batch_sum, 4, pool)
    return VerdictSums(
        released_loss=float(total[0]),
        public_loss=float(total[1]),
        difference=float(total[2]),
        users=int(round(total[3] / VERDICT_LOSS_CLIP)),
    )


def verdict_user_contribution(public: np.ndarray, released: np.ndarray) -> np.ndarray:
    """One verdict user's :func:`verdict_user_vector` from their events' log10 probabilities under
    P and under the released model."""
    log10 = math.log(10.0)
    return verdict_user_vector(np.asarray(released) * log10, np.asarray(public) * log10)


def verdict_batch_sum(publics: list[np.ndarray], released: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Σ over the users of a batch of :func:`verdict_user_contribution` (``publics``: [P's log10
    probabilities]), on the batch's event arrays (user u's events: ``[bounds[u], bounds[u + 1])``)
    without a Python call per user: the same clipping, user by user, as :func:`verdict_user_vector`."""
    (public,) = publics
    events = np.diff(bounds).astype(np.float64)
    log10 = math.log(10.0)
    with np.errstate(over="ignore", invalid="ignore"):
        rel_loss = -_user_sums(np.asarray(released, dtype=np.float64) * log10, bounds) / events
        pub_loss = -_user_sums(np.asarray(public, dtype=np.float64) * log10, bounds) / events
        raw_diff = rel_loss - pub_loss
    rel = np.clip(np.nan_to_num(rel_loss, nan=0.0, posinf=VERDICT_LOSS_CLIP), 0.0, VERDICT_LOSS_CLIP)
    pub = np.clip(np.nan_to_num(pub_loss, nan=0.0, posinf=VERDICT_LOSS_CLIP), 0.0, VERDICT_LOSS_CLIP)
    diff = np.clip(
        np.nan_to_num(raw_diff, nan=0.0, posinf=VERDICT_DIFF_CLIP, neginf=-VERDICT_DIFF_CLIP),
        -VERDICT_DIFF_CLIP,
        VERDICT_DIFF_CLIP,
    )
    return np.array([rel.sum(), pub.sum(), diff.sum(), VERDICT_LOSS_CLIP * events.size], dtype=np.float64)


def _user_sums(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Per user u, the sum of ``values[..., bounds[u]:bounds[u + 1]]`` (every user has an event)."""
    return np.add.reduceat(values, bounds[:-1], axis=-1)


def _ratio_interval(total: float, count: float, pad: float, lo: float, hi: float) -> list[float]:
    """[min, max] of (total ± pad) / (count ± pad/κ) clipped to [lo, hi]; the whole range when the
    count's lower end is not positive (the data cannot tell)."""
    c_lo = count - pad / VERDICT_LOSS_CLIP
    c_hi = count + pad / VERDICT_LOSS_CLIP
    if c_lo <= 0:
        return [lo, hi]
    corners = [(total + s * pad) / c for s in (-1.0, 1.0) for c in (c_lo, c_hi)]
    return [float(min(max(min(corners), lo), hi)), float(max(min(max(corners), hi), lo))]


def release_verdict(sums: VerdictSums, *, epsilon: float, delta: float, noise: NoiseSource) -> dict[str, Any]:
    """The Gaussian mechanism on the summed verdict vector (sensitivity :func:`verdict_sensitivity`,
    calibrated and snapped like the counts: :func:`noisy_release`), and what follows from it by
    post-processing: the estimated mean log-losses, their perplexities, and intervals at
    :data:`VERDICT_LEVEL` (a Bonferroni box: each of the sum and the count within z = Φ⁻¹(1 − α/4)
    noise standard deviations; clipping is part of the estimand, see docs). ``verdict`` is
    'released model better', 'public-only model better' or 'cannot tell' from the difference's
    interval."""
    from scipy import stats

    vector = np.array(
        [sums.released_loss, sums.public_loss, sums.difference, VERDICT_LOSS_CLIP * sums.users],
        dtype=np.float64,
    )
    noisy, calibration = noisy_release(
        vector, epsilon=epsilon, delta=delta, clip=verdict_sensitivity(), noise=noise
    )
    sigma = float(calibration.sigma)
    z = float(stats.norm.isf((1.0 - VERDICT_LEVEL) / 4.0))
    # z noise standard deviations, plus one grid step for the snapping of the sum and of the noise
    # to the lattice (each off by at most half a step: docs/noise.md).
    pad = z * sigma + float(calibration.grid)
    count = float(noisy[3]) / VERDICT_LOSS_CLIP
    usable = count - pad / VERDICT_LOSS_CLIP > 0
    rel = float(np.clip(noisy[0] / count, 0.0, VERDICT_LOSS_CLIP)) if usable else None
    pub = float(np.clip(noisy[1] / count, 0.0, VERDICT_LOSS_CLIP)) if usable else None
    diff = float(np.clip(noisy[2] / count, -VERDICT_DIFF_CLIP, VERDICT_DIFF_CLIP)) if usable else None
    rel_iv = _ratio_interval(float(noisy[0]), count, pad, 0.0, VERDICT_LOSS_CLIP)
    pub_iv = _ratio_interval(float(noisy[1]), count, pad, 0.0, VERDICT_LOSS_CLIP)
    diff_iv = _ratio_interval(float(noisy[2]), count, pad, -VERDICT_DIFF_CLIP, VERDICT_DIFF_CLIP)
    if usable and diff_iv[1] < 0:
        verdict = "released model better"
    elif usable and diff_iv[0] > 0:
        verdict = "public-only model better"
    else:
        verdict = "cannot tell"
    return {
        "released_perplexity": math.exp(rel) if rel is not None else None,
        "public_only_perplexity": math.exp(pub) if pub is not None else None,
        "interval": {
            "level": VERDICT_LEVEL,
            "released_perplexity": [math.exp(v) for v in rel_iv],
            "public_only_perplexity": [math.exp(v) for v in pub_iv],
            "log_ratio": diff_iv,
        },
        "log_ratio": diff,
        "verdict": verdict,
        "epsilon": epsilon,
        "delta": delta,
        "sigma": sigma,
        "grid": float(calibration.grid),
        "sensitivity": calibration.snapped_sensitivity,
        "loss_clip_nats": VERDICT_LOSS_CLIP,
        "difference_clip_nats": VERDICT_DIFF_CLIP,
    }


def private_domain_verdict(
    wh: Engine,
    schema: str,
    *,
    public: BackoffScorer,
    released: BackoffScorer,
    salt: int,
    holdout: int,
    verdict: int,
    epsilon: float,
    delta: float,
    noise: NoiseSource,
    pool: Executor | None = None,
) -> dict[str, Any]:
    """The private-domain verdict (report part key ``private_domain``): the verdict users' (keyed
    hash in [``holdout``, ``verdict``) per mille under ``salt``) clipped log-losses under the
    released model (``released``: the noisy-count model Q and the public model adapted at the
    chosen β, mixed at the chosen λ and merged into one backoff model, the model step ``lm``
    writes) and under the public-only model (``public``), summed and released by the Gaussian
    mechanism at the stage's (ε, δ) (parallel composition: these users are neither counted nor
    selection users)."""
    sums = score_verdict_users(
        wh,
        schema,
        salt=salt,
        holdout_per_mille=holdout,
        verdict_per_mille=verdict,
        public=public,
        released=released,
        pool=pool,
    )
    out = release_verdict(sums, epsilon=epsilon, delta=delta, noise=noise)
    del sums
    out["users_fraction"] = (verdict - holdout) / 1000.0
    out["estimand"] = (
        "the mean over held-out users of their per-token log-loss (natural log, each user's events "
        "weighted equally within the user, users weighted equally), clipped per user"
    )
    return out
