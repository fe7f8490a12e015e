"""Statistical and security tests of :mod:`dpngram.core.noise`.

Every statistical assertion is a hypothesis test whose false-failure probability is stated next to
it. Unless said otherwise a single check rejects with probability at most ``ALPHA = 1e-4`` when
the sampler is correct; there are about 70 such checks in this file, so a correct implementation
fails the whole file with probability below ~0.7% (union bound), and any given check can be
re-run to tell a fluke from a bug. Distributional tests draw from ``NoiseSource.secure()``
(never a fixed seed); fixed seeds appear only in the determinism tests.

References: Canonne, Kamath & Steinke (2020), "The Discrete Gaussian for Differential Privacy",
Alg. 1-2 (discrete Laplace sampler); Mironov (2012) for why released values use integer noise on a
grid. The rounded Gaussian's privacy profile is checked in tests/test_rounded_gaussian_privacy.py.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from itertools import combinations

import numpy as np
import pytest
from scipy import special, stats

from dpngram.core.noise import (
    MAX_LATTICE_SIGMA,
    TEST_SEED_ENV,
    TEST_SEED_VALUE,
    InsecureSeedError,
    NoiseSource,
)

pytestmark = pytest.mark.statistical

ALPHA = 1e-4  # false-failure probability of one statistical check
Z_TWO_SIDED = float(stats.norm.isf(ALPHA / 2))  # ~3.89: two-sided normal band at level ALPHA


# ----------------------------------------------------------------------------------------------
# Exact reference distributions (computed here, independently of the samplers)
# ----------------------------------------------------------------------------------------------
def rounded_gaussian_pmf(sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Support and pmf of floor(Z + 1/2), Z ~ N(0, σ²): P(k) = Φ((k + ½)/σ) − Φ((k − ½)/σ), over
    |k| <= 15σ + 10 (the mass left out is below 1e-50). Computed from the upper tail on both sides
    (symmetry) so that tail cells keep their relative precision."""
    half = math.ceil(15 * sigma) + 10
    x = np.arange(-half, half + 1)
    a = np.abs(x).astype(np.float64)
    pmf = special.ndtr(-(a - 0.5) / sigma) - special.ndtr(-(a + 0.5) / sigma)
    pmf[x == 0] = 1.0 - 2.0 * special.ndtr(-0.5 / sigma)
    return x, pmf / pmf.sum()


