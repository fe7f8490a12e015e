"""Privacy of LDP TrieHH (pipeline/triehh.py, docs/triehh.md).

* Subset Selection is eps0-LDP: for every domain of size d <= 6 the exact output probabilities
  (all subsets) sum to 1 per input and their ratio between any two inputs is at most e^eps0 (and
  reaches it); the sampler's empirical subset frequencies match those probabilities (chi-square);
  the aggregated votes have the exact Binomial laws the debiasing and the noise threshold assume.
* The shuffle amplification bound (FMT21): the closed form reproduces the authors' published value,
  the numerical bound lies in the authors' published [lower, upper] bracket, the delta computation
  equals a brute-force evaluation of the hockey-stick divergence of the two clone distributions,
  and the bound is consistent (numerical <= closed form <= eps0, monotone in n and eps0).

False-failure rates: deterministic checks cannot fail by chance; each statistical check fails
by chance with probability at most 1e-4.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dpngram.core.noise import NoiseSource
from dpngram.mechanisms import triehh

FALSE_FAILURE = 1e-4


def all_subsets(d: int):
    for size in range(d + 1):
        yield from itertools.combinations(range(d), size)


# ----------------------------------------------------------------------------------------------
# Subset Selection
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("eps0", [0.1, 0.7, 1.5, 4.0])
def test_subset_selection_exact_probabilities_are_eps0_ldp(d, eps0):
    table = np.array([[triehh.subset_probability(y, x, d, eps0) for y in all_subsets(d)] for x in range(d)])
    assert np.allclose(table.sum(axis=1), 1.0, atol=1e-12)
    worst = 0.0
    for x, x2 in itertools.permutations(range(d), 2):
        support = table[x2] > 0
        assert np.array_equal(table[x] > 0, support)  # same support for every input
        worst = max(worst, float(np.max(table[x][support] / table[x2][support])))
    assert worst <= math.exp(eps0) * (1 + 1e-12)
    assert worst >= math.exp(eps0) * (1 - 1e-9)  # the guarantee is tight, no slack wasted


def test_subset_size_follows_ye_barg():
    assert triehh.subset_size(39, 10.0) == 1
    assert triehh.subset_size(6, 0.1) == math.ceil(6 / (math.exp(0.1) + 1))
    assert triehh.subset_size(100, 1.0) == 27
    with pytest.raises(ValueError):
        triehh.subset_size(1, 1.0)


@pytest.mark.parametrize("path", ["sparse", "dense"])
@pytest.mark.parametrize(("d", "eps0", "x"), [(5, 1.0, 0), (6, 0.5, 4)])
def test_sampler_matches_exact_probabilities(secure_noise, path, d, eps0, x):
    n = 20_000
    reports = triehh.subset_selection_reports(np.full(n, x), d, eps0, secure_noise, path=path)
    codes = reports.astype(np.int64) @ (1 << np.arange(d))
    s = triehh.subset_size(d, eps0)
    subsets = list(itertools.combinations(range(d), s))
    expected = np.array([triehh.subset_probability(y, x, d, eps0) for y in subsets]) * n
    index = {sum(1 << i for i in y): j for j, y in enumerate(subsets)}
    assert set(np.unique(codes).tolist()) <= set(index)  # only subsets of size s ever appear
    observed = np.bincount([index[c] for c in codes.tolist()], minlength=len(subsets))
    _, p_value = stats.chisquare(observed, expected)
    assert p_value > FALSE_FAILURE


@pytest.mark.parametrize("path", ["sparse", "dense"])
def test_votes_have_the_binomial_laws_of_the_estimator(secure_noise, path):
    d, eps0, n = 40, 2.0, 30_000
    s, p, q = triehh.subset_selection_probabilities(d, eps0)
    items = np.zeros(n, dtype=np.int64)  # everybody reports item 0
    votes = triehh.subset_selection_votes(items, d, eps0, secure_noise, path=path)
    assert votes.sum() == n * s  # every report is a subset of exactly s items
    lo, hi = stats.binom.ppf(FALSE_FAILURE / 4, n, p), stats.binom.isf(FALSE_FAILURE / 4, n, p)
    assert lo <= votes[0] <= hi
    # Every other item is included with probability q independently across reports: the total of
    # the others' votes is n s - V_0, so test one fixed other item against Bin(n, q).
    lo, hi = stats.binom.ppf(FALSE_FAILURE / 4, n, q), stats.binom.isf(FALSE_FAILURE / 4, n, q)
    assert lo <= votes[17] <= hi
    estimate = triehh.debias_votes(votes, n, d, eps0)
    assert estimate.sum() == pytest.approx(n)  # the estimator is calibrated: sum of f_j = N


def test_noise_threshold_is_the_binomial_quantile():
    for reports, d, eps0, rate in [(500, 39, 8.0, 0.01), (40_000, 391, 1.0, 1e-3), (3, 10, 0.5, 0.05)]:
        _, _, q = triehh.subset_selection_probabilities(d, eps0)
        t = triehh.noise_vote_threshold(reports, d, eps0, rate)
        assert stats.binom.sf(t - 1, reports, q) <= rate / d  # P(V >= t) within the rate
        assert t == 1 or stats.binom.sf(t - 2, reports, q) > rate / d  # and t is the smallest such


# ----------------------------------------------------------------------------------------------
# Amplification by shuffling
# ----------------------------------------------------------------------------------------------
def test_closed_form_matches_the_published_value():
    # apple/ml-shuffling-amplification README: n = 10^5, eps0 = 4, delta = 1e-6.
    assert triehh.closed_form_epsilon(4.0, 100_000, 1e-6) == pytest.approx(0.5378040242374512, rel=1e-12)


def test_numerical_bound_lies_in_the_published_bracket():
    # Same README: the numerical analysis gives eps between 0.1675385583317841 (lower bound) and
    # 0.172790550755978 (upper bound after 10 bisection steps with step 100).
    eps = triehh.numerical_epsilon(4.0, 100_000, 1e-6)
    assert 0.1675385583317841 <= eps <= 0.172790550755978


def brute_force_delta(epsilon: float, eps0: float, n: int) -> float:
    """max(D(P||Q), D(Q||P)) over the explicit 2-D clone distributions (FMT21 Thm. 3.2):
    P = (A + D, C - A + 1 - D), Q = (A + 1 - D, C - A + D), D ~ Bern(e^eps0 / (e^eps0 + 1))."""
    alpha = math.exp(eps0) / (math.exp(eps0) + 1)
    P, Q = {}, {}
    for c in range(n):
        wc = stats.binom.pmf(c, n - 1, math.exp(-eps0))
        for a in range(c + 1):
            wa = wc * stats.binom.pmf(a, c, 0.5)
            for dlt, w in ((1, alpha), (0, 1 - alpha)):
                P[(a + dlt, c - a + 1 - dlt)] = P.get((a + dlt, c - a + 1 - dlt), 0) + wa * w
                Q[(a + 1 - dlt, c - a + dlt)] = Q.get((a + 1 - dlt, c - a + dlt), 0) + wa * w
    keys = set(P) | set(Q)
    e = math.exp(epsilon)
    forward = sum(max(0.0, P.get(k, 0) - e * Q.get(k, 0)) for k in keys)
    backward = sum(max(0.0, Q.get(k, 0) - e * P.get(k, 0)) for k in keys)
    return max(forward, backward)


@pytest.mark.parametrize(
    ("eps0", "n", "epsilon"), [(1.0, 30, 0.3), (2.0, 40, 0.8), (0.5, 25, 0.1), (3.0, 12, 2.0)]
)
def test_shuffle_delta_equals_brute_force_divergence(eps0, n, epsilon):
    assert triehh.shuffle_delta(epsilon, eps0, n) == pytest.approx(
        brute_force_delta(epsilon, eps0, n), abs=1e-12
    )


def test_amplification_bound_is_consistent():
    delta = 1e-8
    for eps0 in (0.5, 1.0, 2.0, 4.0):
        previous = eps0 + 1e-9
        for n in (1_000, 10_000, 100_000):
            numerical = triehh.numerical_epsilon(eps0, n, delta)
            closed = triehh.closed_form_epsilon(eps0, n, delta)
            assert numerical <= closed + 1e-12 <= eps0 + 1e-9
            assert numerical < previous  # more users, more amplification
            previous = numerical
            assert triehh.shuffle_delta(numerical, eps0, n) <= delta
    for n in (1_000, 100_000):
        values = [triehh.numerical_epsilon(e, n, delta) for e in (0.5, 1.0, 2.0, 4.0, 8.0)]
        assert all(a < b for a, b in zip(values, values[1:], strict=False))
    # No amplification without others to hide among: one user keeps eps0.
    assert triehh.numerical_epsilon(1.5, 1, delta) == pytest.approx(1.5, abs=1e-6)


def test_epsilon0_for_budget_is_the_largest_that_fits():
    epsilon, delta, n, m = 1.0, 1e-8, 5_000, 3
    eps0 = triehh.epsilon0_for_budget(epsilon, delta, n, m)
    assert triehh.numerical_epsilon(m * eps0, n, delta) <= epsilon
    assert triehh.numerical_epsilon(m * eps0 * 1.01, n, delta) > epsilon
    assert eps0 > epsilon / m  # shuffling buys something at this group size


def test_randomness_comes_from_the_noise_source(seeded_noise):
    other = NoiseSource.seeded_for_tests(12345)
    a = triehh.subset_selection_votes(np.arange(50) % 7, 7, 1.0, seeded_noise)
    b = triehh.subset_selection_votes(np.arange(50) % 7, 7, 1.0, other)
    assert np.array_equal(a, b)  # same seed, same votes: nothing else draws randomness
