"""Empirical privacy checks of the DPSU release on neighbouring datasets (DPNE Thm. 2.1 proof,
GGK+20): D vs D' = D + one user. The mechanism is called directly (histogram once, then the
noisy threshold many times) at a large delta so the probabilities are measurable.

Confidence bounds are Clopper-Pearson; each check's false-failure rate is at most 1e-4."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpngram.core.accounting import dpsu_threshold, gaussian_sigma
from dpngram.engines.duckdb import Warehouse
from dpngram.engines.sql import load_sql
from dpngram.mechanisms import dpsu

SCHEMA = "run_privacy_test"
FALSE_FAILURE = 1e-4
RUNS = 1500


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Two-sided (1 - alpha) Clopper-Pearson interval."""
    lo = 0.0 if successes == 0 else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    hi = 1.0 if successes == trials else float(stats.beta.isf(alpha / 2, successes + 1, trials - successes))
    return lo, hi


def histogram(rows: list[tuple[str, list[str]]], max_contribution: int) -> Warehouse:
    wh = Warehouse(":memory:", memory_limit="1GB")
    wh.con.execute(f"CREATE SCHEMA {SCHEMA}")
    wh.con.execute(
        f"CREATE TABLE {SCHEMA}.sentences (user_id VARCHAR, doc_id BIGINT, sent_id INTEGER, tokens VARCHAR[])"
    )
    wh.con.executemany(
        f"INSERT INTO {SCHEMA}.sentences VALUES (?, 1, ?, ?)", [(u, i, t) for i, (u, t) in enumerate(rows)]
    )
    wh.con.execute(load_sql("dpsu/vocabulary_source", schema=SCHEMA, target="src"))
    dpsu.dpsu_histogram(wh, SCHEMA, "src", "hist", max_contribution=max_contribution, salt=1)
    return wh


def release_frequency(
    wh: Warehouse, tokens: set[str], sigma: float, rho: float, noise, any_of: bool = True
) -> int:
    """Number of runs (of RUNS) in which any of ``tokens`` is released."""
    scan = load_sql("dpsu/histogram_scan", schema=SCHEMA, histogram="hist")
    hits = 0
    for _ in range(RUNS):
        out = set(
            dpsu.threshold_histogram(wh, scan, sigma=sigma, threshold=rho, noise=noise)
            .column("item")
            .to_pylist()
        )
        hits += bool(out & tokens)
    return hits


@pytest.mark.statistical
def test_unique_tokens_of_one_user_are_released_with_probability_at_most_delta_half(secure_noise):
    """Absent from D, so P_D = 0; in D' they are held only by the added user. rho_1 is set so
    that P_D'[any of them released] <= delta/2 for every t <= Delta, with equality at the worst
    t: we use that t, so the bound is tight and the check has power."""
    delta, sigma, max_contribution = 0.2, 1.0, 8
    rho = dpsu_threshold(sigma, delta / 2, max_contribution)
    ts = np.arange(1, max_contribution + 1)
    p_t = 1 - stats.norm.cdf((rho - 1 / np.sqrt(ts)) / sigma) ** ts
    t = int(ts[np.argmax(p_t)])
    assert p_t.max() == pytest.approx(delta / 2, rel=1e-6)
    secret = {f"secret{j}" for j in range(t)}
    rows = [(f"u{i}", ["common", f"c{i % 3}"]) for i in range(10)] + [("added", sorted(secret))]
    wh = histogram(rows, max_contribution)
    hits = release_frequency(wh, secret, sigma, rho, secure_noise)
    lo, hi = clopper_pearson(hits, RUNS, FALSE_FAILURE)
    assert lo <= delta / 2  # P_D'(released) <= e^eps * P_D(released) + delta/2 with P_D = 0
    assert hi >= delta / 2  # and the mechanism matches the analysis (the bound is attained)


@pytest.mark.statistical
@pytest.mark.parametrize("holders", [1, 3])
def test_release_probability_ratio_is_bounded(secure_noise, holders):
    """A token held by ``holders`` users of D; D' adds one more user holding it. With sigma for
    (eps, delta/2) and rho_1 at delta/2 (Thm. 2.1 with T = 1), both directions of
    P(released) <= e^eps P'(released) + delta hold (upper confidence bound of the left side vs
    lower confidence bound of the right side)."""
    epsilon, delta, max_contribution = 1.0, 0.2, 4
    sigma = gaussian_sigma(epsilon, delta / 2)
    rho = dpsu_threshold(sigma, delta / 2, max_contribution)
    base = [(f"u{i}", ["word", f"pad{i}a", f"pad{i}b", f"pad{i}c"]) for i in range(holders)]
    base += [(f"o{i}", ["other"]) for i in range(5)]
    freq = {}
    for name, rows in (("D", base), ("D'", base + [("added", ["word"])])):
        freq[name] = release_frequency(histogram(rows, max_contribution), {"word"}, sigma, rho, secure_noise)
    alpha = FALSE_FAILURE / 4  # four one-sided bounds
    d_lo, d_hi = clopper_pearson(freq["D"], RUNS, 2 * alpha)
    n_lo, n_hi = clopper_pearson(freq["D'"], RUNS, 2 * alpha)
    assert n_lo <= math.exp(epsilon) * d_hi + delta
    assert d_lo <= math.exp(epsilon) * n_hi + delta
    # the neighbouring datasets really differ in the tested event (the check is not vacuous)
    assert freq["D'"] > freq["D"]
