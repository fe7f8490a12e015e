"""Empirical privacy audit: a statistical *lower* bound on ε for the released mechanisms.

Every other test checks the analysis from above (the accountant's ε is an upper bound). The audit
comes from below, as in Jagielski, Ullman & Oprea (2020, "Auditing differentially private machine
learning") and Nasr et al. (2021, "Adversary instantiation"): for a mechanism M and neighbouring
datasets D and D' = D + one canary user, run M many times on each, turn each output into a score
(how much it looks like the canary is in), pick a threshold test "score ≥ t means in", and bound
its false-positive rate FPR = P[score ≥ t | D] and false-negative rate FNR = P[score < t | D'] from
above with Clopper-Pearson intervals. An (ε, δ)-DP mechanism satisfies, for every test,

    FPR + e^ε FNR ≥ 1 − δ   and   FNR + e^ε FPR ≥ 1 − δ,

so with probability at least 1 − α

    ε ≥ ε_lb = max(0, log((1 − δ − FPR_ub) / FNR_ub), log((1 − δ − FNR_ub) / FPR_ub)).

The threshold is chosen on the first half of the runs and the bound computed on the second half
(the choice is then independent of the counts the bound uses). ε_lb above the claimed ε is a bug
in the mechanism or its accounting (it happens by chance with probability at most α); ε_lb far
below the claimed ε is expected: the canaries here are strong but not the worst case, and a few
thousand runs cannot resolve small probabilities.

Audited mechanisms (each with the real code path and the real calibration; only the data is made
up, and small):

* ``dpsu``: DPNE level 1 (the vocabulary, DPSU weighted Gaussian): the DPSU histogram SQL on a
  sentences table, :func:`~dpngram.mechanisms.dpsu.threshold_histogram` with σ₁ and ρ₁ from
  :func:`~dpngram.mechanisms.dpsu.vocabulary_parameters`. The canary holds one word that ``m``
  other users hold too, ``m`` placed just below ρ₁ so the release decision is uncertain in both
  datasets. Score: the word is released.
* ``dpne_level``: a DPNE level k ≥ 2: the same thresholding with the level's σ_k
  (:func:`~dpngram.mechanisms.dpne.level_sigmas`) and ρ_k
  (:func:`~dpngram.mechanisms.dpne.level_threshold`) over a bigram histogram (the candidate
  domain S₁×S₁ is fixed by the earlier release, so it is public here).
* ``bayes``: the Bayesian trigram stage: μ from :func:`~dpngram.mechanisms.bayes.posterior_mean`,
  σ from :func:`~dpngram.mechanisms.bayes.calibrate` at the data-independent sensitivity bound,
  noisy logits from :func:`~dpngram.mechanisms.bayes.release_logits`. Score: the projection of the
  noisy logits on μ(D') − μ(D) (the most powerful test for Gaussian noise).
* ``synth``: the Chen et al. exploration tree (:func:`~dpngram.mechanisms.synth.build_tree`, pure
  ε-DP, δ = 0). The canary's record repeats one item ℓ_max times. Score: that item's noisy
  unigram count (−∞ when it did not pass the threshold).

Owns: :func:`epsilon_lower_bound`, :data:`AUDITS`, :func:`run_audit`.
Imports: dpngram.mechanisms, dpngram.engines, dpngram.config, dpngram.core; numpy, scipy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from dpngram.core.accounting import Accountant
from dpngram.core.budget import Budget
from dpngram.core.noise import NoiseSource

#: Default confidence: each reported lower bound holds with probability at least 1 - ALPHA.
ALPHA = 0.05


@dataclass(frozen=True)
class AuditResult:
    mechanism: str
    claimed_epsilon: float
    delta: float
    epsilon_lower_bound: float
    runs_per_dataset: int
    alpha: float
    threshold: float
    false_positive_rate: float
    false_negative_rate: float
    seconds: float
    setting: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.epsilon_lower_bound <= self.claimed_epsilon

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "claimed_epsilon": self.claimed_epsilon,
            "delta": self.delta,
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "lower_bound_below_claim": self.ok,
            "runs_per_dataset": self.runs_per_dataset,
            "alpha": self.alpha,
            "threshold": self.threshold,
            "false_positive_rate": self.false_positive_rate,
            "false_negative_rate": self.false_negative_rate,
            "seconds": round(self.seconds, 2),
            "setting": self.setting,
        }


# ----------------------------------------------------------------------------------------------
# The bound
# ----------------------------------------------------------------------------------------------
def _cp_upper(failures: int, trials: int, alpha: float) -> float:
    """One-sided (1 - alpha) Clopper-Pearson upper bound on a rate."""
    if failures >= trials:
        return 1.0
    return float(stats.beta.isf(alpha, failures + 1, trials - failures))


def _bound(fp: int, fn: int, n_out: int, n_in: int, delta: float, alpha: float) -> tuple[float, float, float]:
    """(ε_lb, FPR_ub, FNR_ub): each rate bounded at alpha/2, so both hold together w.p. 1 - alpha."""
    fpr = _cp_upper(fp, n_out, alpha / 2)
    fnr = _cp_upper(fn, n_in, alpha / 2)
    candidates = [0.0]
    if fnr > 0 and 1 - delta - fpr > 0:
        candidates.append(math.log((1 - delta - fpr) / fnr))
    if fpr > 0 and 1 - delta - fnr > 0:
        candidates.append(math.log((1 - delta - fnr) / fpr))
    return max(candidates), fpr, fnr


def epsilon_lower_bound(
    scores_out: np.ndarray, scores_in: np.ndarray, delta: float, alpha: float = ALPHA
) -> tuple[float, float, float, float]:
    """Empirical ε lower bound from scores of runs without (``scores_out``) and with
    (``scores_in``) the canary. Returns (ε_lb, threshold, FPR_ub, FNR_ub).

    The threshold maximises the same bound on the first half of each sample; the reported bound
    uses only the second half (Clopper-Pearson, confidence 1 - alpha)."""
    out = np.asarray(scores_out, dtype=np.float64)
    inn = np.asarray(scores_in, dtype=np.float64)
    out_a, out_b = out[: out.size // 2], out[out.size // 2 :]
    in_a, in_b = inn[: inn.size // 2], inn[inn.size // 2 :]
    pooled = np.concatenate([out_a, in_a])
    finite = pooled[np.isfinite(pooled)]
    candidates = np.unique(np.quantile(finite, np.linspace(0, 1, 201))) if finite.size else np.array([0.0])
    candidates = np.concatenate([candidates, candidates + 1e-9])  # ">=" just above each sample
    best_t, best = float(candidates[0]), -math.inf
    for t in candidates:
        # selection criterion: the same Clopper-Pearson bound on the first half (a point
        # estimate would pick extreme tails, where a few runs make the rates look tiny)
        fp, fn = int(np.sum(out_a >= t)), int(np.sum(in_a < t))
        estimate = _bound(fp, fn, out_a.size, in_a.size, delta, alpha)[0]
        if estimate > best:
            best, best_t = estimate, float(t)
    fp, fn = int(np.sum(out_b >= best_t)), int(np.sum(in_b < best_t))
    eps_lb, fpr_ub, fnr_ub = _bound(fp, fn, out_b.size, in_b.size, delta, alpha)
    return eps_lb, best_t, fpr_ub, fnr_ub


# ----------------------------------------------------------------------------------------------
# Mechanisms under audit: each returns (scores without, scores with, claimed ε, δ, setting)
# ----------------------------------------------------------------------------------------------
Scores = tuple[np.ndarray, np.ndarray, float, float, dict[str, Any]]


def _threshold_release(
    rows_without: list[tuple[str, list[str]]],
    canary: tuple[str, list[str]],
    word: str,
    sigma: float,
    rho: float,
    max_contribution: int,
    runs: int,
    noise: NoiseSource,
) -> tuple[np.ndarray, np.ndarray]:
    """Release decisions of ``word`` over ``runs`` runs of the DPSU thresholding on D and D'."""
    from dpngram.engines.duckdb import Warehouse
    from dpngram.engines.sql import load_sql
    from dpngram.mechanisms import dpsu

    schema = "run_privacy_audit"
    scores = []
    for rows in (rows_without, [*rows_without, canary]):
        with Warehouse(":memory:", memory_limit="512MB", threads=1) as wh:
            wh.con.execute(f"CREATE SCHEMA {schema}")
            wh.con.execute(
                f"CREATE TABLE {schema}.sentences "
                "(user_id VARCHAR, doc_id BIGINT, sent_id INTEGER, tokens VARCHAR[])"
            )
            wh.con.executemany(
                f"INSERT INTO {schema}.sentences VALUES (?, 1, ?, ?)",
                [(u, i, t) for i, (u, t) in enumerate(rows)],
            )
            wh.con.execute(load_sql("dpsu/vocabulary_source", schema=schema, target="src"))
            dpsu.dpsu_histogram(
                wh, schema, "src", "hist", max_contribution=max_contribution, salt=noise.salt()
            )
            scan = load_sql("dpsu/histogram_scan", schema=schema, histogram="hist")
            hits = np.empty(runs)
            for i in range(runs):
                released = dpsu.threshold_histogram(wh, scan, sigma=sigma, threshold=rho, noise=noise)
                hits[i] = word in set(released.column("item").to_pylist())
            scores.append(hits)
    return scores[0], scores[1]


