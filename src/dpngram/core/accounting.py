"""Privacy accounting: noise calibration, composition across stages, and the run's privacy events.

One accountant for the whole project. Stages never compute an epsilon themselves: they ask this
module for their noise scale and report what they used as :class:`PrivacyEvent`s.

Formulas (see ``docs/accounting.md`` for the derivations):

* Analytic Gaussian mechanism (Balle & Wang 2018, Thm. 8; DPNE paper Prop. 2.4): a Gaussian
  mechanism with l2-sensitivity ``s`` and noise ``sigma`` is (eps, delta)-DP for
  ``delta = Phi(-eps*sigma/s + s/(2 sigma)) - e^eps * Phi(-eps*sigma/s - s/(2 sigma))``.
* Gaussian composition is exact (Dong, Roth & Su 2019; DPNE Prop. 2.3): mechanisms with
  sensitivity 1 and noise sigma_i compose to one with ``1/sigma^2 = sum 1/sigma_i^2``.
* DPNE Theorem 2.1: sigma* solves eq. (1) at delta/2; the DPSU threshold rho_1 covers the other
  delta/2 (a (0, delta/2) event).
* Mixed runs (Gaussian + Laplace / pure-eps + (eps, delta) events) are composed numerically with
  ``prv-accountant`` (Gopi, Lee & Wutschitz 2021), whose upper bound is reported; the basic
  composition sum is computed too and the smaller of the two sound bounds is the run's total.

Owns: the Gaussian and Laplace calibration, the DPNE/DPSU σ and threshold, :class:`PrivacyEvent`,
composition of privacy events (:class:`Accountant`), the run's privacy summary.
Imports: dpngram.core.errors; numpy, scipy, prv-accountant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import optimize, special, stats

from dpngram.core.errors import BudgetError

Mechanism = Literal["gaussian", "laplace", "approx"]


# ----------------------------------------------------------------------------------------------
# Analytic Gaussian mechanism
# ----------------------------------------------------------------------------------------------
def gaussian_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Smallest delta for which N(0, sigma^2) noise on an l2-sensitivity-``sensitivity`` query is
    (epsilon, delta)-DP (Balle & Wang 2018, Thm. 8)."""
    if sigma <= 0 or sensitivity <= 0 or epsilon < 0:
        raise ValueError("gaussian_delta needs sigma > 0, sensitivity > 0, epsilon >= 0")
    mu = sensitivity / sigma  # Gaussian-DP parameter
    a = -epsilon / mu + mu / 2.0
    b = -epsilon / mu - mu / 2.0
    # Phi(a) - e^eps Phi(b), with the second term in log space to avoid overflow at large eps.
    second = math.exp(epsilon + special.log_ndtr(b)) if b > -40 else 0.0
    return max(0.0, float(special.ndtr(a)) - second)


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma making the Gaussian mechanism (epsilon, delta)-DP (analytic calibration)."""
    _check_eps_delta(epsilon, delta)
    # delta(sigma) decreases in sigma: bracket, then solve on log(sigma).
    lo, hi = 1e-3 * sensitivity, 10.0 * sensitivity
    while gaussian_delta(epsilon, hi, sensitivity) > delta:
        hi *= 4.0
    while gaussian_delta(epsilon, lo, sensitivity) < delta:
        lo /= 4.0
    root = optimize.brentq(
        lambda log_s: (
            math.log(gaussian_delta(epsilon, math.exp(log_s), sensitivity) + 1e-300) - math.log(delta)
        ),
        math.log(lo),
        math.log(hi),
        xtol=1e-13,
        rtol=1e-13,
    )
    sigma = math.exp(root)
    while gaussian_delta(epsilon, sigma, sensitivity) > delta:  # round towards safety
        sigma *= 1 + 1e-12
    return sigma


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest epsilon for which the Gaussian mechanism is (epsilon, delta)-DP."""
    if not 0 < delta < 1:
        raise BudgetError(f"delta must be in (0, 1) (got {delta})")
    if gaussian_delta(0.0, sigma, sensitivity) <= delta:
        return 0.0
    hi = 1.0
    while gaussian_delta(hi, sigma, sensitivity) > delta:
        hi *= 2.0
    eps = optimize.brentq(lambda e: gaussian_delta(e, sigma, sensitivity) - delta, 0.0, hi, xtol=1e-13)
    while gaussian_delta(eps, sigma, sensitivity) > delta:
        eps *= 1 + 1e-12
    return eps


