"""Tests of :mod:`dpngram.core.accounting`: calibration of the analytic Gaussian mechanism against an
independent high-precision reference, exact Gaussian composition, mixed composition (basic
composition of the pure-ε parts), the DPNE schedule (Thm. 2.1), the DPSU threshold, and an empirical
privacy test of the Gaussian mechanism as sampled by :class:`dpngram.core.noise.NoiseSource`.

References: Balle & Wang (2018), "Improving the Gaussian mechanism for differential privacy",
Thm. 8 (analytic Gaussian); Dong, Roth & Su (2019) (exact Gaussian composition); Gopi, Lee &
Wutschitz (2021) (PRV accountant); Kairouz, Oh & Viswanath (2015), Thm. 3.3 (optimal composition
of pure-DP mechanisms, used as an independent upper bound); Kim et al. (2021), "Differentially
private n-gram extraction" (DPNE), Thm. 2.1 and §3.1.1; Gopi et al. (2020), DPSU.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import optimize, stats
from scipy.special import comb

from dpngram.core.accounting import (
    Accountant,
    PrivacyEvent,
    compose_gaussian_sigmas,
    dpne_sigmas,
    dpsu_threshold,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_sigma,
    laplace_scale,
)
from dpngram.core.errors import BudgetError
from dpngram.core.noise import NoiseSource

mpmath.mp.dps = 50


# ----------------------------------------------------------------------------------------------
# Independent references (mpmath, 50 significant digits)
# ----------------------------------------------------------------------------------------------
def reference_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> mpmath.mpf:
    """Balle & Wang (2018) Thm. 8: delta = Phi(s/(2σ) - εσ/s) - e^ε Phi(-s/(2σ) - εσ/s)."""
    eps, sig, s = mpmath.mpf(epsilon), mpmath.mpf(sigma), mpmath.mpf(sensitivity)
    return mpmath.ncdf(s / (2 * sig) - eps * sig / s) - mpmath.exp(eps) * mpmath.ncdf(
        -s / (2 * sig) - eps * sig / s
    )


def reference_sigma(epsilon: float, delta: float) -> mpmath.mpf:
    """Smallest σ with reference_delta(ε, σ) <= δ, by bisection on [1e-4, 1e5] (δ decreases in σ)."""
    lo, hi = mpmath.mpf("1e-4"), mpmath.mpf("1e5")
    target = mpmath.mpf(delta)
    for _ in range(200):
        mid = (lo + hi) / 2
        if reference_delta(epsilon, mid) > target:
            lo = mid
        else:
            hi = mid
    return hi


def reference_dpsu_thresholds(sigma: float, delta_threshold: float, max_delta: int) -> list[float]:
    """Brute force rho(Δ) = max_{1<=t<=Δ} 1/√t + σ Φ^{-1}((1-δ')^{1/t}) for Δ = 1..max_delta."""
    best, out = mpmath.mpf("-inf"), []
    one_minus = 1 - mpmath.mpf(delta_threshold)
    for t in range(1, max_delta + 1):
        u = one_minus ** (mpmath.mpf(1) / t)
        quantile = mpmath.sqrt(2) * mpmath.erfinv(2 * u - 1)
        best = max(best, 1 / mpmath.sqrt(t) + sigma * quantile)
        out.append(float(best))
    return out


def kov_epsilon(delta: float, eps0: float, k: int) -> float:
    """Optimal composition of k eps0-pure-DP mechanisms (Kairouz, Oh & Viswanath 2015, Thm. 3.3):
    the k-fold randomized response, whose privacy loss is eps0 (k - 2i) with i ~ Bin(k, 1/(1+e^eps0)),
    delta(eps) = sum_i C(k,i) (e^{eps0 (k-i)} - e^eps e^{eps0 i})_+ / (1+e^eps0)^k."""

    def kov_delta(eps: float) -> float:
        total = sum(
            comb(k, i, exact=True) * max(0.0, math.exp(eps0 * (k - i)) - math.exp(eps + eps0 * i))
            for i in range(k + 1)
        )
        return total / (1 + math.exp(eps0)) ** k - delta

    if kov_delta(0.0) <= 0:
        return 0.0
    return optimize.brentq(kov_delta, 0.0, k * eps0, xtol=1e-12)


def laplace_single_epsilon(eps0: float, delta: float) -> float:
    """Exact epsilon(delta) of one Laplace mechanism with pure epsilon eps0: its privacy profile is
    delta(eps) = 1 - exp(-(eps0 - eps)/2) for 0 <= eps <= eps0 (integrate the privacy-loss
    distribution: mass 1/2 at eps0, a density on (-eps0, eps0))."""
    return eps0 + 2 * math.log1p(-delta)


# ----------------------------------------------------------------------------------------------
# Analytic Gaussian mechanism
# ----------------------------------------------------------------------------------------------
CALIBRATION_CASES = [(e, d) for e in (0.1, 0.5, 1.0, 2.0, 5.0, 10.0) for d in (1e-5, 1e-7, 1e-10)]


@pytest.mark.parametrize("epsilon, delta", CALIBRATION_CASES)
def test_gaussian_sigma_matches_high_precision_reference(epsilon: float, delta: float) -> None:
    sigma = gaussian_sigma(epsilon, delta)
    ref = reference_sigma(epsilon, delta)
    assert sigma == pytest.approx(float(ref), rel=1e-9)
    # sound: the returned sigma is not below the exact one (up to double rounding of the result)
    assert reference_delta(epsilon, sigma) <= mpmath.mpf(delta) * (1 + mpmath.mpf("1e-9"))


@pytest.mark.parametrize(
    "epsilon, delta", [(e, d) for e in (0.05, 0.3, 0.7, 0.99) for d in (1e-3, 1e-6, 1e-12)]
)
def test_classical_gaussian_bound_is_looser(epsilon: float, delta: float) -> None:
    """For eps < 1 the classical sigma = sqrt(2 ln(1.25/delta))/eps (Dwork & Roth Thm. A.1) is also
    (eps, delta)-DP, so the analytic (smallest) sigma cannot exceed it."""
    classic = math.sqrt(2 * math.log(1.25 / delta)) / epsilon
    sigma = gaussian_sigma(epsilon, delta)
    assert sigma <= classic
    assert gaussian_delta(epsilon, classic) <= delta


@pytest.mark.parametrize("sensitivity", [0.5, 3.0, 40.0])
def test_gaussian_sigma_scales_with_sensitivity(sensitivity: float) -> None:
    for epsilon, delta in [(0.3, 1e-6), (2.0, 1e-9)]:
        assert gaussian_sigma(epsilon, delta, sensitivity) == pytest.approx(
            sensitivity * gaussian_sigma(epsilon, delta), rel=1e-9
        )


@pytest.mark.parametrize(
    "epsilon, sigma, sensitivity",
    [
        (0.0, 1.0, 1.0),
        (0.5, 2.0, 1.0),
        (1.0, 4.0, 1.0),
        (3.0, 0.7, 1.0),
        (0.01, 300.0, 1.0),
        (1.0, 8.0, 2.0),
        (20.0, 0.2, 1.0),
        (8.0, 1.0, 1.0),
    ],
)
def test_gaussian_delta_matches_reference(epsilon: float, sigma: float, sensitivity: float) -> None:
    ref = reference_delta(epsilon, sigma, sensitivity)
    value = gaussian_delta(epsilon, sigma, sensitivity)
    assert value == pytest.approx(float(ref), rel=1e-8, abs=1e-300)


def test_gaussian_delta_is_conservative_in_extreme_regime() -> None:
    """Where the second term is dropped (b < -40) the result may only be larger than exact."""
    for epsilon, sigma in [(800.0, 0.03), (1000.0, 0.02), (60.0, 0.5)]:
        assert gaussian_delta(epsilon, sigma) >= float(reference_delta(epsilon, sigma)) * (1 - 1e-9)


def test_gaussian_delta_is_monotone() -> None:
    eps = np.linspace(0.0, 8.0, 161)
    sig = np.geomspace(0.2, 50.0, 120)
    by_eps = np.array([gaussian_delta(e, 2.0) for e in eps])
    by_sigma = np.array([gaussian_delta(1.0, s) for s in sig])
    by_sens = np.array([gaussian_delta(1.0, 3.0, s) for s in np.linspace(0.1, 10, 100)])
    assert np.all(np.diff(by_eps) <= 0) and by_eps[0] > by_eps[-1]
    assert np.all(np.diff(by_sigma) <= 0) and by_sigma[0] > by_sigma[-1]
    assert np.all(np.diff(by_sens) >= 0) and by_sens[0] < by_sens[-1]
    assert np.all((by_eps >= 0) & (by_eps <= 1))


@pytest.mark.parametrize("epsilon, delta", [(0.1, 1e-6), (1.0, 1e-7), (4.0, 1e-10), (12.0, 1e-5)])
def test_gaussian_epsilon_inverts_gaussian_sigma(epsilon: float, delta: float) -> None:
    sigma = gaussian_sigma(epsilon, delta)
    back = gaussian_epsilon(sigma, delta)
    assert back == pytest.approx(epsilon, rel=1e-9)
    assert gaussian_delta(back, sigma) <= delta  # rounded towards safety
    assert gaussian_delta(epsilon, sigma) <= delta


def test_gaussian_epsilon_zero_when_noise_swamps_signal() -> None:
    # delta(0, sigma) = 2 Phi(1/(2 sigma)) - 1 ≈ 4e-8 < 1e-5: (0, 1e-5)-DP already
    assert gaussian_epsilon(1e7, 1e-5) == 0.0


@pytest.mark.parametrize(
    "epsilon, delta",
    [
        (0, 1e-6),
        (-1, 1e-6),
        (float("nan"), 1e-6),
        (float("inf"), 1e-6),
        (1.0, 0.0),
        (1.0, 1.0),
        (1.0, -1e-6),
        (1.0, float("nan")),
    ],
)
def test_gaussian_sigma_refuses_invalid_budget(epsilon: float, delta: float) -> None:
    with pytest.raises(BudgetError):
        gaussian_sigma(epsilon, delta)


def test_gaussian_epsilon_and_delta_refuse_invalid_input() -> None:
    with pytest.raises(BudgetError):
        gaussian_epsilon(1.0, 0.0)
    with pytest.raises(ValueError):
        gaussian_delta(1.0, 0.0)
    with pytest.raises(ValueError):
        gaussian_delta(-0.1, 1.0)


def test_laplace_scale() -> None:
    assert laplace_scale(0.5, 2.0) == 4.0
    with pytest.raises(BudgetError):
        laplace_scale(0.0, 1.0)


# ----------------------------------------------------------------------------------------------
# Composition
# ----------------------------------------------------------------------------------------------
def test_compose_gaussian_sigmas_closed_form() -> None:
    sigmas = [1.3, 2.0, 7.5, 0.9, 40.0]
    expected = 1.0 / math.sqrt(sum(1.0 / s**2 for s in sigmas))
    assert compose_gaussian_sigmas(sigmas) == pytest.approx(expected, rel=1e-14)
    assert compose_gaussian_sigmas(iter(sigmas)) == pytest.approx(expected, rel=1e-14)  # any iterable
    for k in (1, 2, 9, 100):
        assert compose_gaussian_sigmas([3.0] * k) == pytest.approx(3.0 / math.sqrt(k), rel=1e-14)


@pytest.mark.parametrize("sigmas", [[], [0.0], [1.0, -2.0], [float("nan")]])
def test_compose_gaussian_sigmas_refuses_bad_input(sigmas: list[float]) -> None:
    with pytest.raises(ValueError):
        compose_gaussian_sigmas(sigmas)


def test_accountant_gaussian_events_compose_exactly() -> None:
    events = [
        PrivacyEvent("dpne", "gaussian", sigma=4.0),
        PrivacyEvent("dpne", "gaussian", sigma=6.0, sensitivity=2.0),  # noise multiplier 3
        PrivacyEvent("bayes", "gaussian", sigma=10.0, count=3),
    ]
    accountant = Accountant(events)
    composed = compose_gaussian_sigmas([4.0, 3.0, 10.0, 10.0, 10.0])
    for delta in (1e-5, 1e-8):
        assert accountant.total_epsilon(delta) == gaussian_epsilon(composed, delta)
    assert accountant.stage_epsilon("bayes", 1e-6) == gaussian_epsilon(
        compose_gaussian_sigmas([10.0] * 3), 1e-6
    )
    assert accountant.stage_epsilon("bayes", 1e-6) == pytest.approx(
        gaussian_epsilon(10.0 / math.sqrt(3), 1e-6), rel=1e-9
    )
    assert accountant.stages() == ["dpne", "bayes"]
    summary = accountant.summary(1e-6)
    assert summary["method"] == "analytic-gaussian"
    assert summary["gaussian_sigma"] == pytest.approx(composed, rel=1e-14)
    assert [PrivacyEvent(**e) for e in summary["events"]] == events


def test_accountant_approx_event_uses_its_delta() -> None:
    """DPNE: the Gaussian part is charged at delta/2, the threshold part is a (0, delta/2) event."""
    delta = 1e-6
    accountant = Accountant(
        [
            PrivacyEvent("dpne", "gaussian", sigma=5.0),
            PrivacyEvent("dpne", "approx", epsilon=0.0, delta=delta / 2),
        ]
    )
    assert accountant.total_epsilon(delta) == gaussian_epsilon(5.0, delta / 2)
    accountant.add(PrivacyEvent("other", "approx", epsilon=0.25, delta=delta / 4))
    assert accountant.total_epsilon(delta) == gaussian_epsilon(5.0, delta / 4) + 0.25
    with pytest.raises(BudgetError, match="already use delta"):
        accountant.total_epsilon(delta * 0.7)


def test_accountant_empty_and_invalid_delta() -> None:
    assert Accountant().total_epsilon(1e-6) == 0.0
    with pytest.raises(BudgetError):
        Accountant([PrivacyEvent("a", "gaussian", sigma=1.0)]).total_epsilon(0.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(mechanism="gaussian"),
        dict(mechanism="gaussian", sigma=-1.0),
        dict(mechanism="laplace"),
        dict(mechanism="laplace", epsilon=-1.0),
        dict(mechanism="approx", delta=1.0),
        dict(mechanism="gaussian", sigma=1.0, count=0),
        dict(mechanism="gaussian", sigma=1.0, sensitivity=0.0),
        dict(mechanism="gaussian", sigma=1.0, sensitivity=-2.0),
    ],
)
def test_privacy_event_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        PrivacyEvent("stage", **kwargs)


def test_gaussian_and_pure_epsilon_compose_by_adding_the_pure_part() -> None:
    """Gaussian sigma=3 with a pure eps=1 event at delta=1e-7: the Gaussian's exact epsilon at the
    whole delta plus 1 (basic composition, valid for any adaptively chosen pure-eps mechanism)."""
    events = [PrivacyEvent("a", "gaussian", sigma=3.0), PrivacyEvent("b", "laplace", epsilon=1.0)]
    summary = Accountant(events).summary(1e-7)
    assert summary["epsilon"] == pytest.approx(1.0 + gaussian_epsilon(3.0, 1e-7), rel=1e-12)
    assert summary["method"].startswith("analytic-gaussian + basic")


@pytest.mark.parametrize("eps0", [0.5, 2.0, 5.0])
def test_single_laplace_event_is_exact(eps0: float) -> None:
    """One pure-eps event: reported as eps0, which is at least its exact eps(delta) for a Laplace
    mechanism (eps0 + 2 log(1 - delta))."""
    delta = 1e-7
    total = Accountant([PrivacyEvent("a", "laplace", epsilon=eps0)]).total_epsilon(delta)
    assert laplace_single_epsilon(eps0, delta) <= total == pytest.approx(eps0, rel=1e-12)


@pytest.mark.parametrize("eps0, k, delta", [(0.3, 10, 1e-6), (0.1, 50, 1e-6), (2.0, 3, 1e-7)])
def test_pure_laplace_k_fold(eps0: float, k: int, delta: float) -> None:
    """k-fold pure eps0: basic composition k * eps0, never below the optimal composition bound for
    any eps0-DP mechanisms (Kairouz-Oh-Viswanath), which it may exceed (it is sound, not tight)."""
    total = Accountant([PrivacyEvent("a", "laplace", epsilon=eps0, count=k)]).total_epsilon(delta)
    assert total == pytest.approx(k * eps0, rel=1e-12)
    assert total >= kov_epsilon(delta, eps0, k) - 1e-12


@pytest.mark.parametrize("eps0, k, delta", [(0.1, 50, 1e-6), (0.05, 200, 1e-7), (0.3, 20, 1e-6)])
def test_pure_events_compose_as_the_worst_eps_dp_mechanism(eps0: float, k: int, delta: float) -> None:
    """A discrete Laplace (every released Laplace value is on a grid) has exactly randomized
    response's privacy loss (±eps0), and adaptively budgeted pure-eps stages are only known to be
    eps0-DP: the composition must not be below the Kairouz-Oh-Viswanath optimum for eps0-DP
    mechanisms, which randomized response attains (minus the PRV discretisation error, 2e-3)."""
    total = Accountant([PrivacyEvent("a", "laplace", epsilon=eps0, count=k)]).total_epsilon(delta)
    assert total >= kov_epsilon(delta, eps0, k) - 2e-3


def test_mixed_composition_bounds() -> None:
    delta = 1e-6
    events = [
        PrivacyEvent("dpne", "gaussian", sigma=2.0),
        PrivacyEvent("synth", "laplace", epsilon=0.5, count=3),
        PrivacyEvent("synth", "laplace", epsilon=2.0),
        PrivacyEvent("triehh", "approx", epsilon=0.25, delta=1e-7),
    ]
    summary = Accountant(events).summary(delta)
    expected = gaussian_epsilon(2.0, delta - 1e-7) + 3 * 0.5 + 2.0 + 0.25
    assert summary["epsilon"] == pytest.approx(expected, rel=1e-12)
    # composition is never more private than any one of its parts
    largest_part = max(gaussian_epsilon(2.0, delta), laplace_single_epsilon(2.0, delta))
    assert summary["epsilon"] >= largest_part


# ----------------------------------------------------------------------------------------------
# DPNE schedule (Thm. 2.1, §3.1.1) and DPSU threshold
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("levels", [1, 3, 9])
@pytest.mark.parametrize("decay", [0.8, 1.0, 1.3])
def test_dpne_sigmas(levels: int, decay: float) -> None:
    epsilon, delta = 2.0, 1e-7
    sigma_star, sigmas = dpne_sigmas(epsilon, delta, levels, decay)
    assert len(sigmas) == levels
    assert 1 / sigma_star**2 == pytest.approx(sum(1 / s**2 for s in sigmas), rel=1e-12)
    for prev, nxt in zip(sigmas, sigmas[1:], strict=False):
        assert nxt == pytest.approx(decay * prev, rel=1e-12)
    assert sigmas[0] == pytest.approx(
        sigma_star * math.sqrt(sum(decay ** (-2 * k) for k in range(levels))), rel=1e-12
    )
    # sigma* solves eq. (1) at delta/2 (tightly, and on the safe side)
    assert sigma_star == gaussian_sigma(epsilon, delta / 2)
    assert gaussian_delta(epsilon, sigma_star) <= delta / 2
    assert gaussian_delta(epsilon, sigma_star) == pytest.approx(delta / 2, rel=1e-6)


def test_dpne_sigmas_refuses_bad_schedule() -> None:
    with pytest.raises(BudgetError):
        dpne_sigmas(1.0, 1e-6, 0)
    with pytest.raises(BudgetError):
        dpne_sigmas(1.0, 1e-6, 3, decay=0.0)
    with pytest.raises(BudgetError):
        dpne_sigmas(0.0, 1e-6, 3)


@pytest.mark.parametrize("sigma", [1.0, 5.3, 40.0])
@pytest.mark.parametrize("delta_threshold", [1e-5, 5e-8, 1e-12])
def test_dpsu_threshold_matches_brute_force(sigma: float, delta_threshold: float) -> None:
    max_delta = 60
    reference = reference_dpsu_thresholds(sigma, delta_threshold, max_delta)
    for contribution in (1, 2, 7, 30, max_delta):
        assert dpsu_threshold(sigma, delta_threshold, contribution) == pytest.approx(
            reference[contribution - 1], rel=1e-9
        )


def test_dpsu_threshold_is_monotone() -> None:
    sigmas = np.linspace(0.5, 30, 40)
    by_sigma = [dpsu_threshold(s, 1e-7, 10) for s in sigmas]
    by_delta = [dpsu_threshold(4.0, 1e-7, d) for d in range(1, 200)]
    assert np.all(np.diff(by_sigma) > 0)
    assert np.all(np.diff(by_delta) >= 0)
    assert by_delta[-1] > by_delta[0]


def test_dpsu_threshold_refuses_bad_input() -> None:
    with pytest.raises(BudgetError):
        dpsu_threshold(1.0, 1e-6, 0)
    with pytest.raises(BudgetError):
        dpsu_threshold(1.0, 0.0, 5)


# ----------------------------------------------------------------------------------------------
# Empirical privacy of the Gaussian mechanism as sampled by NoiseSource
# ----------------------------------------------------------------------------------------------
EMPIRICAL_DRAWS = 2_000_000
EMPIRICAL_FAILURE = 1e-4  # total false-failure probability of the whole empirical check


def violated_threshold_events(
    low: np.ndarray, high: np.ndarray, epsilon: float, delta: float, thresholds: np.ndarray
) -> list[str]:
    """Threshold events E at which the DP inequality P[M(A) ∈ E] <= e^ε P[M(B) ∈ E] + δ is
    violated with confidence, for (A, B) in both orders and E in {> t, <= t}.

    For each check the numerator's one-sided Clopper-Pearson LOWER bound and the denominator's
    one-sided UPPER bound are used, each at level alpha; a violation is reported only if
    lower(P_A) > e^ε upper(P_B) + δ. If the mechanism is (ε, δ)-DP, a report needs one of the 2m
    bounds (m checks) to be wrong, so the false-failure probability is <= 2·m·alpha, set to
    EMPIRICAL_FAILURE (union bound)."""
    m = 4 * thresholds.size
    alpha = EMPIRICAL_FAILURE / (2 * m)
    n_low, n_high = low.size, high.size
    sorted_low, sorted_high = np.sort(low), np.sort(high)
    above_low = n_low - np.searchsorted(sorted_low, thresholds, side="right")
    above_high = n_high - np.searchsorted(sorted_high, thresholds, side="right")

    def lower(k: int, n: int) -> float:
        return 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))

    def upper(k: int, n: int) -> float:
        return 1.0 if k == n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))

    violations = []
    bound = math.exp(epsilon)
    for t, a_low, a_high in zip(thresholds, above_low, above_high, strict=True):
        counts = {  # event -> (count under low input, count under high input)
            f"M > {t:.2f}": (int(a_low), int(a_high)),
            f"M <= {t:.2f}": (n_low - int(a_low), n_high - int(a_high)),
        }
        for event, (k_low, k_high) in counts.items():
            for name, (k_a, n_a, k_b, n_b) in {
                "high vs low": (k_high, n_high, k_low, n_low),
                "low vs high": (k_low, n_low, k_high, n_high),
            }.items():
                if lower(k_a, n_a) > bound * upper(k_b, n_b) + delta:
                    violations.append(f"{event} ({name})")
    return violations