def _near_threshold_holders(rho: float, sigma: float) -> int:
    """Other users holding the canary's word: the weight m with P[m + Z > ρ] about 1/4, so both
    datasets' release probabilities are measurable and differ by the canary's weight 1."""
    return max(0, round(rho - 0.67 * sigma - 0.5))


def audit_dpsu(
    runs: int,
    noise: NoiseSource,
    *,
    epsilon: float = 4.0,
    delta: float = 1e-5,
    max_n: int = 1,
    miscalibrate: float = 1.0,
) -> Scores:
    """DPNE level 1 (DPSU). ``miscalibrate`` < 1 shrinks σ without changing the claim (only to
    show the audit catches a broken calibration)."""
    from dpngram.mechanisms.dpsu import vocabulary_parameters

    max_contribution = 4
    params = vocabulary_parameters(Budget(epsilon, delta), max_n, 1.0, max_contribution)
    claimed = Accountant(params.events("dpne.k1")).total_epsilon(delta)
    sigma = params.sigma * miscalibrate
    holders = _near_threshold_holders(params.threshold, sigma)
    rows = [(f"u{i}", ["word"]) for i in range(holders)] + [(f"o{i}", ["other", f"pad{i}"]) for i in range(3)]
    out, inn = _threshold_release(
        rows, ("canary", ["word"]), "word", sigma, params.threshold, max_contribution, runs, noise
    )
    setting = {
        "epsilon_run": epsilon,
        "T": max_n,
        "sigma_1": sigma,
        "rho_1": params.threshold,
        "other_holders": holders,
        "canary": "one user holding the audited word (weight 1)",
    }
    if miscalibrate != 1.0:
        setting["miscalibrated_sigma_factor"] = miscalibrate
    return out, inn, claimed, delta, setting