def compose_gaussian_sigmas(sigmas: Iterable[float]) -> float:
    """Noise of the single Gaussian mechanism equivalent to composing sensitivity-1 Gaussians."""
    inv = 0.0
    for s in sigmas:
        if not s > 0:  # also refuses nan
            raise ValueError(f"every sigma must be > 0 (got {s!r})")
        inv += 1.0 / (s * s)
    if inv <= 0:
        raise ValueError("need at least one sigma")
    return 1.0 / math.sqrt(inv)


def dpne_sigmas(epsilon: float, delta: float, levels: int, decay: float = 1.0) -> tuple[float, list[float]]:
    """DPNE Theorem 2.1 with the schedule sigma_k = decay * sigma_{k-1} (paper §3.1.1).

    Returns (sigma_star, [sigma_1, ..., sigma_T]) where sigma_star solves eq. (1) at delta/2 and
    ``1/sigma_star^2 = sum_k 1/sigma_k^2``.
    """
    if levels < 1:
        raise BudgetError(f"T must be >= 1 (got {levels})")
    if decay <= 0:
        raise BudgetError(f"sigma decay c must be > 0 (got {decay})")
    sigma_star = gaussian_sigma(epsilon, delta / 2.0)
    # sigma_k = decay^(k-1) sigma_1  =>  1/sigma*^2 = (1/sigma_1^2) sum_k decay^(-2(k-1))
    weight = sum(decay ** (-2.0 * k) for k in range(levels))
    sigma_1 = sigma_star * math.sqrt(weight)
    return sigma_star, [sigma_1 * decay**k for k in range(levels)]


def dpsu_threshold(sigma: float, delta_threshold: float, max_contribution: int) -> float:
    """DPSU weighted-Gaussian threshold (GGK+20; DPNE Thm. 2.1):
    ``rho = max_{1<=t<=Delta} 1/sqrt(t) + sigma * Phi^{-1}((1 - delta_threshold)^{1/t})``.

    ``delta_threshold`` is the delta of the (0, delta)-part (delta/2 in DPNE).
    Computed as ``Phi^{-1}(1-x) = isf(x)`` with ``x = -expm1(log1p(-delta)/t)`` for accuracy.
    """
    if max_contribution < 1:
        raise BudgetError(f"max contribution must be >= 1 (got {max_contribution})")
    if not 0 < delta_threshold < 1:
        raise BudgetError(f"threshold delta must be in (0, 1) (got {delta_threshold})")
    t = np.arange(1, max_contribution + 1, dtype=np.float64)
    tail = -np.expm1(np.log1p(-delta_threshold) / t)
    return float(np.max(1.0 / np.sqrt(t) + sigma * stats.norm.isf(tail)))


def laplace_scale(epsilon: float, sensitivity: float) -> float:
    """Laplace scale b = sensitivity / epsilon for an epsilon-DP release of an l1-sensitive query."""
    if epsilon <= 0 or sensitivity <= 0:
        raise BudgetError(f"epsilon and sensitivity must be > 0 (got {epsilon}, {sensitivity})")
    return sensitivity / epsilon


