"""Privacy of the Bayesian trigram stage (pipeline/bayes.py, docs/bayes_sensitivity.md).

* The data-independent bound on ||Δμ_ps||₂ holds: on many random bounded datasets (random users,
  counts, public priors, hyperparameters) the brute-force maximum over users of the exact change,
  recomputed from scratch without the user, never exceeds it.
* The paper's brute-force sensitivity (SQL, NOT DP) equals that recomputation.
* The noise actually added has variance σ² (chi-square band), i.e. it is what the accountant charged
  for, and the accountant's epsilon for the stage equals its budget share.

False-failure rates: the deterministic checks cannot fail by chance; each statistical check is
two-sided at 1e-4.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from dpngram.core.accounting import Accountant, PrivacyEvent
from dpngram.core.noise import simulation_rng
from dpngram.engines.duckdb import Warehouse
from dpngram.mechanisms import bayes, bayes_user_counts

FALSE_FAILURE = 1e-4


def mu_of(users: list[dict[int, int]], V: int, public: np.ndarray, **hp) -> np.ndarray:
    total, n = np.zeros(V), np.zeros(V)
    for contribution in users:
        for i, c in contribution.items():
            total[i] += c
            n[i] += 1
    return bayes.posterior_mean(total, n, public, **hp)


def brute_force_max(users, V, public, **hp) -> float:
    """max_n ||μ_ps(D) − μ_ps(D₋ₙ)||₂, recomputing μ_ps from scratch for every D₋ₙ."""
    full = mu_of(users, V, public, **hp)
    return max(
        np.linalg.norm(full - mu_of(users[:j] + users[j + 1 :], V, public, **hp)) for j in range(len(users))
    )


def random_dataset(rng, V: int, C: int, W: int, n: int) -> list[dict[int, int]]:
    """Bounded contributions: each user ≤ W distinct trigrams, counts in 1..C (often exactly C)."""
    users = []
    for _ in range(n):
        k = int(rng.integers(1, min(W, V) + 1))
        items = rng.choice(V, size=k, replace=False)
        users.append({int(i): (C if rng.random() < 0.5 else int(rng.integers(1, C + 1))) for i in items})
    return users


def test_bound_holds_on_random_datasets():
    rng = simulation_rng(20261121)
    worst = 0.0
    for _ in range(1500):
        V = int(rng.integers(2, 30))
        C = int(rng.choice([1, 2, 5, 10]))
        W = int(rng.integers(1, min(V, 8) + 1))
        hp = {
            "S": float(10 ** rng.uniform(-2, 1)),
            "rho": float(rng.uniform(0.05, 1)),
            "C": C,
            "log_clip": float(rng.choice([0.3, 1.0, 4.0])),
        }
        users = random_dataset(rng, V, C, W, int(rng.integers(1, 15)))
        public = rng.integers(0, 50, V)
        gamma = brute_force_max(users, V, public, **hp)
        bound = bayes.sensitivity_bound(W=W, vocab_size=V, **hp)
        assert gamma <= bound * (1 + 1e-9), (gamma, bound, V, W, hp)
        worst = max(worst, gamma / bound)
    assert worst > 0.5  # the bound is not vacuous: random data come within a factor 2 of it


def test_bound_holds_in_adversarial_neighbourhoods():
    """One target user against other users summarised by (m_i holders, their total count), with
    m_i around the decay knee C/S and extreme counts (1 or C per holder), small centring clips."""
    rng = simulation_rng(7)
    worst = 0.0
    for _ in range(4000):
        V = int(rng.integers(1, 12))
        C = int(rng.choice([1, 2, 3, 10]))
        W = int(rng.integers(1, V + 1))
        S = float(10 ** rng.uniform(-1.5, 1))
        hp = {"S": S, "rho": 1.0, "C": C, "log_clip": float(rng.choice([0.1, 0.5, 1, 2, 4, 10]))}
        k = int(rng.integers(1, W + 1))
        mine = np.zeros(V)
        mine[rng.choice(V, size=k, replace=False)] = rng.choice([1, C], size=k)
        m = rng.integers(0, int(rng.choice([1, 3, math.ceil(C / S) + 2, 50])) + 1, V).astype(float)
        others = m * float(rng.choice([1, C]))
        public = rng.integers(0, 5, V)
        with_user = bayes.posterior_mean(others + mine, m + (mine > 0), public, **hp)
        without = bayes.posterior_mean(others, m, public, **hp)
        gamma = float(np.linalg.norm(with_user - without))
        bound = bayes.sensitivity_bound(W=W, vocab_size=V, **hp)
        assert gamma <= bound * (1 + 1e-9), (gamma, bound)
        worst = max(worst, gamma / bound)
    assert worst > 0.5


def test_bound_scales_with_rho_and_grows_with_w():
    base = {"C": 1, "S": 0.01, "vocab_size": 50_000, "log_clip": 4.0}
    b1 = bayes.sensitivity_bound(W=16, rho=0.2, **base)
    assert bayes.sensitivity_bound(W=16, rho=0.4, **base) == pytest.approx(2 * b1, rel=1e-12)
    assert bayes.sensitivity_bound(W=64, rho=0.2, **base) > b1


def test_sql_bruteforce_equals_recomputation():
    """The NOT-DP brute-force SQL (Alg. 1's loop) equals max_n recomputation from scratch."""
    rng = simulation_rng(3)
    V, C, W = 25, 3, 6
    users = random_dataset(rng, V, C, W, 12)
    public = rng.integers(0, 20, V).astype(float)
    hp = {"S": 0.2, "rho": 0.6, "C": C, "log_clip": 0.7}
    wh = Warehouse(":memory:", memory_limit="1GB")
    wh.con.execute("CREATE SCHEMA s")
    rows = [(f"u{j}", i + 1, c) for j, u in enumerate(users) for i, c in u.items()]
    table = pa.table(
        {"user_id": [r[0] for r in rows], "tid": [r[1] for r in rows], "user_count": [r[2] for r in rows]}
    )
    wh.con.register("uc", table)
    wh.con.execute(f"CREATE TABLE s.{bayes_user_counts.USER_COUNTS} AS SELECT * FROM uc")
    total, n = bayes_user_counts.aggregate_counts(wh, "s", bayes_user_counts.USER_COUNTS, V)
    inputs = bayes.TrigramInputs("s", V, public, total, n, 0, False, 0)
    sql_value = bayes.bruteforce_sensitivity_not_dp(wh, inputs, **hp)
    assert sql_value == pytest.approx(brute_force_max(users, V, public, **hp), rel=1e-9)
    # without the per-user table (prepare_inputs builds it only when asked): a clear error
    wh.con.execute(f"DROP TABLE s.{bayes_user_counts.USER_COUNTS}")
    with pytest.raises(ValueError, match="user_counts_table=True"):
        bayes.bruteforce_sensitivity_not_dp(wh, inputs, **hp)


def test_noise_variance_matches_sigma(secure_noise):
    """h − snapped(μ) has mean 0 and variance σ² (the discrete Gaussian on a grid ≪ σ has variance
    σ² up to a relative error below 1e-100): n s²/σ² ~ χ²_n with known mean 0."""
    V = 200_000
    mu = np.linspace(-5, 5, V)
    calibration = bayes.calibrate(1.0, 1e-6, 0.37, V)
    h = bayes.release_logits(mu, calibration, secure_noise)
    snapped = calibration.grid * np.floor(mu / calibration.grid + 0.5)
    assert np.all(np.abs(snapped - mu) <= calibration.grid / 2)
    assert np.all(np.floor(h / calibration.grid) == h / calibration.grid)  # on the power-of-two grid
    noise = h - snapped
    statistic = float(np.sum(noise**2) / calibration.sigma**2)
    lo, hi = stats.chi2.ppf([FALSE_FAILURE / 2, 1 - FALSE_FAILURE / 2], V)
    assert lo < statistic < hi
    z = float(noise.mean() / (calibration.sigma / math.sqrt(V)))
    assert abs(z) < stats.norm.isf(FALSE_FAILURE / 2)


def test_variance_test_has_power(secure_noise):
    """The same chi-square band rejects noise 5% too small (what a mis-calibration would give)."""
    V = 200_000
    calibration = bayes.calibrate(1.0, 1e-6, 0.37, V)
    noise = secure_noise.gaussian_on_grid(calibration.sigma * 0.95, V, calibration.grid)
    statistic = float(np.sum(noise**2) / calibration.sigma**2)
    assert statistic < stats.chi2.ppf(FALSE_FAILURE / 2, V)


@pytest.mark.parametrize("epsilon,delta", [(0.1, 1e-7), (1.0, 1e-6), (4.0, 5e-8)])
def test_accountant_epsilon_equals_the_stage_budget(epsilon, delta):
    V = 50_000
    bound = bayes.sensitivity_bound(C=1, W=32, S=0.01, rho=0.3, vocab_size=V, log_clip=4.0)
    calibration = bayes.calibrate(epsilon, delta, bound, V)
    grid = calibration.grid
    assert grid == 2.0 ** round(math.log2(grid))
    assert grid <= bound / (16 * math.ceil(max(1.0, epsilon)))
    assert calibration.snapped_sensitivity == pytest.approx(bound + grid * math.sqrt(V))
    event = PrivacyEvent(
        stage="bayes",
        mechanism="gaussian",
        sigma=calibration.sigma,
        sensitivity=calibration.snapped_sensitivity,
    )
    spent = Accountant([event]).stage_epsilon("bayes", delta)
    assert spent <= epsilon
    assert spent == pytest.approx(epsilon, rel=2e-3)  # calibrated at δ(1 − 1e-3): a hair under
