"""The empirical privacy audit (src/dpngram/audit.py), fast variant: for DPSU (DPNE level 1) with
the default policy Gaussian and with the weighted policy, a DPNE level, the Bayesian stage, the
synthetic stage and the noisy LM counts, the Clopper-Pearson lower bound on ε from runs on
neighbouring datasets (one canary user) stays at or below the claimed ε; a deliberately
miscalibrated mechanism is caught, so the audit has power; and the DPSU / DPNE audits run the
default code path (policy Gaussian with the configured cap, fresh salts every run).

False-failure rates. Each real mechanism's bound exceeds its true ε with probability at most
ALPHA = 1e-4 (the bound's confidence), so the first test fails by chance with probability at most
6 * 1e-4 = 6e-4 over the six mechanisms (0 if every claim is an upper bound, as it must be).

The control (policy-Gaussian DPSU with σ/10 at the same claim, 2.26) is designed before any run
(:func:`dpngram.audit._best_holders`): 10 other holders put the audited word at weight 10 against
ρ₁ = 10.20 and σ = 0.18, so it is released with probability 0.13 without the canary and at least
0.98 with it (the canary's shift is 1 in most visiting orders and never below 1/sqrt(3)). With 400
runs per dataset (200 held out) a simulation of the whole bound procedure with those release
probabilities gave no miss in 3000 repetitions (0.1% quantile of the bound 2.71), so the control
test fails by chance with probability below about 1e-3. At 200 runs it missed 0.7% of the time."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpngram import audit
from dpngram.audit import AUDITS, epsilon_lower_bound, expected_threshold_bound, run_audit
from dpngram.core.budget import Budget
from dpngram.mechanisms import dpsu
from dpngram.mechanisms.dpsu import vocabulary_parameters

ALPHA = 1e-4


@pytest.mark.statistical
@pytest.mark.parametrize("name", list(AUDITS))
def test_empirical_lower_bound_stays_below_the_claimed_epsilon(name):
    result = run_audit(name, fast=True, alpha=ALPHA)
    assert result.epsilon_lower_bound <= result.claimed_epsilon, result.to_dict()


@pytest.mark.statistical
def test_the_audit_catches_a_miscalibrated_mechanism():
    broken = run_audit("dpsu", runs=400, alpha=0.05, miscalibrate=0.1)
    assert broken.setting["policy"] == "policy-gaussian"
    assert broken.epsilon_lower_bound > broken.claimed_epsilon, broken.to_dict()


def record_sips_release_rounds(monkeypatch) -> list:
    """The ``rounds`` argument of every ``dpsu.sips_release`` call, recorded (the release runs)."""
    calls: list = []
    real = dpsu.sips_release

    def recording(*args, **kwargs):
        calls.append(kwargs["rounds"])
        return real(*args, **kwargs)

    monkeypatch.setattr(dpsu, "sips_release", recording)
    return calls


def record_statements(monkeypatch) -> set[str]:
    """The names of the SQL statements DPSU loads (the set fills as it does)."""
    names: set[str] = set()
    real = dpsu.load_sql

    def recording(name: str, **identifiers: str) -> str:
        names.add(name)
        return real(name, **identifiers)

    monkeypatch.setattr(dpsu, "load_sql", recording)
    return names


def record_selection_salts(monkeypatch) -> list[int]:
    """The selection salts the audit's noise sources draw, in order (the list fills as they do)."""
    salts: list[int] = []
    real_salt = audit.NoiseSource.selection_salt

    def recording_salt(self):
        salts.append(real_salt(self))
        return salts[-1]

    monkeypatch.setattr(audit.NoiseSource, "selection_salt", recording_salt)
    return salts


@pytest.mark.parametrize("name", ["dpsu", "dpne_level"])
def test_dpsu_audits_run_the_policy_gaussian_with_fresh_salts(name, monkeypatch):
    """The `dpsu` and `dpne_level` audits call the pipeline's secret_histogram with the policy
    Gaussian's cap (the default α = 10 over ρ), once per run and dataset, each time with new
    selection salts (subset and visiting order)."""
    calls = []
    real = dpsu.secret_histogram

    def recording(*args, **kwargs):
        calls.append(kwargs["cap"])
        return real(*args, **kwargs)

    salts = record_selection_salts(monkeypatch)
    monkeypatch.setattr(dpsu, "secret_histogram", recording)
    result = run_audit(name, runs=3)
    setting = result.setting
    assert setting["policy"] == "policy-gaussian" and setting["policy_cap_alpha"] == 10.0
    assert setting["threshold_delta_share"] == 0.1 and setting["sigma_decay"] == 1.2
    rho = setting["rho_1"] if name == "dpsu" else setting["rho_k"]
    sigma = setting["sigma_1"] if name == "dpsu" else setting["sigma_k"]
    assert calls == [pytest.approx(rho + 10.0 * sigma)] * 6
    assert len(salts) == 12 and len(set(salts)) == 12  # subset + visiting order, every run
    if name == "dpsu":
        expected = vocabulary_parameters(
            Budget(4.0, 1e-5), 5, 1.2, 100, threshold_delta=0.1, policy="policy-gaussian", policy_cap=10.0
        )
        assert (setting["sigma_1"], setting["rho_1"], setting["cap"]) == (
            expected.sigma,
            expected.threshold,
            expected.cap,
        )