def audit_dpne_level(
    runs: int, noise: NoiseSource, *, epsilon: float = 4.0, delta: float = 1e-5, max_n: int = 2, k: int = 2
) -> Scores:
    """DPNE level k (k >= 2): σ_k and ρ_k of a run with T = ``max_n``."""
    from dpngram.core.accounting import PrivacyEvent
    from dpngram.mechanisms.dpne import level_sigmas, level_threshold

    max_contribution = 4
    sigmas = level_sigmas(Budget(epsilon, delta), max_n, 1.0)
    sigma = sigmas[k - 1]
    # |S_{k-1}| = 40 released (k-1)-grams, |V_k| = 400 valid candidates, eta = 0.01 (defaults' scale)
    rho = level_threshold(sigma, 0.01, 40, 400)
    assert rho is not None
    # a level's own events: its Gaussian; the claim is its ε at the run's δ/2 (Thm. 2.1 split)
    claimed = Accountant([PrivacyEvent(f"dpne.k{k}", "gaussian", sigma=sigma)]).total_epsilon(delta / 2)
    holders = _near_threshold_holders(rho, sigma)
    # bigrams as items: the histogram SQL counts tokens, so each bigram is one token "a_b"
    rows = [(f"u{i}", ["a_b"]) for i in range(holders)] + [(f"o{i}", ["c_d", f"e_{i}"]) for i in range(3)]
    out, inn = _threshold_release(rows, ("canary", ["a_b"]), "a_b", sigma, rho, max_contribution, runs, noise)
    setting = {
        "epsilon_run": epsilon,
        "T": max_n,
        "k": k,
        "sigma_k": sigma,
        "rho_k": rho,
        "other_holders": holders,
        "canary": "one user holding the audited k-gram",
    }
    return out, inn, claimed, delta / 2, setting


