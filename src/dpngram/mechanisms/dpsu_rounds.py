"""DP-SIPS's public parameters: how one release's noise and threshold delta are split over R rounds.

Paper: Swanberg, Desfontaines & Haney (2023), DP-SIPS. Each round r is a weighted DPSU round with
noise ``sigma / sqrt(f_r)`` (sum_r f_r = 1), so the rounds compose exactly to one Gaussian of
``sigma``; the vocabulary's threshold delta is split over the rounds in the same proportions
(docs/dpne.md, "DP-SIPS"; "Admission by the first round" for round 1's admission floor). Every
value here is data-independent: the release itself is :func:`dpngram.mechanisms.dpsu.sips_release`
(which re-exports these names).

Owns: :class:`SipsRound`, the DP-SIPS bounds, the budget split (:func:`sips_fractions`,
:func:`sips_sigmas`), the admission floor, the vocabulary's rounds, and the privacy events of one
thresholded DPSU release (:func:`dpsu_events`, shared by every vocabulary round).
Imports: dpngram.core; nothing else.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from dpngram.core.accounting import PrivacyEvent, compose_gaussian_sigmas, dpsu_threshold
from dpngram.core.errors import ConfigError


def dpsu_events(stage: str, sigma: float, threshold_delta: float, label: str = "") -> list[PrivacyEvent]:
    """The privacy map of one thresholded DPSU release (GGK+20; DPNE Thm. 2.1 proof): a
    sensitivity-1 Gaussian of ``sigma`` and the (0, ``threshold_delta``) event of its threshold.
    ``label`` names the release in both notes ("DP-SIPS round 2", "new words"; empty for a
    one-round vocabulary)."""
    return [
        PrivacyEvent(stage=stage, mechanism="gaussian", sigma=sigma, note=label),
        PrivacyEvent(
            stage=stage,
            mechanism="approx",
            epsilon=0.0,
            delta=threshold_delta,
            note=f"DPSU threshold, {label}" if label else "DPSU threshold",
        ),
    ]


#: Bounds of the DP-SIPS parameters (also the configuration's): R rounds, geometric ratio.
SIPS_MAX_ROUNDS = 10
SIPS_MAX_RATIO = 1000.0
#: Range of ``dpsu_sips_admission`` (z, in units of round 1's sigma).
SIPS_MIN_ADMISSION = -10.0
SIPS_MAX_ADMISSION = 10.0


@dataclass(frozen=True)
class SipsRound:
    """Public parameters of one DP-SIPS round: noise sigma_r = sigma / sqrt(f_r), threshold rho_r and
    the round's share delta_0r = f_r delta_0 of the threshold delta (vocabulary; None at DPNE levels,
    whose thresholds cost no delta)."""

    sigma: float
    threshold: float | None
    threshold_delta: float | None = None
    #: Round 1 of a release with admission: later rounds keep only the items whose round-1 noisy
    #: weight reached this floor (z * sigma_1; None: plain DP-SIPS).
    admit_floor: float | None = None


def sips_fractions(rounds: int, ratio: float) -> list[float]:
    """f_r proportional to ``ratio^(r-1)``, r = 1..R, summing to 1 (DP-SIPS budget split).
    ``ratio`` < 1 puts more of the budget on the first rounds; rounds = 1 gives [1.0]."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= SIPS_MAX_ROUNDS:
        raise ConfigError(f"dpsu_sips_rounds: must be an integer in 1..{SIPS_MAX_ROUNDS} (got {rounds!r})")
    if not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and 0 < ratio <= SIPS_MAX_RATIO):
        raise ConfigError(f"dpsu_sips_ratio: must be a number in (0, {SIPS_MAX_RATIO:g}] (got {ratio!r})")
    weights = [float(ratio) ** r for r in range(rounds)]
    total = math.fsum(weights)
    return [w / total for w in weights]


def sips_sigmas(sigma: float, rounds: int, ratio: float) -> list[float]:
    """sigma_r = sigma / sqrt(f_r): R sensitivity-1 Gaussians with sum_r 1/sigma_r^2 = 1/sigma^2, i.e.
    exactly one Gaussian of noise sigma (Dong, Roth & Su 2019; adaptive composition). rounds = 1
    returns [sigma] exactly. Rounded towards safety: the accountant's composition of the returned
    sigmas (:func:`~dpngram.core.accounting.compose_gaussian_sigmas`) is never above ``sigma``, so
    the composed epsilon is never below the one-Gaussian epsilon (at most a few ulps above)."""
    sigmas = [sigma if f == 1.0 else sigma / math.sqrt(f) for f in sips_fractions(rounds, ratio)]
    while compose_gaussian_sigmas(sigmas) > sigma:
        sigmas = [math.nextafter(s, 0.0) for s in sigmas]
    return sigmas


def check_admission(admission: float | None) -> None:
    """``dpsu_sips_admission``: None (off) or a finite z in [SIPS_MIN_ADMISSION, SIPS_MAX_ADMISSION]."""
    if admission is None:
        return
    if not (
        isinstance(admission, (int, float))
        and not isinstance(admission, bool)
        and math.isfinite(admission)
        and SIPS_MIN_ADMISSION <= admission <= SIPS_MAX_ADMISSION
    ):
        raise ConfigError(
            f"dpsu_sips_admission: must be a number in [{SIPS_MIN_ADMISSION:g}, {SIPS_MAX_ADMISSION:g}] "
            f"or empty for none (got {admission!r})"
        )


def with_admission(rounds: tuple[SipsRound, ...], admission: float | None) -> tuple[SipsRound, ...]:
    """The rounds with round 1's admission floor z * sigma_1 set (``admission`` = z; docs/dpne.md,
    "Admission by the first round"). One round, or ``admission`` None: unchanged."""
    check_admission(admission)
    if admission is None or len(rounds) < 2:
        return rounds
    first = rounds[0]
    return (dataclasses.replace(first, admit_floor=float(admission) * first.sigma), *rounds[1:])


def sips_vocabulary_rounds(
    sigma: float,
    threshold_delta: float,
    max_contribution: int,
    rounds: int,
    ratio: float,
    admission: float | None = None,
) -> tuple[SipsRound, ...]:
    """The DPSU rounds of one DP-SIPS release: sigma_r = sigma / sqrt(f_r), delta_0r = f_r delta_0 (the
    last one takes the rest, so they add up to delta_0) and rho_r = dpsu_threshold(sigma_r, delta_0r,
    Delta): in round r an item held only by the added user passes with probability <= delta_0r
    whatever the earlier rounds released, so over all rounds with probability <= delta_0 (union
    bound; docs/dpne.md, "DP-SIPS")."""
    fractions = sips_fractions(rounds, ratio)
    deltas = [threshold_delta * f for f in fractions[:-1]]
    deltas.append(threshold_delta - math.fsum(deltas) if deltas else threshold_delta)
    return with_admission(
        tuple(
            SipsRound(sigma=s, threshold=dpsu_threshold(s, d, max_contribution), threshold_delta=d)
            for s, d in zip(sips_sigmas(sigma, rounds, ratio), deltas, strict=True)
        ),
        admission,
    )