def test_weighted_audit_uses_the_weighted_histogram(monkeypatch):
    calls = []
    real = dpsu.secret_histogram

    def recording(*args, **kwargs):
        calls.append(kwargs["cap"])
        return real(*args, **kwargs)

    monkeypatch.setattr(dpsu, "secret_histogram", recording)
    assert run_audit("dpsu_weighted", runs=2).setting["policy"] == "weighted"
    assert calls == [None] * 4


def test_expected_bound_of_a_release_decision():
    """Without separation (shift 0) the design bound is 0; with a shift of 50 σ the two datasets
    are separated and the bound is the Clopper-Pearson limit for n/2 held-out runs."""
    assert expected_threshold_bound(5.0, 0.0, 1.0, 5.5, 2000, 1e-5) == 0.0
    n = 1000
    ub = 1 - 0.025 ** (1 / (n // 2))
    assert expected_threshold_bound(0.0, 50.0, 1.0, 25.0, n, 0.0) == pytest.approx(
        math.log((1 - ub) / ub), rel=1e-9
    )


def test_lower_bound_of_separable_and_identical_samples():
    """Identical distributions give 0; completely separated samples of n runs give the
    Clopper-Pearson-limited bound log((1 - fpr_ub) / fnr_ub) with both rates at 0 failures:
    fnr_ub = 1 - (alpha/2)^(1/m) for the m = n/2 held-out runs."""
    rng = np.random.default_rng(0)
    same = epsilon_lower_bound(rng.normal(size=4000), rng.normal(size=4000), 1e-6, 0.05)[0]
    assert same == 0.0 or same < 0.2
    n = 1000
    eps, _, fpr, fnr = epsilon_lower_bound(np.zeros(n), np.ones(n), 0.0, 0.05)
    ub = 1 - (0.025) ** (1 / (n // 2))
    assert fpr == pytest.approx(ub, rel=1e-9) and fnr == pytest.approx(ub, rel=1e-9)
    assert eps == pytest.approx(math.log((1 - ub) / ub), rel=1e-9)


def test_sips_audit_runs_complete_dp_sips_releases_with_fresh_salts(monkeypatch):
    """The dpsu_sips audit calls the pipeline's sips_release with the configured rounds (from
    DpneConfig: R Gaussians composing to the weighted policy's sigma_1), once per run and dataset,
    and every round draws a new subset selection salt; its claim is the weighted policy's (same sigma_1 and
    delta_0 in total)."""
    from dpngram.config.sections import DpneConfig
    from dpngram.core.accounting import compose_gaussian_sigmas

    calls = record_sips_release_rounds(monkeypatch)
    salts = record_selection_salts(monkeypatch)
    result = run_audit("dpsu_sips", runs=3)
    rounds = DpneConfig().sips_rounds
    assert result.setting["policy"] == "dp-sips" and len(result.setting["sips_rounds"]) == rounds
    assert len(calls) == 6 and all(len(c) == rounds for c in calls)
    assert compose_gaussian_sigmas(r.sigma for r in calls[0]) == pytest.approx(
        result.setting["sigma_1"], rel=1e-14
    )
    assert len(salts) == 6 * rounds and len(set(salts)) == len(salts)
    weighted = run_audit("dpsu_weighted", runs=2)
    assert result.claimed_epsilon == pytest.approx(weighted.claimed_epsilon, rel=1e-12)


def test_sips_admission_audit_runs_releases_with_admission_and_one_salt_a_run(monkeypatch):
    """The dpsu_sips_admission audit calls the pipeline's sips_release with round 1's admission
    floor z sigma_1 (the run defaults' floor and admission ratio, the configured rounds), once per
    run and dataset; with admission a
    run draws ONE subset salt (every user keeps its round-1 subset), a new one every run; its claim
    is the weighted policy's (admission changes no event)."""
    from dpngram.config.sections import DpneConfig
    from dpngram.mechanisms.dpsu_rounds import sips_fractions

    calls = record_sips_release_rounds(monkeypatch)
    salts = record_selection_salts(monkeypatch)
    result = run_audit("dpsu_sips_admission", runs=3)
    defaults = DpneConfig()
    rounds, (ratio, floor) = defaults.sips_rounds, defaults.sips_plan(1)
    assert floor is not None and (ratio, floor) == (
        defaults.sips_admission_ratio,
        defaults.sips_admission_floor,
    )
    assert rounds >= 2 and result.setting["sips_admission"] == floor and result.setting["sips_ratio"] == ratio
    assert len(calls) == 6 and all(len(c) == rounds for c in calls)
    first = calls[0][0]
    assert first.admit_floor == pytest.approx(floor * first.sigma, rel=1e-15)
    assert all(r.admit_floor is None for r in calls[0][1:])
    assert first.sigma == pytest.approx(
        result.setting["sigma_1"] / math.sqrt(sips_fractions(rounds, ratio)[0])
    )
    assert len(salts) == 6 and len(set(salts)) == 6
    # the vocabulary's own path (release_vocabulary): round 1's kept lists, as item codes read
    # through the sentences' token ids
    statements = record_statements(monkeypatch)
    run_audit("dpsu_sips_admission", runs=1)
    assert {
        "dpsu/item_codes_tokens",
        "dpsu/user_kept_lists_coded_tokens",
        "dpsu/histogram_kept_coded",
    } <= statements
    assert "dpsu/histogram_kept_admitted_coded" in statements
    weighted = run_audit("dpsu_weighted", runs=2)
    assert result.claimed_epsilon == pytest.approx(weighted.claimed_epsilon, rel=1e-12)
