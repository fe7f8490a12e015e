"""Privacy accounting: noise calibration, composition across stages, and the run's privacy events.

One accountant for the whole project. Stages never compute an epsilon themselves: they ask this
module for their noise scale and report what they used as :class:`PrivacyEvent`s.

Formulas (see ``docs/accounting.md`` for the derivations):

* Analytic Gaussian mechanism (Balle & Wang 2018, Thm. 8; DPNE paper Prop. 2.4): a Gaussian
  mechanism with l2-sensitivity ``s`` and noise ``sigma`` is (eps, delta)-DP for
  ``delta = Phi(-eps*sigma/s + s/(2 sigma)) - e^eps * Phi(-eps*sigma/s - s/(2 sigma))``.
* Gaussian composition is exact (Dong, Roth & Su 2019; DPNE Prop. 2.3): mechanisms with
  sensitivity 1 and noise sigma_i compose to one with ``1/sigma^2 = sum 1/sigma_i^2``.
* DPNE Theorem 2.1: sigma* solves eq. (1) at a fraction of delta (the paper's delta/2); the DPSU
  threshold rho_1 covers the rest (a (0, delta_0) event).
* Mixed runs: the merged Gaussian at the delta left by the (eps, delta) events, plus the pure-eps and
  approx events' epsilons (basic composition, valid for adaptively chosen pure-eps mechanisms).
* Joint calibration (:func:`joint_calibration`): every budgeted stage declares how it turns an
  (ε, δ) into events (:class:`StagePrivacy`); the stages' ε are scaled together by one factor
  ``m >= 1`` until the composition of all their events equals the run's target, so the
  sub-additivity of composition buys less noise instead of unspent budget (docs/accounting.md,
  "Joint calibration").

Owns: the Gaussian and Laplace calibration, the DPNE/DPSU σ and threshold, :class:`PrivacyEvent`,
composition of privacy events (:class:`Accountant`), the stages' composition shapes
(:class:`StagePrivacy`) and the joint calibration of their budgets, the run's privacy summary.
Imports: dpngram.core.errors, dpngram.core.budget; numpy, scipy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import optimize, special, stats

from dpngram.core.budget import Budget
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


def reserve_gaussian(sigmas: Sequence[float], share: float) -> tuple[list[float], float]:
    """Room for one more sensitivity-1 Gaussian beside ``sigmas``, paid by all of them in proportion.

    The new mechanism gets noise ``sigmas[0] / sqrt(share)`` (the precision ``share / sigma_1^2``),
    and every sigma is multiplied by ``sqrt(P / (P - share / sigma_1^2))`` with ``P = sum 1/sigma^2``,
    so that the returned sigmas and the new one compose to exactly ``compose_gaussian_sigmas(sigmas)``
    (Gaussians compose by adding precisions). Rounded as
    :func:`dpngram.mechanisms.dpsu_rounds.sips_sigmas` rounds: the composition of the result is
    never above that of ``sigmas``, so the accountant's epsilon is never below the plan's (at most a
    few ulps above). Returns (the scaled sigmas, the new sigma)."""
    if not (math.isfinite(share) and 0 < share < 1):
        raise BudgetError(f"the reserved share must be in (0, 1) (got {share!r})")
    target = compose_gaussian_sigmas(sigmas)
    precision = 1.0 / (target * target)
    reserved = share / (sigmas[0] * sigmas[0])  # < precision: share < 1 and sigma_1 >= target
    scale = math.sqrt(precision / (precision - reserved))
    scaled, new = [s * scale for s in sigmas], sigmas[0] / math.sqrt(share)
    while compose_gaussian_sigmas([*scaled, new]) > target:
        scaled, new = [math.nextafter(s, 0.0) for s in scaled], math.nextafter(new, 0.0)
    return scaled, new


def dpne_sigmas(
    epsilon: float, delta: float, levels: int, decay: float = 1.0, gaussian_delta: float = 0.5
) -> tuple[float, list[float]]:
    """DPNE Theorem 2.1 with the schedule sigma_k = decay * sigma_{k-1} (paper §3.1.1).

    Returns (sigma_star, [sigma_1, ..., sigma_T]) where sigma_star solves eq. (1) at
    ``gaussian_delta * delta`` (the paper's delta/2; the rest of delta is the DPSU threshold's) and
    ``1/sigma_star^2 = sum_k 1/sigma_k^2``.
    """
    if levels < 1:
        raise BudgetError(f"T must be >= 1 (got {levels})")
    if decay <= 0:
        raise BudgetError(f"sigma decay c must be > 0 (got {decay})")
    if not 0 < gaussian_delta <= 1:
        raise BudgetError(f"the Gaussian's fraction of delta must be in (0, 1] (got {gaussian_delta})")
    sigma_star = gaussian_sigma(epsilon, delta * gaussian_delta)
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

    Gaussian events are merged exactly into one Gaussian (Prop. 2.3) and converted analytically at
    the delta left after the ``approx`` events' deltas; the pure-epsilon (``laplace``) and
    ``approx`` events' epsilons are added (basic composition). Basic composition holds for any
    adaptively chosen pure-epsilon mechanisms, which is what the Chen et al. stage is (its
    per-node budgets depend on earlier noisy counts), and it makes the total an exact, smooth
    function of the stages' parameters, which :func:`joint_calibration` relies on. (A numerical
    PRV composition with a Laplace privacy-loss distribution was used before: it is not
    provably valid for an adaptive pure-epsilon stage; docs/accounting.md.)
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
    gaussian_part = gaussian_epsilon(sigma, remaining) if sigma else 0.0
    pure_sum = sum(e.epsilon * e.count for e in laplace)
    return {
        "epsilon": gaussian_part + pure_sum + approx_eps,
        "delta": delta,
        "method": "analytic-gaussian" if not laplace else "analytic-gaussian + basic (pure-epsilon parts)",
        "gaussian_sigma": sigma,
    }


# ----------------------------------------------------------------------------------------------
# Stage shapes and joint calibration
# ----------------------------------------------------------------------------------------------
#: Fraction of a Gaussian stage's delta share left unused by its calibration (Bayesian trigram and
#: LM-count stages calibrate sigma at delta * (1 - margin)), so the accountant's conversion at the
#: share's delta has a strictly positive remainder to work with.
GAUSSIAN_DELTA_MARGIN = 1e-3

#: Fraction of the TrieHH share's delta at which its shuffle-amplification bound is computed.
TRIEHH_DELTA_SHARE_USED = 0.999

#: Relative precision of the joint calibration: the composed total is within this of the target,
#: and never above it.
JOINT_TOLERANCE = 1e-7


@dataclass(frozen=True)
class StagePrivacy:
    """How a budgeted stage turns its (epsilon, delta) into privacy events: its composition shape.

    * ``gaussian``: one Gaussian mechanism (several that compose to one, e.g. the DPNE levels) with
      noise multiplier ``gaussian_sigma(epsilon, gaussian_delta * delta)``, plus a ``(0,
      threshold_delta * delta)`` event when ``threshold_delta > 0`` (the DPSU threshold).
    * ``laplace``: a pure epsilon-DP stage (Laplace-type noise).
    * ``approx``: an (epsilon, approx_delta * delta) event (TrieHH's central guarantee).

    The stage's own calibration must produce exactly these events (or ones that compose to
    less), which tests/test_budget_plan.py checks stage by stage against the real calibration
    functions.
    """

    kind: Literal["gaussian", "laplace", "approx"]
    gaussian_delta: float = 0.0
    threshold_delta: float = 0.0
    approx_delta: float = 0.0

    def events(self, stage: str, budget: Budget) -> list[PrivacyEvent]:
        epsilon, delta = budget
        if self.kind == "laplace":
            return [PrivacyEvent(stage=stage, mechanism="laplace", epsilon=epsilon)]
        if self.kind == "approx":
            return [
                PrivacyEvent(
                    stage=stage, mechanism="approx", epsilon=epsilon, delta=self.approx_delta * delta
                )
            ]
        events = [
            PrivacyEvent(
                stage=stage, mechanism="gaussian", sigma=gaussian_sigma(epsilon, self.gaussian_delta * delta)
            )
        ]
        if self.threshold_delta > 0:
            events.append(PrivacyEvent(stage=stage, mechanism="approx", delta=self.threshold_delta * delta))
        return events


@dataclass(frozen=True)
class BudgetPlan:
    """The budgets each stage calibrates to, and what they compose to.

    ``nominal[s]`` is the stage's fraction of the run's (epsilon, delta); ``calibrated[s]`` is
    ``(multiplier * nominal epsilon, nominal delta)``: what the stage calibrates its noise to on its
    own. Composed together, the calibrated stages spend ``composed_epsilon`` at ``target.delta``,
    equal to ``target.epsilon`` up to :data:`JOINT_TOLERANCE` (never above it)."""

    target: Budget
    multiplier: float
    nominal: dict[str, Budget]
    calibrated: dict[str, Budget]
    composed_epsilon: float

    def report(self) -> dict[str, Any]:
        return {
            "target_epsilon": self.target.epsilon,
            "target_delta": self.target.delta,
            "multiplier": self.multiplier,
            "composed_epsilon": self.composed_epsilon,
            "stages": {
                s: {
                    "nominal_epsilon": self.nominal[s].epsilon,
                    "calibrated_epsilon": b.epsilon,
                    "delta": b.delta,
                }
                for s, b in self.calibrated.items()
            },
        }


def joint_calibration(
    shapes: dict[str, StagePrivacy], fractions: dict[str, float], budget: Budget, *, joint: bool = True
) -> BudgetPlan:
    """Scale every stage's epsilon by one factor m >= 1 so that the composition of all the stages'
    events equals ``budget * sum(fractions)`` (the run's budget when the fractions sum to 1).

    Each stage keeps its fraction of delta and the proportions of the epsilons are kept. The
    composed epsilon grows continuously and strictly with m, and is at most the target at m = 1
    (basic composition of the shares); m is found by bracketing and Brent's method, then nudged
    down until the composed total is not above the target. ``joint=False`` gives m = 1 (every
    stage calibrated to its share alone: the previous behaviour, for comparison)."""
    if set(fractions) - set(shapes):
        raise BudgetError(f"no privacy shape for stage(s) {sorted(set(fractions) - set(shapes))}")
    total_fraction = sum(fractions.values())
    target = budget * min(1.0, total_fraction)
    nominal = {s: budget * f for s, f in fractions.items()}

    def plan(m: float) -> dict[str, Budget]:
        return {s: Budget(b.epsilon * m, b.delta) for s, b in nominal.items()}

    def composed(m: float) -> float:
        events = [e for s, b in plan(m).items() for e in shapes[s].events(s, b)]
        return compose(events, target.delta)["epsilon"] if events else 0.0

    if not nominal or target.epsilon <= 0:
        return BudgetPlan(target, 1.0, nominal, plan(1.0), 0.0)
    goal = target.epsilon
    at_one = composed(1.0)
    if not joint or at_one >= goal * (1 - JOINT_TOLERANCE):
        return BudgetPlan(target, 1.0, nominal, plan(1.0), at_one)
    lo, hi = 1.0, 2.0
    while composed(hi) < goal:
        lo, hi = hi, hi * 2.0
        if hi > 1e6:
            raise BudgetError("joint calibration did not converge (internal error)")
    m = optimize.brentq(lambda x: composed(x) - goal, lo, hi, xtol=1e-12, rtol=JOINT_TOLERANCE / 4)
    value = composed(m)
    while value > goal:  # round towards safety
        m *= 1 - JOINT_TOLERANCE / 4
        value = composed(m)
    return BudgetPlan(target, m, nominal, plan(m), value)


def parallel_pure_epsilon(plan: BudgetPlan, shapes: dict[str, StagePrivacy], stage: str) -> float:
    """The pure ε a mechanism of ``stage`` may spend on a group of users that none of the stage's
    ledgered mechanisms reads (parallel composition inside the stage, e.g. the LM weight selection
    on held-out users), so that those users' composed loss stays within the run's total.

    Such a user pays every OTHER stage's events plus that pure-ε mechanism; :func:`compose` adds
    pure ε linearly, so the largest admissible ε is ``plan.composed_epsilon − compose(others)``,
    capped at the stage's own calibrated ε (the per-stage claim). Under joint calibration this is
    much less than the stage's ε: the stage's Gaussian event composes sub-additively with the
    other Gaussians, a pure-ε mechanism does not (docs/lm_privacy.md, section 4)."""
    if stage not in plan.calibrated:
        raise BudgetError(f"stage '{stage}' has no budget in the plan")
    others = [e for s, b in plan.calibrated.items() if s != stage for e in shapes[s].events(s, b)]
    used = compose(others, plan.target.delta)["epsilon"] if others else 0.0
    room = plan.composed_epsilon - used
    if room <= 0:
        raise BudgetError(f"stage '{stage}': no epsilon left for a parallel pure-epsilon mechanism")
    return min(plan.calibrated[stage].epsilon, room)


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