# ----------------------------------------------------------------------------------------------
# Events and composition
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrivacyEvent:
    """One mechanism invocation, as reported by a stage.

    * ``gaussian``: ``sigma`` with l2 ``sensitivity`` (composed exactly with other Gaussians).
    * ``laplace``: pure ``epsilon`` from the Laplace mechanism (scale = sensitivity/epsilon).
    * ``approx``: a generic (epsilon, delta) event, e.g. DPSU's (0, delta/2) threshold part.
    ``count`` self-compositions of the same event.
    """

    stage: str
    mechanism: Mechanism
    sigma: float | None = None
    sensitivity: float = 1.0
    epsilon: float = 0.0
    delta: float = 0.0
    count: int = 1
    note: str = ""

    def __post_init__(self) -> None:
        if self.mechanism == "gaussian" and not (self.sigma and self.sigma > 0):
            raise ValueError("a gaussian event needs sigma > 0")
        if not (self.sensitivity > 0 and math.isfinite(self.sensitivity)):
            raise ValueError(f"a privacy event needs a finite sensitivity > 0 (got {self.sensitivity!r})")
        if self.mechanism == "laplace" and self.epsilon <= 0:
            raise ValueError("a laplace event needs epsilon > 0")
        if self.delta < 0 or self.delta >= 1 or self.epsilon < 0 or self.count < 1:
            raise ValueError(f"invalid privacy event {self}")

    @property
    def normalized_sigma(self) -> float:
        """sigma / sensitivity: the noise multiplier of the equivalent sensitivity-1 mechanism."""
        assert self.sigma is not None
        return self.sigma / self.sensitivity

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Accountant:
    """Collects a run's privacy events and computes their total (epsilon, delta)."""

    events: list[PrivacyEvent] = field(default_factory=list)

    def add(self, event: PrivacyEvent) -> PrivacyEvent:
        self.events.append(event)
        return event

    def stages(self) -> list[str]:
        return list(dict.fromkeys(e.stage for e in self.events))

    def total_epsilon(self, delta: float, events: Sequence[PrivacyEvent] | None = None) -> float:
        """Epsilon of the composition of ``events`` (default: all) at total ``delta``."""
        return compose(self.events if events is None else events, delta)["epsilon"]

    def stage_epsilon(self, stage: str, delta: float) -> float:
        return self.total_epsilon(delta, [e for e in self.events if e.stage == stage])

    def summary(self, delta: float) -> dict:
        """Per-stage and total spend at ``delta``, for report.json and the ledger."""
        out = compose(self.events, delta)
        out["events"] = [e.to_dict() for e in self.events]
        return out


def compose(events: Sequence[PrivacyEvent], delta: float) -> dict:
    """Total epsilon of ``events`` at total ``delta``.

    Gaussian events are merged exactly into one Gaussian; ``approx`` events' deltas are
    subtracted from the target delta (basic composition of the delta parts). With only Gaussians
    left the analytic conversion is exact; otherwise prv-accountant's upper bound and the basic
    composition sum are both sound, and the smaller is returned.
    """
    if not 0 < delta < 1:
        raise BudgetError(f"delta must be in (0, 1) (got {delta})")
    if not events:
        return {"epsilon": 0.0, "delta": 0.0, "method": "none"}
    gauss = [e for e in events if e.mechanism == "gaussian"]
    laplace = [e for e in events if e.mechanism == "laplace"]
    approx = [e for e in events if e.mechanism == "approx"]
    fixed_delta = sum(e.delta * e.count for e in approx)
    approx_eps = sum(e.epsilon * e.count for e in approx)
    remaining = delta - fixed_delta
    if remaining <= 0:
        raise BudgetError(
            f"the (epsilon, delta) events already use delta={fixed_delta:.3g} >= the target {delta:.3g}"
        )
    sigma = None
    if gauss:
        sigma = compose_gaussian_sigmas(s for e in gauss for s in [e.normalized_sigma] * e.count)
    if not laplace:
        eps = (gaussian_epsilon(sigma, remaining) if sigma else 0.0) + approx_eps
        return {"epsilon": eps, "delta": delta, "method": "analytic-gaussian", "gaussian_sigma": sigma}
    pure_sum = sum(e.epsilon * e.count for e in laplace)
    basic = pure_sum + approx_eps + (gaussian_epsilon(sigma, remaining) if sigma else 0.0)
    prv = _prv_epsilon(sigma, laplace, remaining)
    eps = min(basic, prv + approx_eps) if prv is not None else basic
    return {
        "epsilon": eps,
        "delta": delta,
        "method": "prv-accountant" if prv is not None and prv + approx_eps < basic else "basic",
        "gaussian_sigma": sigma,
        "basic_composition_epsilon": basic,
    }


