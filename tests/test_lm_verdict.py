"""The private-domain verdict (``dpngram.mechanisms.lm_verdict``: ``verdict_user_vector``,
``verdict_sensitivity``, ``release_verdict``; docs/lm_privacy.md, "The private-domain verdict").

Notation: B_v = VERDICT_LOSS_CLIP = 12, C_v = VERDICT_DIFF_CLIP = 2, κ = B_v, Δ = √(3B_v² + C_v²),
σ and g the Gaussian noise scale and power-of-two grid of the release, α = 1 − 0.95,
z = Φ⁻¹(1 − α/4), pad = zσ + g, N the number of verdict users.

1. Sensitivity. Each user's vector (L_rel, L_pub, D, κ), checked against an independent
   computation, has l2 norm ≤ Δ for random and extreme log-probabilities (huge, zero, released far
   better / worse than public-only); the worst case (both losses ≥ B_v, difference ±C_v) reaches Δ,
   so the bound is tight; adding one user to a random dataset moves the summed vector by ≤ Δ, and
   the release is calibrated to at least Δ. Non-finite or empty log-probability arrays (which the
   pipeline cannot produce) still give a finite vector within the bound.
2. Privacy on neighbouring datasets. D (random users) and D' = D + the worst-case user; the noisy
   4-vector of every ``release_verdict`` call is captured (everything else in the result is
   post-processing of it). A Gaussian mechanism's privacy loss depends only on the projection of
   the output on the (snapped) neighbour gap, and its optimal distinguishing events are half-spaces
   on that projection, so the test checks P[S | D] ≤ e^ε P[S | D'] + δ (and the reverse) for
   S = {y > t}, {y < t} over a grid of t, with one-sided Clopper-Pearson bounds, i.e. a lower
   confidence bound ε̂ on the privacy loss at δ: ε̂ ≤ ε. False failure ≤ FALSE_FAILURE (4·|t|
   comparisons, 2 bounds each, each at FALSE_FAILURE/(8|t|)). ε = 1, δ = 1e-2, so probabilities of
   order δ are measurable with DP_DRAWS draws (as in tests/test_lm_counts.py). Power: the same
   check on the release with ``verdict_sensitivity`` halved (σ' ≈ σ/2; true δ(ε = 1) for the gap
   Δ/σ' ≈ 1.06 is Φ(Δ/2σ' − εσ'/Δ) − e^ε Φ(−Δ/2σ' − εσ'/Δ) ≈ 0.15 ≫ δ + the binomial slack
   (≈ 0.05 at 15,000 draws and these levels)) must flag it.
3. Coverage. The sum coordinate is g·round(S/g) + g·round(Z/g), within |Z| + g of S; so the true
   sum lies in [T − pad, T + pad] and the true count in [c − pad/κ, c + pad/κ] each with
   probability ≥ 1 − α/2 (P(|Z| > zσ) = α/2), both with probability ≥ 1 − α; S/N is monotone in
   each, so the corner box then contains the true (clipped) mean, and the whole range is returned
   when the count's lower end is ≤ 0. Hence each interval covers with probability ≥ 0.95: a
   one-sided binomial test (Clopper-Pearson upper bound at FALSE_FAILURE / #checks) must not put
   the coverage below 0.95. Informative at N = 600, ε = 1.2, δ = 1e-7: a corner differs from
   T/c by (s·pad·c − r·p·T)/(c(c + r·p)) with p = pad/κ, so the half-width is at most
   (pad + p·|T|/c_min)/(c_min − p) with c_min = N − (6σ + g)/κ and |T| ≤ |S_D| + 6σ + g (a 6σ
   envelope, violated with probability 2e-9 per coordinate and run, 1.6e-5 over the test): about
   0.37 nats, vs the leading term pad/N ≈ 0.31.
4. Verdict. With N = 5,000 users whose released loss is 0.5 nats lower, the log-ratio interval's
   upper end is ≥ 0 only if the difference coordinate's noise exceeds 0.5·N − pad ≈ 28σ: every
   repetition says 'released model better' (and symmetrically 'public-only model better').
   With equal losses (every D_u = 0, so S_D = 0 is on the grid) a verdict other than 'cannot tell'
   needs g·round(Z/g) > pad or < −pad, i.e. |Z| > zσ + g/2: probability ≤ α/2, so 'cannot tell'
   in ≥ 97.5% (binomial test). With N ∈ {0, 1} at ε = 0.1 (σ ≈ 864) the count is usable only if
   κN + g·round(Z/g) > pad, i.e. Z > zσ − κN + g/2: probability ≤ Φ̄(z − κN/σ) ≈ 0.013; otherwise
   the perplexities and the log-ratio are None, the intervals the whole clipped range, and the
   verdict 'cannot tell' (deterministically).

Every statistical check fails a correct mechanism with probability ≤ FALSE_FAILURE; the noise is
seeded, so each run is reproducible. ``calibrate`` (a pure function of (ε, δ, Δ, size)) is memoised
for the module so that tens of thousands of releases take seconds.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy import stats

from dpngram.core.noise import NoiseSource, simulation_rng
from dpngram.mechanisms import bayes, lm_verdict
from dpngram.mechanisms.lm_verdict import (
    VERDICT_DIFF_CLIP,
    VERDICT_LEVEL,
    VERDICT_LOSS_CLIP,
    VerdictSums,
    release_verdict,
    verdict_sensitivity,
    verdict_user_vector,
)

FALSE_FAILURE = 1e-4
B_V, C_V, KAPPA = VERDICT_LOSS_CLIP, VERDICT_DIFF_CLIP, VERDICT_LOSS_CLIP
ALPHA = 1.0 - VERDICT_LEVEL
Z = float(stats.norm.isf(ALPHA / 4.0))


@pytest.fixture(autouse=True)
def memoised_calibration(monkeypatch):
    """``noisy_release`` imports ``calibrate`` from dpngram.mechanisms.bayes at call time; the
    memoised wrapper returns exactly what the real function returns for the same arguments."""
    monkeypatch.setattr(bayes, "calibrate", functools.lru_cache(maxsize=None)(bayes.calibrate))


# ----------------------------------------------------------------------------------------------
# Helpers: synthetic users, an independent computation of their clipped means, binomial bounds
# ----------------------------------------------------------------------------------------------
Users = list[tuple[np.ndarray, np.ndarray]]  # per user: (released log-probs, public log-probs), nats


def synthetic_users(seed: int, n: int, *, released: float, public: float, extremes: bool = True) -> Users:
    """n users with 1-60 tokens each; per-token log-losses around ``released`` / ``public`` nats
    (the released model better by public − released on average). With ``extremes``, about one user
    in ten has losses beyond B_v, zero loss, or a difference beyond ±C_v, so clipping matters."""
    rng = simulation_rng(seed)
    users: Users = []
    for i in range(n):
        k = int(rng.integers(1, 61))
        base = rng.gamma(8.0, public / 8.0, k)
        pub = base
        rel = np.maximum(base + (released - public) + rng.normal(0.0, 0.7, k), 0.0)
        if extremes and i % 10 == 3:
            kind = (i // 10) % 5
            if kind == 0:  # both beyond the loss clip
                rel, pub = rel + 25.0, pub + 30.0
            elif kind == 1:  # perfect prediction
                rel, pub = np.zeros(k), np.zeros(k)
            elif kind == 2:  # released far better
                rel, pub = rel * 0.1, pub + 8.0
            elif kind == 3:  # released far worse
                rel, pub = rel + 9.0, pub * 0.5
            else:  # released loss beyond the clip, public-only inside it
                rel, pub = rel + 40.0, pub
        users.append((-rel, -pub))
    return users


def true_means(users: Users) -> tuple[float, float, float, int]:
    """(mean clipped released loss, mean clipped public-only loss, mean clipped difference, N)
    computed independently of the module (math.fsum, min/max)."""
    rel, pub, diff = [], [], []
    for r, p in users:
        lr, lp = -math.fsum(r) / len(r), -math.fsum(p) / len(p)
        rel.append(min(max(lr, 0.0), B_V))
        pub.append(min(max(lp, 0.0), B_V))
        diff.append(min(max(lr - lp, -C_V), C_V))
    n = len(users)
    return math.fsum(rel) / n, math.fsum(pub) / n, math.fsum(diff) / n, n


def vector_of(sums: VerdictSums) -> np.ndarray:
    """The summed 4-vector ``release_verdict`` adds noise to."""
    return np.array([sums.released_loss, sums.public_loss, sums.difference, KAPPA * sums.users])


def summed(users: Users) -> VerdictSums:
    total = np.zeros(4)
    for r, p in users:
        total += verdict_user_vector(r, p)
    return VerdictSums(float(total[0]), float(total[1]), float(total[2]), len(users))


def cp_lower(k: int, n: int, beta: float) -> float:
    """One-sided Clopper-Pearson lower bound (fails with probability ≤ beta)."""
    return 0.0 if k == 0 else float(stats.beta.ppf(beta, k, n - k + 1))


def cp_upper(k: int, n: int, beta: float) -> float:
    return 1.0 if k == n else float(stats.beta.isf(beta, k + 1, n - k))


def releases(sums: VerdictSums, draws: int, *, epsilon: float, delta: float, seed: int) -> list[dict]:
    noise = NoiseSource.seeded_for_tests(seed)
    return [release_verdict(sums, epsilon=epsilon, delta=delta, noise=noise) for _ in range(draws)]


# ----------------------------------------------------------------------------------------------
# 1. Sensitivity
# ----------------------------------------------------------------------------------------------
WORST_USER = (np.full(5, -20.0), np.full(5, -18.0))  # L_rel = 20, L_pub = 18: (B_v, B_v, C_v, κ)


def extreme_users() -> Users:
    k = 7
    cases = [
        (np.full(k, -1e6), np.full(k, -1e6)),  # huge losses (finite)
        (np.full(k, -690.8), np.full(k, -1.0)),  # released at its 1e-300 floor, public fine
        (np.full(k, -1.0), np.full(k, -1e4)),  # public-only hopeless
        (np.zeros(k), np.zeros(k)),  # zero loss
        (np.zeros(1), np.full(1, -12.0)),  # released far better, one token
        (np.full(3, -12.0), np.zeros(3)),  # released far worse
        (np.array([0.0, -1e5]), np.array([-3.0])),  # unequal lengths, one huge token
        (np.full(4, -13.0), np.full(4, -11.0)),  # rel clipped, pub not, difference exactly C_v
        WORST_USER,
        (WORST_USER[1], WORST_USER[0]),
    ]
    rng = simulation_rng(11)
    for _ in range(400):  # random magnitudes over 8 orders, random lengths
        k = int(rng.integers(1, 50))
        scale_r, scale_p = 10.0 ** rng.uniform(-3, 5, 2)
        cases.append((-rng.exponential(scale_r, k), -rng.exponential(scale_p, int(rng.integers(1, 50)))))
    return cases


def test_each_user_vector_is_the_clipped_means_and_bounded_by_the_sensitivity():
    bound = verdict_sensitivity()
    assert bound == pytest.approx(math.sqrt(3 * B_V**2 + C_V**2), rel=1e-15)
    for r, p in extreme_users():
        v = verdict_user_vector(r, p)
        rel, pub, diff, _ = true_means([(r, p)])
        assert v == pytest.approx([rel, pub, diff, KAPPA], rel=1e-9, abs=1e-9)
        assert 0.0 <= v[0] <= B_V and 0.0 <= v[1] <= B_V and -C_V <= v[2] <= C_V
        assert np.linalg.norm(v) <= bound * (1 + 1e-12)
    # the bound is reached: it is the sensitivity, not a loose upper bound
    assert np.linalg.norm(verdict_user_vector(*WORST_USER)) == pytest.approx(bound, rel=1e-12)
    assert verdict_user_vector(*WORST_USER) == pytest.approx([B_V, B_V, C_V, KAPPA])


def test_adding_one_user_moves_the_sums_by_at_most_the_sensitivity_and_the_release_uses_it():
    bound = verdict_sensitivity()
    base_users = synthetic_users(5, 200, released=4.0, public=4.6)
    base = summed(base_users)
    base_vec = vector_of(base)
    for user in extreme_users():
        after = summed([*base_users, user])
        assert np.linalg.norm(vector_of(after) - base_vec) <= bound * (1 + 1e-9)
        assert after.users == base.users + 1
    out = release_verdict(base, epsilon=1.2, delta=1e-7, noise=NoiseSource.seeded_for_tests(1))
    assert out["sensitivity"] >= bound
    assert out["sensitivity"] <= bound + out["grid"] * 2 + 1e-12  # snapping 4 coordinates: g·√4


def test_non_finite_log_probs_still_give_a_bounded_vector():
    for r, p in [
        (np.array([-np.inf, -1.0]), np.array([-np.inf])),
        (np.full(2, -1e308), np.full(2, -1e308)),  # the mean's sum overflows to −inf
        (np.array([]), np.array([-3.0])),  # no event
    ]:
        v = verdict_user_vector(r, p)
        assert np.all(np.isfinite(v)) and np.linalg.norm(v) <= verdict_sensitivity()


# ----------------------------------------------------------------------------------------------
# 2. Privacy on neighbouring datasets, with a power check
# ----------------------------------------------------------------------------------------------
DP_DRAWS = 15_000


def captured_projections(
    monkeypatch, sums: VerdictSums, direction: np.ndarray, *, epsilon: float, delta: float, seed: int
) -> tuple[np.ndarray, float]:
    """⟨noisy vector, direction⟩ of DP_DRAWS calls of ``release_verdict`` (the noisy vector is
    captured from ``noisy_release`` as release_verdict calls it), and the σ it used."""
    captured: list[np.ndarray] = []
    real = lm_verdict.noisy_release

    def spy(vector, **kwargs):
        noisy, calibration = real(vector, **kwargs)
        captured.append(noisy)
        return noisy, calibration

    with monkeypatch.context() as m:
        m.setattr(lm_verdict, "noisy_release", spy)
        out = releases(sums, DP_DRAWS, epsilon=epsilon, delta=delta, seed=seed)
    assert len(captured) == DP_DRAWS
    return np.stack(captured) @ direction, out[-1]["sigma"]


def empirical_epsilon(a: np.ndarray, b: np.ndarray, thresholds: np.ndarray, delta: float) -> float:
    """Lower confidence bound on the privacy loss at δ: the max over S ∈ {y > t}, {y < t} and both
    orders of log((CP_lower(P[A ∈ S]) − δ) / CP_upper(P[B ∈ S])). ε̂ > ε means some event violates
    P[A ∈ S] ≤ e^ε P[B ∈ S] + δ with confidence; for an (ε, δ)-DP mechanism that happens with
    probability ≤ FALSE_FAILURE (union bound over 8·|t| one-sided bounds)."""
    beta = FALSE_FAILURE / (8 * len(thresholds))
    worst = -math.inf
    for t in thresholds:
        for in_set in (lambda y, t=t: y > t, lambda y, t=t: y < t):
            for x, y in ((a, b), (b, a)):
                lo = cp_lower(int(in_set(x).sum()), x.size, beta) - delta
                if lo > 0:
                    worst = max(worst, math.log(lo / cp_upper(int(in_set(y).sum()), y.size, beta)))
    return worst


@pytest.mark.statistical
def test_the_release_is_dp_on_worst_case_neighbours_and_the_test_has_power(monkeypatch):
    epsilon, delta = 1.0, 1e-2
    d_users = synthetic_users(21, 40, released=4.0, public=4.5)
    d, d_prime = summed(d_users), summed([*d_users, WORST_USER])
    vec, vec_prime = vector_of(d), vector_of(d_prime)
    assert np.linalg.norm(vec_prime - vec) == pytest.approx(verdict_sensitivity(), rel=1e-9)

    grid = release_verdict(d, epsilon=epsilon, delta=delta, noise=NoiseSource.seeded_for_tests(0))["grid"]
    gap = grid * (np.floor(vec_prime / grid + 0.5) - np.floor(vec / grid + 0.5))  # what is released
    u = gap / np.linalg.norm(gap)
    centre = float(grid * np.floor(vec / grid + 0.5) @ u)

    a, sigma = captured_projections(monkeypatch, d, u, epsilon=epsilon, delta=delta, seed=101)
    b, _ = captured_projections(monkeypatch, d_prime, u, epsilon=epsilon, delta=delta, seed=202)
    thresholds = centre + sigma * np.arange(-2.0, 4.01, 0.25)
    eps_hat = empirical_epsilon(a, b, thresholds, delta)
    assert eps_hat <= epsilon, f"empirical ε lower bound {eps_hat:.3f} > claimed {epsilon}"

    # the same check on a release whose noise is calibrated to half the sensitivity
    monkeypatch.setattr(lm_verdict, "verdict_sensitivity", lambda: 0.5 * math.sqrt(3 * B_V**2 + C_V**2))
    a_half, sigma_half = captured_projections(monkeypatch, d, u, epsilon=epsilon, delta=delta, seed=303)
    b_half, _ = captured_projections(monkeypatch, d_prime, u, epsilon=epsilon, delta=delta, seed=404)
    assert sigma_half < 0.55 * sigma
    eps_half = empirical_epsilon(a_half, b_half, thresholds, delta)
    assert eps_half > epsilon, f"undercalibrated release not detected: ε̂ = {eps_half:.3f}"


# ----------------------------------------------------------------------------------------------
# 3. Coverage of the intervals, and their width at a realistic size
# ----------------------------------------------------------------------------------------------
COVERAGE_DRAWS = 4_000
COVERAGE_CASES = [  # (users, ε, δ): realistic, small (the count's noise matters), large ε
    (600, 1.2, 1e-7),
    (40, 1.2, 1e-7),
    (25, 4.0, 1e-6),
]


def covered(out: dict, truth: tuple[float, float, float, int]) -> tuple[bool, bool, bool]:
    """Whether each interval contains the truth (perplexities compared in log space, 1e-12 slack
    for exp/log rounding)."""
    rel, pub, diff, _ = truth
    iv = out["interval"]
    tol = 1e-12

    def inside(x: float, bounds: list[float]) -> bool:
        return bounds[0] - tol <= x <= bounds[1] + tol

    return (
        inside(rel, [math.log(v) for v in iv["released_perplexity"]]),
        inside(pub, [math.log(v) for v in iv["public_only_perplexity"]]),
        inside(diff, iv["log_ratio"]),
    )


@pytest.mark.statistical
@pytest.mark.parametrize("n_users, epsilon, delta", COVERAGE_CASES)
def test_each_interval_covers_the_clipped_truth_at_its_level(n_users, epsilon, delta):
    users = synthetic_users(31 + n_users, n_users, released=4.2, public=4.5)
    truth = true_means(users)
    outs = releases(summed(users), COVERAGE_DRAWS, epsilon=epsilon, delta=delta, seed=7 + n_users)
    assert all(out["interval"]["level"] == VERDICT_LEVEL for out in outs)
    hits = np.array([covered(out, truth) for out in outs]).sum(axis=0)
    beta = FALSE_FAILURE / (3 * len(COVERAGE_CASES))
    for name, k in zip(("released_perplexity", "public_only_perplexity", "log_ratio"), hits, strict=True):
        upper = cp_upper(int(k), COVERAGE_DRAWS, beta)
        assert upper >= VERDICT_LEVEL, f"{name}: coverage {k}/{COVERAGE_DRAWS} (upper bound {upper:.4f})"


@pytest.mark.statistical
def test_at_600_users_the_log_ratio_interval_is_as_narrow_as_the_noise_allows():
    n_users, epsilon, delta = 600, 1.2, 1e-7
    users = synthetic_users(631, n_users, released=4.2, public=4.5)
    sums = summed(users)
    outs = releases(sums, COVERAGE_DRAWS, epsilon=epsilon, delta=delta, seed=17)
    sigma, grid = outs[0]["sigma"], outs[0]["grid"]
    pad = Z * sigma + grid
    p = pad / KAPPA
    c_min = n_users - (6 * sigma + grid) / KAPPA
    t_max = abs(sums.difference) + 6 * sigma + grid
    predicted = (pad + p * t_max / c_min) / (c_min - p)
    assert pad / n_users < predicted < 0.4  # informative: resolves log-ratios of ±0.4 nats
    half = np.array([(o["interval"]["log_ratio"][1] - o["interval"]["log_ratio"][0]) / 2 for o in outs])
    assert half.max() <= predicted, f"max half-width {half.max():.4f} > {predicted:.4f}"
    # typical width: the leading term pad/N, up to the count's relative noise (≈ p/N)
    assert np.median(half) == pytest.approx(pad / n_users, rel=0.1)


# ----------------------------------------------------------------------------------------------
# 4. The verdict
# ----------------------------------------------------------------------------------------------
VERDICT_DRAWS = 2_000


@pytest.mark.statistical
@pytest.mark.parametrize(
    "released, public, expected",
    [(4.0, 4.5, "released model better"), (4.5, 4.0, "public-only model better")],
)
def test_a_clear_difference_with_many_users_gives_the_right_verdict(released, public, expected):
    users = synthetic_users(41, 5_000, released=released, public=public, extremes=False)
    rel, pub, diff, n = true_means(users)
    assert abs(diff) > 0.4
    outs = releases(summed(users), VERDICT_DRAWS, epsilon=1.2, delta=1e-7, seed=43)
    pad = Z * outs[0]["sigma"] + outs[0]["grid"]
    assert abs(diff) * n - pad > 25 * outs[0]["sigma"]  # a wrong verdict needs a ≥ 25σ draw
    assert [o["verdict"] for o in outs] == [expected] * VERDICT_DRAWS
    # the estimate T/c: within (6σ + g)(1 + |D̄|/κ) / (N − (6σ + g)/κ) of D̄ (6σ envelope, ≈ 0.1 nats)
    env = 6 * outs[0]["sigma"] + outs[0]["grid"]
    assert all(abs(o["log_ratio"] - diff) <= env * (1 + abs(diff) / KAPPA) / (n - env / KAPPA) for o in outs)
    # and unbiased to first order: the mean of R estimates has sd ≈ σ/(N√R) ≈ 4e-4
    assert np.mean([o["log_ratio"] for o in outs]) == pytest.approx(diff, abs=0.002)


@pytest.mark.statistical
def test_equal_losses_say_cannot_tell_at_least_at_the_derived_rate():
    rng = simulation_rng(51)
    users = [(lp, lp.copy()) for lp in (-rng.gamma(8.0, 0.5, int(rng.integers(1, 40))) for _ in range(600))]
    sums = summed(users)
    assert sums.difference == 0.0
    outs = releases(sums, COVERAGE_DRAWS, epsilon=1.2, delta=1e-7, seed=53)
    cannot = sum(o["verdict"] == "cannot tell" for o in outs)
    rate = 1.0 - ALPHA / 2.0  # P(|Z| ≤ zσ + g/2) ≥ 1 − α/2 = 0.975
    upper = cp_upper(cannot, COVERAGE_DRAWS, FALSE_FAILURE)
    assert upper >= rate, f"'cannot tell' in {cannot}/{COVERAGE_DRAWS} (upper bound {upper:.4f} < {rate})"


@pytest.mark.statistical
@pytest.mark.parametrize("n_users", [0, 1])
def test_too_few_users_give_no_estimate_and_cannot_tell(n_users):
    users = synthetic_users(61, n_users, released=3.0, public=5.0, extremes=False)
    epsilon, delta = 0.1, 1e-7
    outs = releases(summed(users), COVERAGE_DRAWS, epsilon=epsilon, delta=delta, seed=67 + n_users)
    sigma = outs[0]["sigma"]
    usable_bound = float(stats.norm.sf(Z - KAPPA * n_users / sigma))  # ≈ 0.013
    none = 0
    for o in outs:
        if o["released_perplexity"] is None:
            none += 1
            assert o["public_only_perplexity"] is None and o["log_ratio"] is None
            assert o["verdict"] == "cannot tell"
            assert o["interval"]["log_ratio"] == [-C_V, C_V]
            assert o["interval"]["released_perplexity"] == pytest.approx([1.0, math.exp(B_V)])
            assert o["interval"]["public_only_perplexity"] == pytest.approx([1.0, math.exp(B_V)])
    upper = cp_upper(none, COVERAGE_DRAWS, FALSE_FAILURE / 2)
    assert upper >= 1.0 - usable_bound, f"no estimate in only {none}/{COVERAGE_DRAWS}"