def audit_bayes(runs: int, noise: NoiseSource, *, epsilon: float = 2.0, delta: float = 1e-5) -> Scores:
    """The Bayesian trigram release (noisy logits) at the data-independent sensitivity bound."""
    from dpngram.config import BayesConfig
    from dpngram.mechanisms import bayes

    defaults = BayesConfig()
    C, W, L = defaults.clip_count, defaults.max_trigrams, defaults.log_clip
    S, rho = 1.0, 1.0  # no shrinkage towards the prior: the canary moves μ the most
    V = max(8, W + 4)
    public = np.arange(V, 0, -1, dtype=np.float64)
    base = [{0: C, 1: C}, {0: C}, {1: C, 2: 1}]
    canary = {j: C for j in range(3, 3 + min(W, V - 3))}

    def mu(users: list[dict[int, int]]) -> np.ndarray:
        total, holders = np.zeros(V), np.zeros(V)
        for contribution in users:
            for i, c in contribution.items():
                total[i] += c
                holders[i] += 1
        return bayes.posterior_mean(total, holders, public, S=S, rho=rho, C=C, log_clip=L)

    bound = bayes.sensitivity_bound(C=C, W=W, S=S, rho=rho, vocab_size=V, log_clip=L)
    calibration = bayes.calibrate(epsilon, delta, bound, V)
    mu_out, mu_in = mu(base), mu([*base, canary])
    direction = (mu_in - mu_out) / np.linalg.norm(mu_in - mu_out)
    scores = []
    for m in (mu_out, mu_in):
        s = np.empty(runs)
        for i in range(runs):
            s[i] = float(bayes.release_logits(m, calibration, noise) @ direction)
        scores.append(s)
    setting = {
        "vocab_size": V,
        "C": C,
        "W": W,
        "sensitivity_bound": bound,
        "canary_shift_l2": float(np.linalg.norm(mu_in - mu_out)),
        "sigma": calibration.sigma,
        "canary": f"one user with count C on {len(canary)} trigrams nobody else holds",
    }
    return scores[0], scores[1], epsilon, delta, setting


def audit_synth(
    runs: int, noise: NoiseSource, *, epsilon: float = 1.0, l_max: int = 3, n_max: int = 1
) -> Scores:
    """The Chen et al. tree (pure ε-DP): the canary repeats item 2 ℓ_max times. n_max = 1 puts
    the whole budget on the unigram counts, where the canary's shift ℓ_max equals the Laplace
    sensitivity (the tightest case; deeper trees split ε over levels)."""
    from dpngram.mechanisms import synth

    base = [[2, 3, 0], [2, 0], [3, 3, 3], [4, 4, 0]]
    canary = [2] * l_max
    params = synth.TreeParams(epsilon=epsilon, l_max=l_max, n_max=n_max, n_labels=5)
    scores = []
    for records in (base, [*base, canary]):
        oracle = synth.MemoryChildCounts(records)
        s = np.empty(runs)
        for i in range(runs):
            tree = synth.build_tree(oracle, params, noise)
            s[i] = tree.noisy.get((2,), -math.inf)
        scores.append(s)
    setting = {"l_max": l_max, "n_max": n_max, "canary": f"one record: item 2 repeated {l_max} times"}
    return scores[0], scores[1], epsilon, 0.0, setting


#: name -> (audit function, runs per dataset for the full audit (bench), for the fast one (tests))
AUDITS: dict[str, tuple[Callable[..., Scores], int, int]] = {
    "dpsu": (audit_dpsu, 6000, 600),
    "dpne_level": (audit_dpne_level, 6000, 600),
    "bayes": (audit_bayes, 20000, 2000),
    "synth": (audit_synth, 20000, 2000),
}


def run_audit(
    name: str, runs: int | None = None, *, fast: bool = False, alpha: float = ALPHA, **kwargs: Any
) -> AuditResult:
    """Audit mechanism ``name`` (:data:`AUDITS`) with fresh CSPRNG noise."""
    function, full_runs, fast_runs = AUDITS[name]
    runs = runs or (fast_runs if fast else full_runs)
    started = time.perf_counter()
    out, inn, claimed, delta, setting = function(runs, NoiseSource.secure(), **kwargs)
    eps_lb, threshold, fpr, fnr = epsilon_lower_bound(out, inn, delta, alpha)
    return AuditResult(
        mechanism=name,
        claimed_epsilon=float(claimed),
        delta=float(delta),
        epsilon_lower_bound=float(eps_lb),
        runs_per_dataset=runs,
        alpha=alpha,
        threshold=threshold,
        false_positive_rate=fpr,
        false_negative_rate=fnr,
        seconds=time.perf_counter() - started,
        setting=setting,
    )
