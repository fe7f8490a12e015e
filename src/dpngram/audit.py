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

* ``dpsu``: DPNE level 1 (the vocabulary) with the run defaults read from
  :class:`~dpngram.config.DpneConfig` (policy Gaussian, cap α = 10, threshold share 0.1 of δ,
  T = 5, c = 1.2, Δ0 = 100): σ₁, ρ₁ and the cap Γ from
  :func:`~dpngram.mechanisms.dpsu.vocabulary_parameters`. Every run draws fresh secret salts
  (subset and visiting order) and rebuilds the histogram with
  :func:`~dpngram.mechanisms.dpsu.secret_histogram` (the SQL and the sequential update
  :func:`~dpngram.mechanisms.dpsu_policy.policy_histogram_from_stream`), then thresholds it with
  :func:`~dpngram.mechanisms.dpsu.threshold_histogram`, as ``dpsu_release`` does. The canary holds
  the audited word, which ``m`` other users put near ρ₁ (``m`` chosen before any run by the
  expected bound, :func:`_best_holders`), plus two words that many other users fill to the cap, so
  in most visiting orders the policy puts the canary's whole unit of l2 weight on the audited word.
  Score: the word is released.
* ``dpsu_weighted``: the same with ``dpsu_policy=weighted``; the canary holds the audited word only.
* ``dpsu_sips``: the same with ``dpsu_policy=dp-sips`` (the configured rounds R and ratio): every run
  is a complete :func:`~dpngram.mechanisms.dpsu.sips_release` (R rounds, fresh subset salts, the
  items released by earlier rounds dropped); the canary holds the audited word only.
* ``dpsu_sips_admission``: ``dpsu_sips`` with admission by the first round
  (the run defaults' admission floor z and ratio: rounds 2..R keep only the items whose round-1 noisy
  weight reached z sigma_1, and every user keeps its round-1 subset); the canary holds the audited
  word only.
* ``dpsu_sips_public``: DP-SIPS with the vocabulary's public domain (``dpne_public_vocabulary``):
  4 public words that round 1 releases (so round 2 thresholds public words at rho_pub), 20 unheld
  public words, ``m`` other holders of the audited public word put near rho_pub; the canary holds
  the audited word only.
* ``dpne_level``: a DPNE level k ≥ 2 with the defaults: σ_k
  (:func:`~dpngram.mechanisms.dpne.level_sigmas`), ρ_k
  (:func:`~dpngram.mechanisms.dpne.level_threshold`, η = 0.01, |S_{k-1}| = 40, |V_k| = 400: the
  candidate domain is fixed by earlier releases, so it is public here) and the policy Gaussian's
  cap ρ_k + α σ_k, through the same histogram and thresholding functions over k-grams written as
  single tokens. The canary holds the k-gram only.
* ``bayes``: the Bayesian trigram stage: μ from :func:`~dpngram.mechanisms.bayes.posterior_mean`,
  σ from :func:`~dpngram.mechanisms.bayes.calibrate` at the data-independent sensitivity bound,
  noisy logits from :func:`~dpngram.mechanisms.bayes.release_logits`. Score: the projection of the
  noisy logits on μ(D') − μ(D) (the most powerful test for Gaussian noise).
* ``synth``: the Chen et al. exploration tree (:func:`~dpngram.mechanisms.synth.build_tree`, pure
  ε-DP, δ = 0). The canary's record repeats one item ℓ_max times. Score: that item's noisy
  unigram count (−∞ when it did not pass the threshold).
* ``lm_counts``: the noisy LM counts, :func:`~dpngram.mechanisms.lm_counts.noisy_release`
  (snapped vector + rounded Gaussian, σ for l2 sensitivity C = ``lm_count_clip``) on the sum of
  per-user count vectors scaled to norm ≤ C; the canary's vector is scaled to exactly C. Score:
  the projection of the noisy vector on the canary's vector.

Why one module (over 600 lines): every mechanism's audit is the same three steps (canary
datasets, scores, the Clopper-Pearson bound) with a small scorer per mechanism; the shared bound
and the scorers read best side by side, and no other module imports them.

Owns: :func:`epsilon_lower_bound`, :func:`expected_threshold_bound`, :data:`AUDITS`, :func:`run_audit`.
Imports: dpngram.mechanisms, dpngram.engines, dpngram.config, dpngram.core; numpy, scipy.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from scipy import stats