def discrete_laplace_pmf(scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Support and pmf of P(x) ∝ exp(-|x|/scale), normalised over |x| <= 60·scale + 10 (the mass
    left out is below exp(-60))."""
    half = math.ceil(60 * scale) + 10
    x = np.arange(-half, half + 1)
    w = np.exp(-np.abs(x).astype(np.float64) / scale)
    return x, w / w.sum()


def pooled_bins(pmf: np.ndarray, n: int, min_expected: float = 5.0) -> np.ndarray:
    """Bin index for each support point so that every bin has expected count >= ``min_expected``
    under ``pmf`` with ``n`` draws. Low-probability tails are merged into the neighbouring bins.
    The binning depends only on the reference pmf, never on the data."""
    expected = pmf * n
    bins = np.empty(pmf.size, dtype=np.int64)
    current, acc = 0, 0.0
    for i, e in enumerate(expected):
        bins[i] = current
        acc += e
        if acc >= min_expected:
            current, acc = current + 1, 0.0
    if acc < min_expected and current > 0:  # the right tail did not fill a bin: merge it left
        bins[bins == current] = current - 1
    return bins


def chi_square_gof_pvalue(samples: np.ndarray, support: np.ndarray, pmf: np.ndarray) -> float:
    """Pearson chi-square goodness of fit of integer ``samples`` against ``pmf`` on ``support``
    (pooled tails, degrees of freedom = bins - 1)."""
    n = samples.size
    assert samples.min() >= support[0] and samples.max() <= support[-1], "draw outside the support"
    bins = pooled_bins(pmf, n)
    observed = np.bincount(bins[samples - support[0]], minlength=bins[-1] + 1)
    expected = np.bincount(bins, weights=pmf, minlength=bins[-1] + 1) * n
    return float(stats.chisquare(observed, expected * (n / expected.sum())).pvalue)


def chi_square_homogeneity_pvalue(
    a: np.ndarray, b: np.ndarray, support: np.ndarray, pmf: np.ndarray
) -> float:
    """Two-sample chi-square test that integer samples ``a`` and ``b`` share one distribution.
    Bins are pooled from the reference ``pmf`` (data-independent)."""
    bins = pooled_bins(pmf, min(a.size, b.size))
    nbins = bins[-1] + 1
    table = np.vstack([np.bincount(bins[s - support[0]], minlength=nbins) for s in (a, b)])
    table = table[:, table.sum(axis=0) > 0]
    return float(stats.chi2_contingency(table, correction=False).pvalue)


def assert_mean_variance(samples: np.ndarray, mean: float, var: float, fourth_central: float) -> None:
    """CLT bands, each two-sided at level ALPHA: the sample mean is ≈ N(mean, var/n); the sample
    variance is ≈ N(var, (mu4 - var²)/n)."""
    n = samples.size
    assert abs(samples.mean() - mean) <= Z_TWO_SIDED * math.sqrt(var / n)
    assert abs(samples.var() - var) <= Z_TWO_SIDED * math.sqrt((fourth_central - var * var) / n)


def moments(support: np.ndarray, pmf: np.ndarray) -> tuple[float, float, float]:
    x = support.astype(np.float64)
    mean = float(np.sum(x * pmf))
    var = float(np.sum((x - mean) ** 2 * pmf))
    mu4 = float(np.sum((x - mean) ** 4 * pmf))
    return mean, var, mu4


# ----------------------------------------------------------------------------------------------
# Rounded Gaussian and discrete Laplace (integer noise for released values)
# ----------------------------------------------------------------------------------------------
N_DISCRETE = 200_000


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0, 20.0])
def test_rounded_gaussian_matches_exact_pmf(secure_noise: NoiseSource, sigma: float) -> None:
    support, pmf = rounded_gaussian_pmf(sigma)
    draws = secure_noise.rounded_gaussian(sigma, N_DISCRETE)
    assert draws.dtype == np.int64 and draws.shape == (N_DISCRETE,)
    assert chi_square_gof_pvalue(draws, support, pmf) > ALPHA  # false failure <= 1e-4
    mean, var, mu4 = moments(support, pmf)
    assert mean == pytest.approx(0.0, abs=1e-12)
    # Sheppard: rounding adds ~1/12 to the variance once sigma is a few steps (exact for a
    # Gaussian up to terms of order exp(-2π²σ²)).
    if sigma >= 1:
        assert var == pytest.approx(sigma**2 + 1 / 12, rel=1e-6)
    assert_mean_variance(draws, mean, var, mu4)  # 2 checks, each 1e-4


def test_rounded_gaussian_rounds_half_up_and_refuses_huge_scales(secure_noise: NoiseSource) -> None:
    """floor(Z + 1/2) commutes with integer shifts (m + floor(Z + 1/2) = floor(m + Z + 1/2)), which
    the post-processing argument needs; np.rint (half to even) would not. A scale whose draws'
    52-bit resolution would matter in lattice units is refused."""
    with pytest.raises(ValueError, match="coarser grid"):
        secure_noise.rounded_gaussian(MAX_LATTICE_SIGMA * 2, 3)
    assert secure_noise.rounded_gaussian(MAX_LATTICE_SIGMA, 1000).dtype == np.int64


@pytest.mark.parametrize("scale", [0.3, 1.0, 4.5, 20.0])
def test_discrete_laplace_matches_exact_pmf(secure_noise: NoiseSource, scale: float) -> None:
    support, pmf = discrete_laplace_pmf(scale)
    draws = secure_noise.discrete_laplace(scale, N_DISCRETE)
    assert draws.dtype == np.int64
    assert chi_square_gof_pvalue(draws, support, pmf) > ALPHA  # false failure <= 1e-4
    # closed form of the variance, 2q/(1-q)^2 with q = e^{-1/scale}, cross-checks the pmf sum
    q = math.exp(-1.0 / scale)
    mean, var, mu4 = moments(support, pmf)
    assert var == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-10)
    assert_mean_variance(draws, mean, var, mu4)


def test_chi_square_helper_detects_a_wrong_distribution(secure_noise: NoiseSource) -> None:
    """The goodness-of-fit test has power: rounded Gaussian draws at sigma=3 are rejected against
    the pmf of sigma=3.15 (a 5% error in scale)."""
    support, pmf = rounded_gaussian_pmf(3.15)
    draws = secure_noise.rounded_gaussian(3.0, N_DISCRETE)
    assert chi_square_gof_pvalue(draws, support, pmf) < ALPHA


def test_discrete_samplers_size_zero(secure_noise: NoiseSource) -> None:
    assert secure_noise.rounded_gaussian(2.0, 0).shape == (0,)
    assert secure_noise.discrete_laplace(2.0, 0).shape == (0,)


# ----------------------------------------------------------------------------------------------
# Grid samplers for released values
# ----------------------------------------------------------------------------------------------
N_GRID = 200_000


@pytest.mark.parametrize("sigma, grid", [(1.0, 2.0**-10), (2.5, 0.01), (40.0, 1.0), (0.3, 0.05)])
def test_gaussian_on_grid_lies_on_grid_with_target_variance(
    secure_noise: NoiseSource, sigma: float, grid: float
) -> None:
    noise = secure_noise.gaussian_on_grid(sigma, N_GRID, grid)
    steps = np.rint(noise / grid)
    assert np.array_equal(noise, grid * steps)  # exactly grid * integer, bit for bit
    # Variance target: grid² Var(floor(Z/grid + 1/2)) from the exact pmf, which for sigma/grid >= 1
    # is sigma² + grid²/12 (Sheppard's correction) to within 1e-6 relative.
    support, pmf = rounded_gaussian_pmf(sigma / grid)
    _, var_steps, mu4_steps = moments(support, pmf)
    assert var_steps * grid**2 == pytest.approx(sigma**2 + grid**2 / 12, rel=1e-6)
    assert_mean_variance(noise, 0.0, var_steps * grid**2, mu4_steps * grid**4)


@pytest.mark.parametrize("scale, grid", [(1.0, 2.0**-8), (3.0, 0.01), (0.5, 0.1)])
def test_laplace_on_grid_lies_on_grid_with_target_variance(
    secure_noise: NoiseSource, scale: float, grid: float
) -> None:
    noise = secure_noise.laplace_on_grid(scale, N_GRID, grid)
    steps = np.rint(noise / grid)
    assert np.array_equal(noise, grid * steps)
    # Var = grid² 2q/(1-q)², q = e^{-grid/scale}; tends to the continuous 2·scale² as grid -> 0
    # (relative gap ~ (grid/scale)²/12).
    q = math.exp(-grid / scale)
    var = grid**2 * 2 * q / (1 - q) ** 2
    assert var == pytest.approx(2 * scale**2, rel=(grid / scale) ** 2 / 10)
    support, pmf = discrete_laplace_pmf(scale / grid)
    _, var_steps, mu4_steps = moments(support, pmf)
    assert var_steps * grid**2 == pytest.approx(var, rel=1e-9)
    assert_mean_variance(noise, 0.0, var, mu4_steps * grid**4)


def test_dyadic_grid_addition_is_exact(secure_noise: NoiseSource) -> None:
    """The documented usage for released values (docs/noise.md): with a power-of-two grid, a value
    snapped to the grid plus gaussian_on_grid noise equals grid * (m + k) bit for bit, so the
    floating-point output depends only on the noisy lattice point, not on how it splits into
    value and noise. (With grid = 0.01 this fails for about a quarter of the sums.)"""
    grid = 2.0**-7
    k = np.rint(secure_noise.gaussian_on_grid(3.0, 50_000, grid) / grid)
    for m in (0, 1, 3, 17, 123_456):
        released = grid * m + grid * k
        assert np.array_equal(released, grid * (m + k))


# ----------------------------------------------------------------------------------------------
# Continuous Gaussian (threshold decisions only)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sigma", [0.7, 12.0])
def test_gaussian_matches_normal_distribution(secure_noise: NoiseSource, sigma: float) -> None:
    draws = secure_noise.gaussian(sigma, 100_000)
    assert draws.shape == (100_000,)
    assert stats.kstest(draws, stats.norm(0, sigma).cdf).pvalue > ALPHA  # false failure 1e-4


def test_gaussian_shapes(secure_noise: NoiseSource) -> None:
    assert secure_noise.gaussian(1.0, (3, 4)).shape == (3, 4)
    assert np.ndim(secure_noise.gaussian(1.0)) == 0


@pytest.mark.parametrize(
    "value, sigma, threshold",
    [(0.0, 1.0, 1.0), (5.0, 2.0, 3.0), (1.0, 0.7, 3.0), (10.0, 4.0, 20.0)],
)
def test_above_threshold_probability(
    secure_noise: NoiseSource, value: float, sigma: float, threshold: float
) -> None:
    """P(value + Z > rho) = 1 - Phi((rho - value)/sigma); the number of passes among n keys is
    Binomial(n, p): exact two-sided binomial test at level 1e-4."""
    n = 200_000
    passed = secure_noise.above_threshold(np.full(n, value), sigma, threshold)
    assert passed.dtype == bool and passed.shape == (n,)
    p = float(stats.norm.sf((threshold - value) / sigma))
    assert stats.binomtest(int(passed.sum()), n, p).pvalue > ALPHA


def test_above_threshold_per_key_probabilities(secure_noise: NoiseSource) -> None:
    """Mixed values in one call: each key passes with its own probability (binomial test per
    group at 1e-4)."""
    n = 100_000
    values = np.concatenate([np.zeros(n), np.full(n, 4.0)])
    passed = secure_noise.above_threshold(values, 2.0, 3.0)
    for group, value in ((passed[:n], 0.0), (passed[n:], 4.0)):
        p = float(stats.norm.sf((3.0 - value) / 2.0))
        assert stats.binomtest(int(group.sum()), n, p).pvalue > ALPHA


def test_above_threshold_noise_is_independent_across_keys(secure_noise: NoiseSource) -> None:
    """With value = threshold every key passes with probability 1/2. If neighbouring keys (or the
    two halves of the array) shared noise, both members of a pair would pass with probability
    1/2 instead of 1/4. Binomial tests at 1e-4 each."""
    n = 100_000
    passed = secure_noise.above_threshold(np.zeros(2 * n), 1.5, 0.0)
    adjacent = passed.reshape(n, 2)
    assert stats.binomtest(int(np.sum(adjacent[:, 0] & adjacent[:, 1])), n, 0.25).pvalue > ALPHA
    assert stats.binomtest(int(np.sum(passed[:n] & passed[n:])), n, 0.25).pvalue > ALPHA


# ----------------------------------------------------------------------------------------------
# Binomial, integers, uniform, sampling without replacement
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, p", [(50, 0.3), (1000, 0.002), (7, 0.9)])
def test_binomial_distribution(secure_noise: NoiseSource, n: int, p: float) -> None:
    reps = 20_000
    draws = np.array([secure_noise.binomial(n, p) for _ in range(reps)], dtype=np.int64)
    assert draws.min() >= 0 and draws.max() <= n
    mean, q = n * p, 1 - p
    var = n * p * q
    mu4 = n * p * q * (1 + 3 * (n - 2) * p * q)  # fourth central moment of Binomial(n, p)
    assert_mean_variance(draws, mean, var, mu4)  # 2 checks at 1e-4
    support = np.arange(0, n + 1)
    assert chi_square_gof_pvalue(draws, support, stats.binom.pmf(support, n, p)) > ALPHA


def test_binomial_edge_cases(secure_noise: NoiseSource) -> None:
    assert secure_noise.binomial(0, 0.5) == 0
    assert secure_noise.binomial(0, 0.0) == 0
    assert secure_noise.binomial(123, 0.0) == 0
    assert secure_noise.binomial(123, 1.0) == 123
    assert isinstance(secure_noise.binomial(10, 0.5), int)


@pytest.mark.parametrize("n, p", [(-1, 0.5), (10, -0.1), (10, 1.1), (10, float("nan"))])
def test_binomial_invalid_arguments(secure_noise: NoiseSource, n: int, p: float) -> None:
    with pytest.raises(ValueError, match="binomial needs"):
        secure_noise.binomial(n, p)


def test_integers_uniform(secure_noise: NoiseSource) -> None:
    draws = secure_noise.integers(-3, 17, 100_000)
    assert draws.dtype == np.int64 and draws.min() >= -3 and draws.max() <= 16
    counts = np.bincount(draws + 3, minlength=20)
    assert counts.size == 20
    assert stats.chisquare(counts).pvalue > ALPHA  # uniform over 20 values, false failure 1e-4


def test_uniform_floats(secure_noise: NoiseSource) -> None:
    draws = secure_noise.uniform(100_000)
    assert draws.min() >= 0.0 and draws.max() < 1.0
    assert stats.kstest(draws, "uniform").pvalue > ALPHA


def test_salt_is_62_bit(secure_noise: NoiseSource) -> None:
    salts = [secure_noise.salt() for _ in range(200)]
    assert all(isinstance(s, int) and 0 <= s < 2**62 for s in salts)
    assert len(set(salts)) == 200  # a collision among 200 62-bit values has probability < 1e-14
    # the top bit is used: P(all 200 below 2^61) = 2^-200
    assert max(salts) >= 2**61


def inclusion_statistic(counts: np.ndarray, reps: int, k: int, population: int) -> float:
    """Chi-square statistic for inclusion counts of uniform k-subsets.

    Over ``reps`` independent uniform k-subsets of N items each count c_i has mean R·π (π = k/N),
    variance R·π(1-π) and covariance -R·π(1-π)/(N-1) (sampling without replacement), i.e.
    Cov = R·π(1-π)·N/(N-1)·(I - J/N). Hence, by the CLT,
    X = Σ (c_i - Rπ)² · (N-1) / (R·π(1-π)·N)  ~  χ²(N-1).
    The approximation needs a large expected count Rπ per item (>= 50 in every case below: the
    excess kurtosis of a cell then inflates Var(X) by under 1%)."""
    pi = k / population
    return float(np.sum((counts - reps * pi) ** 2) * (population - 1) / (reps * pi * (1 - pi) * population))


@pytest.mark.parametrize(
    "population, k, reps",
    [(40, 12, 5_000), (200, 150, 2_000), (2_000, 100, 2_000), (20_000, 500, 2_000)],
    ids=["dense", "dense-large-k", "sparse", "very-sparse"],
)
def test_sample_without_replacement_inclusion(
    secure_noise: NoiseSource, population: int, k: int, reps: int
) -> None:
    counts = np.zeros(population, dtype=np.int64)
    for _ in range(reps):
        chosen = secure_noise.sample_without_replacement(population, k)
        assert chosen.shape == (k,) and chosen.dtype == np.int64
        assert chosen.min() >= 0 and chosen.max() < population
        assert np.unique(chosen).size == k
        counts[chosen] += 1
    statistic = inclusion_statistic(counts, reps, k, population)
    assert stats.chi2.sf(statistic, population - 1) > ALPHA  # false failure ~1e-4 (CLT)


@pytest.mark.parametrize("population, k", [(6, 2), (9, 2)], ids=["dense", "sparse"])
def test_sample_without_replacement_uniform_over_subsets(
    secure_noise: NoiseSource, population: int, k: int
) -> None:
    """Stronger than inclusion frequencies: every one of the C(N, k) subsets is equally likely
    (chi-square over subsets at 1e-4). (6, 2) takes the permutation path, (9, 2) the
    draw-and-deduplicate path (4k < N)."""
    index = {subset: i for i, subset in enumerate(combinations(range(population), k))}
    reps = 30_000
    counts = np.zeros(len(index), dtype=np.int64)
    for _ in range(reps):
        counts[index[tuple(sorted(secure_noise.sample_without_replacement(population, k).tolist()))]] += 1
    assert stats.chisquare(counts).pvalue > ALPHA


def test_sample_without_replacement_edges(secure_noise: NoiseSource) -> None:
    assert secure_noise.sample_without_replacement(10, 0).shape == (0,)
    assert secure_noise.sample_without_replacement(0, 0).shape == (0,)
    everything = secure_noise.sample_without_replacement(25, 25)
    assert np.array_equal(np.sort(everything), np.arange(25))
    for population, k in [(5, 6), (5, -1), (-1, 0)]:
        with pytest.raises(ValueError, match="distinct items"):
            secure_noise.sample_without_replacement(population, k)


# ----------------------------------------------------------------------------------------------
# Cross-check against OpenDP's exact samplers
# ----------------------------------------------------------------------------------------------
N_OPENDP = 20_000


@pytest.fixture(scope="module")
def opendp_prelude():
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    return dp


def test_discrete_laplace_agrees_with_opendp(opendp_prelude, secure_noise: NoiseSource) -> None:
    dp = opendp_prelude
    scale = 2.0
    meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=scale)
    theirs = np.asarray(meas([0] * N_OPENDP), dtype=np.int64)
    ours = secure_noise.discrete_laplace(scale, N_OPENDP)
    support, pmf = discrete_laplace_pmf(scale)
    assert chi_square_homogeneity_pvalue(ours, theirs, support, pmf) > ALPHA


def test_opendp_comparison_has_power(opendp_prelude, secure_noise: NoiseSource) -> None:
    """The homogeneity test rejects a 15% scale mismatch at this sample size."""
    dp = opendp_prelude
    meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=2.0)
    theirs = np.asarray(meas([0] * N_OPENDP), dtype=np.int64)
    ours = secure_noise.discrete_laplace(2.3, N_OPENDP)
    support, pmf = discrete_laplace_pmf(2.0)
    assert chi_square_homogeneity_pvalue(ours, theirs, support, pmf) < ALPHA


# ----------------------------------------------------------------------------------------------
# Security properties of the source itself
# ----------------------------------------------------------------------------------------------
def test_seeded_source_refused_without_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TEST_SEED_ENV, raising=False)
    with pytest.raises(InsecureSeedError, match="only available inside the test suite"):
        NoiseSource.seeded_for_tests(1)


def test_seeded_source_refused_with_wrong_env_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_SEED_ENV, "1")
    with pytest.raises(InsecureSeedError):
        NoiseSource.seeded_for_tests(1)


def test_seeded_source_refused_outside_pytest_even_with_env_var() -> None:
    """A process that sets the variable but is not the test harness still gets secure noise only."""
    code = (
        "from dpngram.core.noise import NoiseSource, InsecureSeedError\n"
        "try:\n    NoiseSource.seeded_for_tests(1)\nexcept InsecureSeedError:\n    print('refused')\n"
    )
    env = {**os.environ, TEST_SEED_ENV: TEST_SEED_VALUE}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused"


def test_secure_sources_give_different_streams() -> None:
    a, b = NoiseSource.secure(), NoiseSource.secure()
    assert a.is_secure and b.is_secure and a.mode == "secure"
    # 64 uniform doubles equal by chance: probability ~2^-3000
    assert not np.array_equal(a.uniform(64), b.uniform(64))
    assert not np.array_equal(a.rounded_gaussian(1000.0, 64), b.rounded_gaussian(1000.0, 64))


def _stream(source: NoiseSource) -> list[np.ndarray]:
    return [
        source.gaussian(1.0, 5),
        source.rounded_gaussian(3.0, 50),
        source.discrete_laplace(2.0, 50),
        source.gaussian_on_grid(1.0, 5, 0.01),
        source.laplace_on_grid(1.0, 5, 0.01),
        np.array([source.binomial(100, 0.3)]),
        source.integers(0, 1000, 5),
        source.uniform(5),
        source.sample_without_replacement(1000, 20),
        source.sample_without_replacement(30, 20),
        np.array([source.salt()]),
        source.above_threshold(np.arange(5.0), 1.0, 2.0),
    ]


def test_seeded_sources_are_deterministic(seeded_noise: NoiseSource) -> None:
    first = _stream(seeded_noise)
    again = _stream(NoiseSource.seeded_for_tests(12345))
    other = _stream(NoiseSource.seeded_for_tests(54321))
    assert all(np.array_equal(x, y) for x, y in zip(first, again, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(first, other, strict=True))
    assert not seeded_noise.is_secure and "NOT PRIVATE" in seeded_noise.mode


BAD_SCALES = [0, 0.0, -1.0, float("nan"), float("inf"), -float("inf"), True, "1.0", None]


@pytest.mark.parametrize("bad", BAD_SCALES, ids=repr)
def test_invalid_scales_raise(secure_noise: NoiseSource, bad: object) -> None:
    calls = [
        lambda: secure_noise.gaussian(bad, 3),
        lambda: secure_noise.above_threshold(np.zeros(3), bad, 1.0),
        lambda: secure_noise.rounded_gaussian(bad, 3),
        lambda: secure_noise.discrete_laplace(bad, 3),
        lambda: secure_noise.gaussian_on_grid(bad, 3, 0.1),
        lambda: secure_noise.gaussian_on_grid(1.0, 3, bad),
        lambda: secure_noise.laplace_on_grid(bad, 3, 0.1),
        lambda: secure_noise.laplace_on_grid(1.0, 3, bad),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="must be a finite number > 0"):
            call()


def test_numpy_scalar_scales_accepted(secure_noise: NoiseSource) -> None:
    assert secure_noise.rounded_gaussian(np.int64(3), 4).shape == (4,)
    assert secure_noise.discrete_laplace(np.float32(2.0), 4).shape == (4,)
    assert secure_noise.gaussian_on_grid(np.float64(1.0), 4, np.float64(0.5)).shape == (4,)