@pytest.mark.statistical
def test_gaussian_mechanism_empirical_privacy(secure_noise: NoiseSource) -> None:
    """Neighbouring sensitivity-1 counts 0 and 1, noise calibrated by gaussian_sigma(ε=1, δ=1e-5).
    Threshold sets {M > t} are the optimal distinguishing events for a Gaussian, so they probe the
    privacy profile directly; the test's false-failure probability is 1e-4 in total."""
    epsilon, delta = 1.0, 1e-5
    sigma = gaussian_sigma(epsilon, delta)
    thresholds = np.linspace(-4 * sigma, 5 * sigma, 46)
    low = 0.0 + secure_noise.gaussian(sigma, EMPIRICAL_DRAWS)
    high = 1.0 + secure_noise.gaussian(sigma, EMPIRICAL_DRAWS)
    assert violated_threshold_events(low, high, epsilon, delta, thresholds) == []


@pytest.mark.statistical
def test_empirical_privacy_check_detects_undercalibrated_noise(secure_noise: NoiseSource) -> None:
    """Power: with 60% of the calibrated noise the mechanism is far from (1, 1e-5)-DP
    (true delta ≈ 3e-3) and the same check must find violating events."""
    epsilon, delta = 1.0, 1e-5
    sigma = 0.6 * gaussian_sigma(epsilon, delta)
    assert gaussian_delta(epsilon, sigma) > 100 * delta
    thresholds = np.linspace(-4 * sigma, 5 * sigma, 46)
    low = 0.0 + secure_noise.gaussian(sigma, EMPIRICAL_DRAWS)
    high = 1.0 + secure_noise.gaussian(sigma, EMPIRICAL_DRAWS)
    assert violated_threshold_events(low, high, epsilon, delta, thresholds)