from dpngram.config.stages import BAYES, LM_COUNTS, SYNTH
from dpngram.core.accounting import Accountant
from dpngram.core.budget import Budget
from dpngram.core.noise import NoiseSource

if TYPE_CHECKING:
    from dpngram.engines.duckdb import Warehouse

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
#: A data set of an audit: one (user id, tokens of a sentence) per sentence.
Rows = list[tuple[str, list[str]]]


def dpne_defaults() -> Any:
    """The run defaults the DPSU / DPNE audits use (policy, cap α, threshold share of δ, σ
    schedule c, T, Δ0, η), read from the configuration so the audit follows them."""
    from dpngram.config.sections import DpneConfig

    return DpneConfig()


def _dpsu_releases(
    rows_without: Rows,
    canary_rows: Rows,
    audited: str,
    *,
    sigma: float,
    rho: float,
    cap: float | None,
    max_contribution: int,
    runs: int,
    noise: NoiseSource,
    rounds: Any = (),
    public: Any = None,
    public_words: Sequence[str] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """Release decisions of item ``audited`` over ``runs`` complete DPSU releases on D (the
    ``rows_without`` sentences) and D' (plus the canary's sentences): every run draws fresh secret
    salts and rebuilds the histogram with :func:`~dpngram.mechanisms.dpsu.secret_histogram` (the
    weighted policy when ``cap`` is None, else the policy Gaussian: a fresh visiting order each run),
    then thresholds it with :func:`~dpngram.mechanisms.dpsu.threshold_histogram`, as
    ``dpsu_release`` and the DPNE levels do. With DP-SIPS ``rounds`` (``sigma``, ``rho`` and
    ``cap`` unused) every run is a complete :func:`~dpngram.mechanisms.dpsu.sips_release`: its
    rounds, each with a fresh subset salt, dropping the items released before."""
    from dpngram.engines.select import scratch_engine
    from dpngram.engines.sql import load_sql

    scores = []
    for rows in (rows_without, [*rows_without, *canary_rows]):
        with scratch_engine("512MB", threads=1) as wh:
            _load_sentences(wh, rows, public, public_words)
            scan = load_sql("dpsu/histogram_scan", schema=_SCHEMA, histogram="hist")
            hits = np.empty(runs)
            for i in range(runs):
                if rounds:
                    hits[i] = _sips_released(wh, audited, rounds, max_contribution, noise, public)
                else:
                    hits[i] = _round_released(wh, scan, audited, sigma, rho, cap, max_contribution, noise)
            scores.append(hits)
    return scores[0], scores[1]


#: The schema of the audit's in-memory warehouses.
_SCHEMA = "run_privacy_audit"


def _load_sentences(wh: Warehouse, rows: Rows, public: Any, public_words: Sequence[str]) -> None:
    """Load one audit data set (``rows``: user, tokens) and its (user, item) relation ``src``
    into ``wh``; with a ``public`` domain, its table of ``public_words`` too."""
    from dpngram.engines.ingest import add_token_ids
    from dpngram.engines.sql import load_sql

    wh.con.execute(f"CREATE SCHEMA {_SCHEMA}")
    wh.con.execute(
        f"CREATE TABLE {_SCHEMA}.sentences "
        "(user_id VARCHAR, doc_id BIGINT, sent_id INTEGER, tokens VARCHAR[])"
    )
    wh.con.executemany(
        f"INSERT INTO {_SCHEMA}.sentences VALUES (?, 1, ?, ?)", [(u, i, t) for i, (u, t) in enumerate(rows)]
    )
    add_token_ids(wh, _SCHEMA)  # the ids and dictionary ingest writes: the vocabulary reads them
    wh.con.execute(load_sql("dpsu/vocabulary_source", schema=_SCHEMA, target="src_view"))
    # the (user, item) relation materialised once: a view re-reads the sentences each run
    wh.con.execute(f"CREATE TABLE {_SCHEMA}.src AS SELECT * FROM {_SCHEMA}.src_view")
    if public is not None:  # the vocabulary's public domain (public words, a table)
        words = pa.table({"item": pa.array(list(public_words), pa.string())})
        with wh.registered(audit_public_words=words):
            wh.execute(
                load_sql("dpsu/public_words", schema=_SCHEMA, target=public.table, words="audit_public_words")
            )


def _sips_released(
    wh: Warehouse, audited: str, rounds: Any, max_contribution: int, noise: NoiseSource, public: Any
) -> bool:
    """Whether one complete DP-SIPS release (:func:`~dpngram.mechanisms.dpsu.sips_release`, the
    vocabulary's own path) of the loaded data releases ``audited``."""
    from dpngram.mechanisms import dpsu

    dpsu.sips_release(
        wh,
        _SCHEMA,
        "src",
        "released",
        rounds=rounds,
        max_contribution=max_contribution,
        noise=noise,
        public=public,
        per_user_lists=True,  # the vocabulary's own path (release_vocabulary)
        coded_items=True,
        token_items=True,
    )
    items = wh.fetch_arrow(f"SELECT item FROM {_SCHEMA}.released").column("item").to_pylist()
    hit = audited in set(items)
    wh.drop(_SCHEMA, "released")
    return hit


def _round_released(
    wh: Warehouse,
    scan: str,
    audited: str,
    sigma: float,
    rho: float,
    cap: float | None,
    max_contribution: int,
    noise: NoiseSource,
) -> bool:
    """Whether one single-round DPSU release of the loaded data (a fresh secret histogram, then
    thresholded) releases ``audited``."""
    from dpngram.mechanisms import dpsu

    dpsu.secret_histogram(wh, _SCHEMA, "src", "hist", max_contribution=max_contribution, cap=cap, noise=noise)
    released = dpsu.threshold_histogram(wh, scan, sigma=sigma, threshold=rho, noise=noise)
    hit = audited in set(released.column("item").to_pylist())
    wh.drop(_SCHEMA, "hist")
    return hit


def expected_threshold_bound(
    base: float, shift: float, sigma: float, rho: float, runs: int, delta: float, alpha: float = ALPHA
) -> float:
    """The ε lower bound a release-decision audit reaches when the audited item's weight is ``base``
    without the canary and ``base + shift`` with it, at the expected counts of the held-out half
    (``runs // 2`` per dataset; the test "released means in" and its complement)."""
    held_out = runs - runs // 2
    p_out = float(stats.norm.sf((rho - base) / sigma))
    p_in = float(stats.norm.sf((rho - base - shift) / sigma))
    fp = round(p_out * held_out)
    fn = round((1.0 - p_in) * held_out)
    return _bound(fp, fn, held_out, held_out, delta, alpha)[0]


def _best_holders(rho: float, sigma: float, runs: int, delta: float) -> int:
    """Other holders m of the audited item (each adds exactly 1 under either policy: they hold
    nothing else and m + 1 stays below the cap), chosen before any run to maximise
    :func:`expected_threshold_bound` for a canary shift of 1. Depends on public parameters only."""
    top = max(1, math.ceil(rho + 6 * sigma))

    def merit(m: int) -> tuple[float, float]:
        # ties (all 0 at few runs): a release probability near 1/4 without the canary
        p_out = float(stats.norm.sf((rho - m) / sigma))
        return expected_threshold_bound(m, 1.0, sigma, rho, runs, delta), -abs(p_out - 0.25)

    return max(range(top), key=merit)


def _dpsu_dataset(
    holders: int, canary_items: list[str], common_holders: int, repeats: int
) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """D: ``holders`` users holding only ``word``, ``common_holders`` users holding every item of
    ``canary_items`` but ``word`` (so the policy Gaussian fills them to the cap long before most
    positions in the visiting order), and 3 users with items of their own. The canary writes its
    items in ``repeats`` sentences (the histogram must count distinct items per user)."""
    commons = [item for item in canary_items if item != "word"]
    rows = [(f"u{i}", ["word"]) for i in range(holders)]
    rows += [(f"c{i}", list(commons)) for i in range(common_holders if commons else 0)]
    rows += [(f"o{i}", ["other", f"pad{i}"]) for i in range(3)]
    canary = [("canary", list(canary_items)) for _ in range(repeats)]
    return rows, canary


def audit_dpsu(
    runs: int,
    noise: NoiseSource,
    *,
    epsilon: float = 4.0,
    delta: float = 1e-5,
    policy: str | None = None,
    commons: int | None = None,
    miscalibrate: float = 1.0,
    sips_ratio: float | None = None,
    sips_admission: float | None = None,
) -> Scores:
    """DPNE level 1 (the DPSU vocabulary) with the run defaults (:func:`dpne_defaults`: the policy
    Gaussian, cap α = 10, threshold share 0.1 of δ, T = 5, c = 1.2, Δ0 = 100) at a dpne share
    (``epsilon``, ``delta``). ``policy='weighted'`` audits the other policy. ``miscalibrate`` < 1
    shrinks the noise σ without changing the claim, ρ or the cap (only to show the audit catches a
    broken calibration). ``sips_ratio`` (None: the configured one) and ``sips_admission`` (None:
    off) set DP-SIPS's budget ratio and admission z.

    Canary (policy Gaussian): the audited word, which m other users put near ρ₁ (m chosen by
    :func:`_best_holders`), plus ``commons`` = 2 words that 15·⌈Γ⌉ other users fill up to the cap Γ (about
    √2·Γ of them fill it): when the canary comes after those (most orders), its whole unit of l2 weight
    goes to the audited word, a shift of 1, the most a user can move one item (with the weighted policy it
    would be 1/sqrt(3)). The weighted policy's canary holds the audited word only (shift 1)."""
    # The default audit stays the policy Gaussian's (its canary is the hardest to place); DP-SIPS,
    # the run default since it scales out, is audited by ``dpsu_sips``.
    policy = policy or "policy-gaussian"
    cfg, params, claimed = _vocabulary_calibration(epsilon, delta, policy, sips_ratio, sips_admission)
    sigma = params.sigma * miscalibrate
    holders = _best_holders(params.threshold, sigma, runs, delta)
    if commons is None:
        commons = 2 if params.cap is not None else 0
    common_holders = 15 * math.ceil(params.cap or 0.0)
    items = ["word", *(f"common{j}" for j in range(commons))]
    rows, canary = _dpsu_dataset(holders, items, common_holders, repeats=3)
    out, inn = _dpsu_releases(
        rows,
        canary,
        "word",
        sigma=sigma,
        rho=params.threshold,
        cap=params.cap,
        max_contribution=params.max_contribution,
        runs=runs,
        noise=noise,
        rounds=tuple(dataclasses.replace(r, sigma=r.sigma * miscalibrate) for r in params.rounds),
    )
    setting = {
        **_level1_setting(cfg, params, epsilon, delta, policy, sigma, holders, runs),
        "canary": f"one user holding the audited word and {commons} words "
        + (f"that {common_holders} other users fill to the cap " if commons else "")
        + "(in 3 sentences)",
        "claim": "epsilon at delta of the level's events: Gaussian sigma_1 + (0, delta_0) threshold",
    }
    if params.rounds:
        ratio = cfg.sips_ratio if sips_ratio is None else sips_ratio
        setting.update(_sips_design(params, miscalibrate, ratio, sips_admission))
    if miscalibrate != 1.0:
        setting["miscalibrated_sigma_factor"] = miscalibrate
    return out, inn, claimed, delta, setting


def _vocabulary_calibration(
    epsilon: float, delta: float, policy: str, sips_ratio: float | None, sips_admission: float | None
) -> tuple[Any, Any, float]:
    """The run defaults (:func:`dpne_defaults`), DPNE level 1's parameters under them at the dpne
    share (``epsilon``, ``delta``) (:func:`~dpngram.mechanisms.dpsu.vocabulary_parameters`;
    ``sips_ratio`` None: the configured one) and the claim: the ε of the level's events at δ."""
    from dpngram.mechanisms.dpsu import vocabulary_parameters

    cfg = dpne_defaults()
    params = vocabulary_parameters(
        Budget(epsilon, delta),
        cfg.max_n,
        cfg.sigma_decay,
        cfg.max_contribution,
        threshold_delta=cfg.threshold_delta,
        policy=policy,  # type: ignore[arg-type]
        policy_cap=cfg.policy_cap,
        sips_rounds=cfg.sips_rounds,
        sips_ratio=cfg.sips_ratio if sips_ratio is None else sips_ratio,
        sips_admission=sips_admission,
    )
    return cfg, params, Accountant(params.events("dpne.k1")).total_epsilon(delta)


def _level1_setting(
    cfg: Any, params: Any, epsilon: float, delta: float, policy: str, sigma: float, holders: int, runs: int
) -> dict[str, Any]:
    """The start of :func:`audit_dpsu`'s setting: the dpne share, level 1's calibration and the
    canary's design (the bound expected from it, for one round)."""
    return {
        "dpne_share": [epsilon, delta],
        "policy": policy,
        "policy_cap_alpha": cfg.policy_cap if params.cap is not None else None,
        "threshold_delta_share": cfg.threshold_delta,
        "T": cfg.max_n,
        "sigma_decay": cfg.sigma_decay,
        "max_contribution": params.max_contribution,
        "sigma_1": sigma,
        "rho_1": params.threshold,
        "cap": params.cap,
        "other_holders": holders,
        "expected_bound_at_design": expected_threshold_bound(
            holders, 1.0, sigma, params.threshold, runs, delta
        ),
    }


def _sips_design(params: Any, miscalibrate: float, ratio: float, admission: float | None) -> dict[str, Any]:
    """What :func:`audit_dpsu`'s setting says of a DP-SIPS vocabulary: its rounds, budget ratio
    and admission; its canary holds the audited word only."""
    return {
        "sips_rounds": [
            {
                "sigma": r.sigma * miscalibrate,
                "rho": r.threshold,
                "threshold_delta": r.threshold_delta,
                "admit_floor": r.admit_floor,
            }
            for r in params.rounds
        ],
        "sips_ratio": ratio,
        "sips_admission": admission,
        "canary": "one user holding the audited word only (in 3 sentences)",
        "expected_bound_at_design": None,  # the design's one-round formula does not apply
    }


def audit_dpsu_weighted(runs: int, noise: NoiseSource, **kwargs: Any) -> Scores:
    """:func:`audit_dpsu` with the weighted policy (``dpsu_policy=weighted``)."""
    return audit_dpsu(runs, noise, policy="weighted", **kwargs)


def audit_dpsu_sips(runs: int, noise: NoiseSource, **kwargs: Any) -> Scores:
    """:func:`audit_dpsu` with DP-SIPS (``dpsu_policy=dp-sips``, the configured rounds and ratio):
    each run is a complete multi-round release; the canary holds the audited word only, so in every
    round in which the word is not yet released it moves the word's weight by 1. Plain DP-SIPS
    (admission off); ``dpsu_sips_admission`` audits the run default with admission."""
    return audit_dpsu(runs, noise, policy="dp-sips", **kwargs)


def audit_dpsu_sips_admission(runs: int, noise: NoiseSource, **kwargs: Any) -> Scores:
    """:func:`audit_dpsu_sips` with admission by the first round at the run defaults (the
    vocabulary's admission ratio and floor z; docs/dpne.md, "Admission by the first round"): one
    salt per run, round 2 only over the items whose round-1 noisy weight reached z sigma_1. The
    canary holds the audited word only: it moves the word's round-1 weight, hence its admission,
    and its round-2 weight when admitted, by 1 each; the claim is plain DP-SIPS's (the same
    events)."""
    ratio, floor = dpne_defaults().sips_plan(1)
    return audit_dpsu(runs, noise, policy="dp-sips", sips_ratio=ratio, sips_admission=floor, **kwargs)


def audit_dpsu_sips_public(
    runs: int,
    noise: NoiseSource,
    *,
    epsilon: float = 4.0,
    delta: float = 1e-5,
    unique: bool = False,
    sample_unheld: bool = True,
) -> Scores:
    """DP-SIPS with the vocabulary's public domain (``dpne_public_vocabulary``; docs/dpne.md, "The
    public domain of the vocabulary"), the run defaults otherwise. D: 4 public words that 80 users
    each hold alone (round 1 releases them, so round 2 has its public threshold rho_pub), 20
    further public words nobody holds, ``m`` users holding only the audited public word (``m``
    chosen before any run for round 2's sigma and rho_pub, :func:`_best_holders`; m = 0 with
    ``unique=True``: then in D the word is released only by the sampling of unheld public words),
    and 3 users with words of their own. The canary holds the audited word only.
    ``sample_unheld=False`` audits the deliberately broken variant without that sampling."""
    from dpngram.mechanisms.dpsu import PublicDomain, public_threshold

    cfg, params, claimed = _vocabulary_calibration(epsilon, delta, "dp-sips", None, None)
    commons = [f"common{j}" for j in range(4)]
    words = ["word", *commons, *(f"spare{j}" for j in range(20))]
    last = params.rounds[-1]
    rho_public = public_threshold(last.sigma, PublicDomain("p", len(words), cfg.eta), 1.0, len(commons))
    assert rho_public is not None
    holders = 0 if unique else _best_holders(rho_public, last.sigma, runs, delta)
    rows, canary = _public_domain_dataset(commons, holders)
    public = PublicDomain("audit_public_words_table", len(words), cfg.eta, sample_unheld=sample_unheld)
    out, inn = _dpsu_releases(
        rows,
        canary,
        "word",
        sigma=params.sigma,
        rho=params.threshold,
        cap=None,
        max_contribution=params.max_contribution,
        runs=runs,
        noise=noise,
        rounds=params.rounds,
        public=public,
        public_words=words,
    )
    setting = {
        "dpne_share": [epsilon, delta],
        "policy": "dp-sips",
        "sips_rounds": [
            {"sigma": r.sigma, "rho": r.threshold, "threshold_delta": r.threshold_delta}
            for r in params.rounds
        ],
        "sips_ratio": cfg.sips_ratio,
        "public_domain_words": len(words),
        "eta": cfg.eta,
        "rho_public_round_2": rho_public,
        "other_holders": holders,
        "canary": "one user holding the audited public word only (in 3 sentences)",
        "claim": "epsilon at delta of the level's events: Gaussian sigma_r + (0, delta_0r) per round",
    }
    if not sample_unheld:
        setting["broken_variant"] = "unheld public words are never released (must fail the audit)"
    return out, inn, claimed, delta, setting


def _public_domain_dataset(commons: list[str], holders: int) -> tuple[Rows, Rows]:
    """D of :func:`audit_dpsu_sips_public`: 80 users holding each word of ``commons`` alone,
    ``holders`` users holding only ``word``, 3 users with words of their own; the canary writes
    ``word`` in 3 sentences."""
    rows = [(f"c{j}_{i}", [w]) for j, w in enumerate(commons) for i in range(80)]
    rows += [(f"u{i}", ["word"]) for i in range(holders)]
    rows += [(f"o{i}", ["other", f"pad{i}"]) for i in range(3)]
    return rows, [("canary", ["word"]) for _ in range(3)]


def audit_dpne_level(
    runs: int, noise: NoiseSource, *, epsilon: float = 4.0, delta: float = 1e-5, k: int = 2
) -> Scores:
    """DPNE level k (k >= 2) with the run defaults: σ_k from
    :func:`~dpngram.mechanisms.dpne.level_sigmas` (T = 5, c = 1.2, threshold share 0.1), ρ_k from
    :func:`~dpngram.mechanisms.dpne.level_threshold` (η = 0.01, |S_{k-1}| = 40, |V_k| = 400: the
    candidate domain is fixed by earlier releases, so it is public here) and the policy Gaussian
    filling to Γ_k = ρ_k + α σ_k, the cap ``release_level`` uses. The canary holds the audited
    k-gram only (shift 1), written in 3 sentences."""
    from dpngram.mechanisms.dpne import LevelOutcome, level_sigmas, level_threshold
    from dpngram.mechanisms.dpsu import policy_fill_level

    cfg = dpne_defaults()
    sigma = level_sigmas(
        Budget(epsilon, delta), cfg.max_n, cfg.sigma_decay, threshold_delta=cfg.threshold_delta
    )[k]
    rho = level_threshold(sigma, cfg.eta, 40, 400)
    assert rho is not None
    # the policy Gaussian's fill (a single-round level; DP-SIPS's rounds are tested in
    # tests/test_dpsu_sips.py)
    cap = policy_fill_level("policy-gaussian", rho, sigma, cfg.policy_cap)
    # a level's own event is its Gaussian (no threshold δ, Thm. 2.1); the claim is its ε at the
    # Gaussians' share of δ
    gaussian_delta = (1.0 - cfg.threshold_delta) * delta
    level = LevelOutcome(k, 0, 0, 0, sigma=sigma, rho=rho, variant="exact", valid_count="exact")
    claimed = Accountant(level.events(f"dpne.k{k}")).total_epsilon(gaussian_delta)
    holders = _best_holders(rho, sigma, runs, gaussian_delta)
    # k-grams as items: the histogram SQL counts tokens, so each k-gram is one token "a_b"
    rows = [(f"u{i}", ["a_b"]) for i in range(holders)] + [(f"o{i}", ["c_d", f"e_{i}"]) for i in range(3)]
    canary = [("canary", ["a_b"]) for _ in range(3)]
    out, inn = _dpsu_releases(
        rows,
        canary,
        "a_b",
        sigma=sigma,
        rho=rho,
        cap=cap,
        max_contribution=cfg.max_contribution,
        runs=runs,
        noise=noise,
    )
    setting = {
        "dpne_share": [epsilon, delta],
        "policy": "policy-gaussian",
        "policy_cap_alpha": cfg.policy_cap,
        "threshold_delta_share": cfg.threshold_delta,
        "T": cfg.max_n,
        "sigma_decay": cfg.sigma_decay,
        "eta": cfg.eta,
        "k": k,
        "sigma_k": sigma,
        "rho_k": rho,
        "cap": cap,
        "other_holders": holders,
        "expected_bound_at_design": expected_threshold_bound(holders, 1.0, sigma, rho, runs, gaussian_delta),
        "canary": "one user holding the audited k-gram only (in 3 sentences)",
        "claim": "epsilon of the Gaussian sigma_k at the Gaussians' share (1 - 0.1) of delta",
    }
    return out, inn, claimed, gaussian_delta, setting


def audit_bayes(runs: int, noise: NoiseSource, *, epsilon: float = 2.0, delta: float = 1e-5) -> Scores:
    """The Bayesian trigram release (noisy logits) at the data-independent sensitivity bound."""
    from dpngram.config.sections import BayesConfig
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


def audit_lm_counts(
    runs: int, noise: NoiseSource, *, epsilon: float = 1.0, delta: float = 1e-5, clip: float | None = None
) -> Scores:
    """The noisy LM counts (stage ``lm_counts``): :func:`~dpngram.mechanisms.lm_counts.noisy_release`
    on the summed per-user count vectors (each count to the power ``lm_count_power``), each scaled
    to l2 norm at most C (``lm_count_clip``, the l2 sensitivity). The canary's vector has norm
    above C, so it is scaled to exactly C: the largest shift one user can make. Score: the
    projection of the noisy vector on the canary's direction (the most powerful test for Gaussian
    noise)."""
    from dpngram.config.sections import LmConfig
    from dpngram.mechanisms.lm_counts import noisy_release

    C = float(LmConfig().count_clip if clip is None else clip)
    power = float(LmConfig().count_power)
    size = 64  # coordinates of the count domain (orders 1..N together)

    def clipped(counts: dict[int, float]) -> np.ndarray:
        x = np.zeros(size)
        for j, c in counts.items():
            x[j] = c**power
        return x * min(1.0, C / float(np.linalg.norm(x)))

    base = [clipped({0: 3, 1: 1}), clipped({0: 1, 2: 2, 5: 1}), clipped({3: 4}), clipped({1: 1, 4: 1, 6: 2})]
    canary = clipped({j: float(1 + j % 3) for j in range(8, 20)})  # words nobody else uses
    direction = canary / np.linalg.norm(canary)
    scores = []
    calibration = None
    for users in (base, [*base, canary]):
        weighted = np.sum(users, axis=0)
        s = np.empty(runs)
        for i in range(runs):
            released, calibration = noisy_release(weighted, epsilon=epsilon, delta=delta, clip=C, noise=noise)
            s[i] = float(released @ direction)
        scores.append(s)
    assert calibration is not None
    setting = {
        "domain_size": size,
        "clip_l2": C,
        "count_power": power,
        "canary_shift_l2": float(np.linalg.norm(canary)),
        "sigma": calibration.sigma,
        "grid": calibration.grid,
        "snapped_sensitivity": calibration.snapped_sensitivity,
        "canary": "one user with 12 n-grams nobody else has, count vector scaled to l2 norm C",
        "claim": "the stage epsilon the Gaussian is calibrated for",
    }
    return scores[0], scores[1], epsilon, delta, setting


#: name -> (audit function, runs per dataset for the full audit (bench), for the fast one (tests))
AUDITS: dict[str, tuple[Callable[..., Scores], int, int]] = {
    "dpsu": (audit_dpsu, 6000, 100),
    "dpsu_weighted": (audit_dpsu_weighted, 6000, 100),
    "dpsu_sips": (audit_dpsu_sips, 6000, 100),
    "dpsu_sips_admission": (audit_dpsu_sips_admission, 6000, 100),
    "dpsu_sips_public": (audit_dpsu_sips_public, 3000, 100),
    "dpne_level": (audit_dpne_level, 6000, 100),
    BAYES.name: (audit_bayes, 20000, 2000),
    SYNTH.name: (audit_synth, 20000, 2000),
    LM_COUNTS.name: (audit_lm_counts, 20000, 2000),
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
