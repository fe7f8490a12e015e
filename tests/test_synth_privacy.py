"""Empirical ε-DP checks of the Chen et al. exploration tree (pipeline/synth.py, Theorem 5.1) on
neighbouring user databases (D' = D plus one user), with the real CSPRNG noise source.

Tolerances come from the binomial sampling error of the estimated event probabilities, at a
false-failure rate of 1e-4 per assertion (normal approximation; N is large enough that every
estimated probability has N p (1 - p) > 500)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpngram.mechanisms import synth

ALPHA = 1e-4


def _event_rates(records, params, noise, events, runs):
    oracle = synth.MemoryChildCounts(records)
    hits = dict.fromkeys(events, 0)
    for _ in range(runs):
        tree = synth.build_tree(oracle, params, noise)
        for name, event in events.items():
            hits[name] += bool(event(tree))
    return {name: h / runs for name, h in hits.items()}


def _log_ratio_band(p1: float, p2: float, runs: int) -> tuple[float, float]:
    """Delta-method band of log(p1/p2) at two-sided level ALPHA."""
    z = stats.norm.isf(ALPHA / 2)
    se = math.sqrt((1 - p1) / (runs * p1) + (1 - p2) / (runs * p2))
    return math.log(p1 / p2) - z * se, math.log(p1 / p2) + z * se


def test_unigram_release_is_exactly_as_private_as_claimed(secure_noise):
    """n_max = 1: the whole budget goes to the unigram counts. The added user's truncated record
    (a a a ...) moves count(a) by ℓ_max, so for a tail event {c(a) ≥ t} with t above both true
    counts the likelihood ratio is exactly e^ε: the estimate must lie within the sampling band of
    ε — not above (privacy) and not below (the noise is not over-scaled)."""
    l_max, eps = 3, 1.0
    base = [[2, 3, 0], [2, 0], [3, 3, 3], [2, 2, 4]]
    neighbour = base + [[2, 2, 2]]  # truncated to l_max items already
    params = synth.TreeParams(epsilon=eps, l_max=l_max, n_max=1, n_labels=5)
    count_d_prime = sum(r.count(2) for r in neighbour)
    runs = 12000

    def event(tree):
        return tree.noisy.get((2,), -math.inf) >= count_d_prime

    p_prime = _event_rates(neighbour, params, secure_noise, {"e": event}, runs)["e"]
    p_base = _event_rates(base, params, secure_noise, {"e": event}, runs)["e"]
    low, high = _log_ratio_band(p_prime, p_base, runs)
    assert low <= eps <= high


@pytest.mark.parametrize("allocation", ["adaptive", "uniform"])
def test_tree_shape_events_respect_the_epsilon_bound(secure_noise, allocation):
    """n_max = 2, adaptive budgets: events on the released tree (which nodes pass θ) have
    probability ratios at most e^ε in both directions (up to sampling error)."""
    l_max, eps = 2, 1.0
    base = [[2, 2], [2, 3], [3, 0], [2, 0], [3, 2], [2, 2]] * 3
    neighbour = base + [[2, 2]]
    params = synth.TreeParams(epsilon=eps, l_max=l_max, n_max=2, n_labels=4, allocation=allocation)
    runs = 6000
    events = {
        "a passes": lambda t: (2,) in t.noisy,
        "a a passes": lambda t: (2, 2) in t.noisy,
        "a and a a pass, b fails": lambda t: (2,) in t.noisy and (2, 2) in t.noisy and (3,) not in t.noisy,
    }
    z = stats.norm.isf(ALPHA / (2 * len(events)))
    rates1 = _event_rates(neighbour, params, secure_noise, events, runs)
    rates2 = _event_rates(base, params, secure_noise, events, runs)
    for name in events:
        p1, p2 = rates1[name], rates2[name]
        for hi, lo in ((p1, p2), (p2, p1)):
            # hi <= e^eps lo, allowing z standard errors of (hi - e^eps lo)
            se = math.sqrt(hi * (1 - hi) / runs + math.exp(2 * eps) * lo * (1 - lo) / runs)
            assert hi - math.exp(eps) * lo <= z * se + 1e-12, name


def test_zero_child_pass_rate_matches_the_threshold_design(secure_noise):
    """A node whose children all have true count 0: the number of children passing θ is
    Binomial(|I|+1, P_θ) with |I| P_θ ≈ 1 (§4.3.3, on the grid). Mean within the binomial band."""
    n_labels, eps, l_max = 2001, 0.5, 10
    scale = l_max / eps
    grid = synth.noise_grid(scale)
    theta = synth.threshold(eps, l_max, n_labels - 1)
    p = synth.pass_probability(theta, scale, grid)
    assert (n_labels - 1) * p == pytest.approx(1.0, rel=0.01)  # the grid moves P_θ by < 1%
    runs = 4000
    passed = np.array(
        [
            synth.implicit_children(
                secure_noise, np.empty(0, np.int64), np.empty(0), n_labels, theta, scale, grid
            )[0].size
            for _ in range(runs)
        ]
    )
    z = stats.norm.isf(ALPHA / 2)
    assert abs(passed.mean() - n_labels * p) <= z * math.sqrt(n_labels * p * (1 - p) / runs)