def _prv_epsilon(sigma: float | None, laplace: Sequence[PrivacyEvent], delta: float) -> float | None:
    """Upper bound on epsilon from prv-accountant (numerical PRV composition)."""
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import GaussianMechanism

    prvs, counts = [], []
    if sigma is not None:
        prvs.append(GaussianMechanism(noise_multiplier=sigma))
        counts.append(1)
    for event in laplace:
        prvs.append(pure_epsilon_prv(event.epsilon))
        counts.append(event.count)
    try:
        accountant = PRVAccountant(
            prvs=prvs, max_self_compositions=counts, eps_error=1e-3, delta_error=delta * 1e-3
        )
        _, _, upper = accountant.compute_epsilon(delta=delta * (1 - 1e-3), num_self_compositions=counts)
    except (ValueError, RuntimeError, FloatingPointError):
        return None
    return float(upper) if math.isfinite(upper) else None


def pure_epsilon_prv(epsilon: float) -> Any:
    """The privacy random variable of a ``laplace`` (pure ε) event: the WORST ε-DP mechanism's,
    randomized response (prv-accountant's ``PureDPMechanism``), not the continuous Laplace's.

    Why (docs/accounting_faults.md): every noisy value is drawn on a grid (discrete Laplace), whose
    privacy loss for a one-step shift is ±ε with P(+ε) = e^ε/(1 + e^ε): exactly randomized
    response, which composes worse than continuous Laplace (50 events of ε = 0.1 at δ = 1e-6:
    3.17, not 3.12). The Chen et al. stage picks node budgets adaptively from noisy values and is
    ε-DP as a whole by the paper's argument, not a Laplace mechanism of fixed scale. Randomized
    response with ε is a dominating pair for every ε-DP mechanism (Kairouz, Oh & Viswanath 2015),
    and composing dominating pairs bounds adaptive composition (Zhu, Dong & Wang 2022, Thm. 10),
    so this covers both."""
    from prv_accountant.privacy_random_variables import PureDPMechanism

    return PureDPMechanism(eps=epsilon)


def _check_eps_delta(epsilon: float, delta: float) -> None:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise BudgetError(f"epsilon must be a finite number > 0 (got {epsilon!r})")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise BudgetError(f"delta must be in (0, 1) (got {delta!r})")


def privacy_summary(parts: dict[str, dict[str, Any]], delta: float, epsilon_budget: float) -> dict[str, Any]:
    """Spend per stage as recorded, and the run total composed over all stages' events."""
    stages: dict[str, Any] = {}
    events: list[PrivacyEvent] = []
    for name, part in parts.items():
        privacy = part.get("privacy")
        if not isinstance(privacy, dict) or "epsilon" not in privacy:
            continue
        stage_events = [PrivacyEvent(**e) for e in privacy.get("events", [])]
        events.extend(stage_events)
        stages[name] = {
            "epsilon": privacy["epsilon"],
            "delta": privacy.get("delta"),
            "charged_epsilon": privacy.get("charged_epsilon", privacy["epsilon"]),
            "charged_delta": privacy.get("charged_delta", privacy.get("delta")),
            "budget_epsilon": privacy.get("budget_epsilon"),
            "budget_delta": privacy.get("budget_delta"),
            "method": privacy.get("method"),
            "events": len(stage_events),
        }
    out: dict[str, Any] = {"stages": stages, "epsilon_budget": epsilon_budget, "delta": delta}
    if events:
        composed = Accountant(events).summary(delta)
        out["total"] = {k: v for k, v in composed.items() if k != "events"}
        out["events"] = composed["events"]
    else:
        out["total"] = {"epsilon": 0.0, "delta": 0.0, "method": "none"}
        out["events"] = []
    out["basic_composition"] = {
        "epsilon": sum(s["epsilon"] for s in stages.values()),
        "delta": sum(s["delta"] or 0.0 for s in stages.values()),
        "note": "sum over stages of the epsilon each stage reports at its own delta (sound, looser)",
    }
    out["within_budget"] = out["total"]["epsilon"] <= epsilon_budget * (1 + 1e-6)
    return out
