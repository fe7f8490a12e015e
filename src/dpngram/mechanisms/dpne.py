"""Differentially private n-gram extraction (DPNE): the k-gram levels k = 2..T.

Paper: Kim, Gopi, Kulkarni & Yekhanin (2021), "Differentially Private n-gram Extraction"
(Algorithm 1, Prop. 2.1/2.2, Theorem 2.1, §3.1) and its supplement (Algorithms 1-4, the scalable
variant). The vocabulary S_1 comes from :mod:`dpngram.mechanisms.dpsu` (step ``dpne.k1``); each
level is step ``dpne.k{k}`` (:mod:`dpngram.stages.dpne`, which also runs the DPSU baselines named
in :data:`BASELINES`). See ``docs/dpne.md`` for the derivations and every deviation.

Level k (Alg. 1, loop body), all heavy work in SQL over token ids:

* **Valid k-grams** V_k = (S_1 x S_{k-1}) n (S_{k-1} x S_1) (``pruning='both'``) or
  S_{k-1} x S_1 (``'single'``). A k-gram is keyed by ``left_id * 2^32 + right_id``: the ids of its
  left (k-1)-gram in S_{k-1} and of its right (k-1)-gram in S_{k-1} (both-side) or of its last
  token in S_1 (single-side). The key is unique because a k-gram determines both parts.
* **Pruning on positions** (Alg. 4, PruneInvalid): a k-gram occurrence is valid iff its parts
  were released, i.e. the positions where they start survived level k-1. Only surviving positions
  (``dpne_occ{k-1}``) are extended, so cost follows the released sets.
* **Histogram**: the shared DPSU SQL (distinct k-grams per user, at most Delta_k kept by salted
  hash, weight 1/sqrt(|U_i|), l2-sensitivity 1 per level).
* **Threshold** rho_k = sigma_k Phi^-1(1 - eta min{1, |S_{k-1}|/|V_k|}) (§2 "Controlling spurious
  n-grams"); rho_k does not affect privacy (Thm. 2.1), only the spurious rate (Prop. 2.2).
* **Exact variant** (Alg. 1): materialise V_k with weight 0 for k-grams nobody holds and
  threshold all of it. **Scalable variant** (supplement Alg. 1): threshold supp(H_k) only, then
  add B_k ~ Binomial(|V_k| - |supp(H_k)|, Phi(-rho_k/sigma_k)) distinct k-grams drawn uniformly
  from V_k minus supp(H_k). Both have the same output distribution (docs/dpne.md).
* |V_k| is computed exactly from S_{k-1} and S_1 (post-processing of DP outputs);
  EstimateValidKgrams (supplement Alg. 2) is available for comparison (``valid_count='estimate'``).

Privacy: each level is a Gaussian mechanism with sensitivity 1 and noise sigma_k; with the DPSU
(0, delta/2) event and 1/sigma*^2 = sum 1/sigma_k^2, the run is (eps, delta)-DP (Thm. 2.1).
|supp(H_k)|, B_k and the weights are private: they are never reported, logged or returned.

The level tables and the valid k-gram domain (counting, indexing and sampling V_k) are in
:mod:`dpngram.mechanisms.dpne_domain`; their names are imported here for the stage.

Why one module (over 600 lines): a level's release is one algorithm (candidates, V_k, the exact
and scalable variants, DP-SIPS rounds with admission) over shared level inputs; its domain
helpers already live in :mod:`dpngram.mechanisms.dpne_domain`.

Owns: the DPNE level algorithm (threshold, exact and scalable variants, DP-SIPS rounds), a level's
restore from released files.
Imports: dpngram.mechanisms (dpne_domain, dpsu, dpsu_rounds), dpngram.engines, dpngram.core; numpy,
scipy, pyarrow.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scipy import stats

from dpngram.core.accounting import PrivacyEvent, dpne_sigmas, reserve_gaussian
from dpngram.core.budget import Budget
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.mechanisms.dpne_domain import (
    KEY_SHIFT,
    LevelInputs,
    Pruning,
    ValidKgramIndex,
    build_candidates,
    check_k,
    drop_tables,
    estimate_valid_kgrams,
    level_size,
    level_table,
    occurrence_table,
    sample_spurious,
    valid_kgram_index,
    valid_sides,
)
from dpngram.mechanisms.dpsu import (
    Policy,
    SipsDraw,
    check_policy,
    policy_fill_level,
    secret_histogram,
    sips_rounds_release,
    threshold_histogram,
)
from dpngram.mechanisms.dpsu_rounds import SipsRound, sips_fractions, sips_sigmas, with_admission

BASELINES = ("dpsu-all", "dpsu-even", "dpsu-single")


KGRAM_COLUMNS = {"k": pa.int32(), "ngram": pa.string()}


Variant = Literal["auto", "exact", "scalable"]


# ----------------------------------------------------------------------------------------------
# Public parameters
# ----------------------------------------------------------------------------------------------
def level_sigmas(
    budget: Budget,
    max_n: int,
    sigma_decay: float,
    *,
    threshold_delta: float = 0.5,
    dpsu_vocabulary: bool = True,
    new_words_reserve: float = 0.0,
) -> dict[int, float]:
    """{k: sigma_k} for the levels that draw Gaussian noise, from the dpne ``budget`` (Thm. 2.1,
    sigma_k = c sigma_{k-1}).

    With a DPSU vocabulary, levels 1..T compose to sigma* at ``(1 - threshold_delta) * delta`` and
    the vocabulary's threshold takes the rest. With a TrieHH vocabulary no DPSU level runs: levels
    2..T alone compose to sigma* at the whole delta (level thresholds cost no delta, Thm. 2.1), so
    nothing is reserved for a level that does not run. ``new_words_reserve`` f > 0 (the vocabulary's
    new-words round paid by every level, ``dpsu_new_words_funding`` 'dpne') scales every level's
    sigma so that the levels and a round at sigma_1 / sqrt(f) compose to sigma*
    (:func:`dpngram.core.accounting.reserve_gaussian`; the vocabulary applies the same factor)."""
    epsilon, delta = budget
    if dpsu_vocabulary:
        sigmas = dpne_sigmas(epsilon, delta, max_n, sigma_decay, gaussian_delta=1.0 - threshold_delta)[1]
        if new_words_reserve:
            sigmas = reserve_gaussian(sigmas, new_words_reserve)[0]
        return dict(enumerate(sigmas, start=1))
    if max_n < 2:
        return {}
    sigmas = dpne_sigmas(epsilon, delta, max_n - 1, sigma_decay, gaussian_delta=1.0)[1]
    return dict(enumerate(sigmas, start=2))


def level_threshold(sigma: float, eta: float, previous_size: int, valid_size: int) -> float | None:
    """rho_k = sigma_k Phi^-1(1 - eta min{1, |S_{k-1}| / |V_k|}) (DPNE §2). None if V_k is empty.

    Computed as ``sigma * isf(eta * min(...))`` for accuracy when the tail is tiny."""
    if valid_size <= 0:
        return None
    if not 0 < eta < 1:
        raise ConfigError(f"eta: must be in (0, 1) (got {eta})")
    tail = eta * min(1.0, previous_size / valid_size)
    if tail <= 0:  # S_{k-1} empty: V_k is empty too; kept for completeness
        return math.inf
    return float(sigma * stats.norm.isf(tail))


# ----------------------------------------------------------------------------------------------
# One level
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LevelOutcome:
    """Public facts about one level (safe to report): sizes of released/public sets, parameters."""

    k: int
    released: int
    valid: int
    previous: int
    sigma: float
    rho: float | None
    variant: str
    valid_count: str
    rounds: tuple[SipsRound, ...] = ()  # DP-SIPS: each round's (sigma_r, rho_r); public

    def events(self, stage: str) -> list[PrivacyEvent]:
        """The level's privacy events: one Gaussian sigma_k, or with DP-SIPS one per round
        (sigma_r = sigma_k / sqrt(f_r), composing exactly to sigma_k), so the ledger lists what
        was drawn. Privacy map: Gaussians of sensitivity 1 (each user's k-grams are weighted to
        l2-norm 1), composing with the other levels to DPNE Thm. 2.1's sigma* (docs/dpne.md,
        docs/accounting.md); the threshold's delta is charged once, at level 1."""
        if self.rounds:
            return [
                PrivacyEvent(stage=stage, mechanism="gaussian", sigma=r.sigma, note=f"DP-SIPS round {i}")
                for i, r in enumerate(self.rounds, start=1)
            ]
        return [PrivacyEvent(stage=stage, mechanism="gaussian", sigma=self.sigma)]

    def report(self) -> dict[str, Any]:
        sips = {"sips_rounds": [{"sigma": r.sigma, "rho": r.threshold} for r in self.rounds]}
        return {
            **(sips if self.rounds else {}),
            "k": self.k,
            "released": self.released,
            "valid": self.valid,
            "previous_released": self.previous,
            "sigma": self.sigma,
            "rho": self.rho,
            "variant": self.variant,
            "valid_count": self.valid_count,
        }


def prepare_level(
    wh: Engine,
    schema: str,
    k: int,
    *,
    pruning: Pruning,
    max_contribution: int,
    noise: NoiseSource,
    valid_count: Literal["exact", "estimate"] = "exact",
    sampling_probability: float = 0.01,
    cap: Callable[[int, int], float | None] | None = None,
    build_histogram: bool = True,
) -> LevelInputs:
    """Level k up to the noisy step: valid-gram sides, |V_k| (exact, or supplement Alg. 2),
    the pruned candidates and the bounded, weighted histogram H_k (Alg. 1 / supplement Alg. 1
    before "Add noise"). Needs ``dpne_s{j}`` for j < k, ``dpne_users`` and, for k > 2,
    ``dpne_occ{k-1}`` (``dpne_occ1`` is built on first use by single-side pruning).
    ``cap(|S_{k-1}|, |V_k|)`` gives the policy Gaussian's fill level (None: weighted policy); it
    sees released set sizes only. ``build_histogram=False`` stops before the histogram (DP-SIPS
    builds one per round from ``source``)."""
    check_k(k)
    if pruning not in ("both", "single"):
        raise ConfigError(f"pruning: must be 'both' or 'single' (got {pruning!r})")
    previous = level_size(wh, schema, k - 1)
    left, right = valid_sides(wh, schema, k, pruning)
    if valid_count == "exact":
        n_valid = int(
            wh.fetch_scalar(load_sql("dpne/valid_count", schema=schema, left_side=left, right_side=right))
        )
    elif valid_count == "estimate":
        n_valid = estimate_valid_kgrams(wh, schema, k, pruning, sampling_probability, noise)
    else:
        raise ConfigError(f"valid_count: must be 'exact' or 'estimate' (got {valid_count!r})")
    candidates = build_candidates(wh, schema, k, pruning)
    histogram, source = f"dpne_hist{k}", f"dpne_source{k}"
    wh.execute(load_sql("dpne/level_source", schema=schema, target=source, candidates=candidates))
    if build_histogram:
        fill = cap(previous, n_valid) if cap is not None else None
        secret_histogram(
            wh, schema, source, histogram, max_contribution=max_contribution, cap=fill, noise=noise
        )
    return LevelInputs(
        k=k,
        pruning=pruning,
        left=left,
        right=right,
        candidates=candidates,
        source=source,
        histogram=histogram,
        valid=n_valid,
        previous=previous,
    )


def draw_level_keys(
    wh: Engine,
    schema: str,
    inputs: LevelInputs,
    *,
    sigma: float,
    rho: float | None,
    variant: Literal["exact", "scalable"],
    noise: NoiseSource,
) -> np.ndarray:
    """The noisy step of level k: keys of the released k-grams (unsorted; real and spurious mixed).

    * exact (Alg. 1): threshold every valid k-gram, weight 0 where nobody holds it;
    * scalable (supplement Alg. 1): threshold supp(H_k), then add B_k ~ Binomial(|V_k| -
      |supp(H_k)|, Phi(-rho/sigma)) distinct k-grams drawn uniformly from V_k minus supp(H_k).

    Deviation: the supplement's sampler draws x in S_1, w in S_{k-1} and (as printed) adds w; the
    candidate must be the k-gram x.w, and we draw it directly and exactly uniformly from V_k via
    :class:`ValidKgramIndex` instead of rejecting invalid pairs (same distribution, no wasted
    draws). The internal values |supp(H_k)| and B_k never leave this function."""
    if rho is None:  # no valid k-grams: nothing can be released (and nobody holds one)
        return np.empty(0, dtype=np.int64)
    if variant == "exact":
        kept = threshold_histogram(
            wh,
            load_sql(
                "dpne/valid_weighted",
                schema=schema,
                left_side=inputs.left,
                right_side=inputs.right,
                histogram=inputs.histogram,
            ),
            sigma=sigma,
            threshold=rho,
            noise=noise,
        )
        return kept.column("item").to_numpy().astype(np.int64)
    if variant != "scalable":
        raise ConfigError(f"dpne_variant: must be 'exact' or 'scalable' here (got {variant!r})")
    kept = threshold_histogram(
        wh,
        load_sql("dpsu/histogram_scan", schema=schema, histogram=inputs.histogram),
        sigma=sigma,
        threshold=rho,
        noise=noise,
    )
    support = int(wh.fetch_scalar(load_sql("dpne/support_size", schema=schema, histogram=inputs.histogram)))
    index = valid_kgram_index(wh, schema, inputs)
    # With the exact |V_k| the two agree; an estimated |V_k| (Alg. 2) only sets B_k's range.
    spurious_n = noise.binomial(max(0, inputs.valid - support), float(stats.norm.sf(rho / sigma)))
    spurious_n = min(spurious_n, index.size - support)  # binds only for an over-estimated |V_k|
    spurious = sample_spurious(wh, schema, index, inputs.histogram, spurious_n, noise, support)
    return np.concatenate([kept.column("item").to_numpy().astype(np.int64), spurious])


def sips_level_rounds(
    sigma: float,
    eta: float,
    previous: int,
    valid: int,
    rounds: int,
    ratio: float,
    admission: float | None = None,
) -> tuple[SipsRound, ...]:
    """The DP-SIPS rounds of level k: sigma_r = sigma_k / sqrt(f_r) and
    rho_r = sigma_r Phi^-1(1 - f_r eta min{1, |S_{k-1}|/|V_k|}): a valid k-gram nobody holds passes
    round r with probability f_r eta min{...} if not released before, so over all rounds with
    probability <= eta min{...} (union bound) and Prop. 2.2's bound on the expected number of
    spurious k-grams holds unchanged (docs/dpne.md, "DP-SIPS"). rounds = 1 is :func:`level_threshold`."""
    return with_admission(
        tuple(
            SipsRound(sigma=s, threshold=level_threshold(s, eta * f, previous, valid))
            for s, f in zip(sips_sigmas(sigma, rounds, ratio), sips_fractions(rounds, ratio), strict=True)
        ),
        admission,
    )


def _release_level_sips(
    wh: Engine,
    schema: str,
    k: int,
    *,
    sigma: float,
    eta: float,
    max_contribution: int,
    pruning: Pruning,
    variant: Variant,
    exact_max_valid: int,
    noise: NoiseSource,
    valid_count: Literal["exact", "estimate"],
    sampling_probability: float,
    rounds: int,
    ratio: float,
    admission: float | None = None,
) -> LevelOutcome:
    """Level k by DP-SIPS (docs/dpne.md, "DP-SIPS"): the pruned candidates and V_k as for the other
    policies, then R rounds (:func:`dpngram.mechanisms.dpsu.sips_rounds_release`), each a weighted
    histogram of the users' valid k-grams not released by earlier rounds, thresholded at
    (sigma_r, rho_r) (:func:`sips_level_rounds`) by :func:`_sips_level_draw`."""
    plan_check = sips_fractions(rounds, ratio)  # validate before any work
    del plan_check
    inputs = prepare_level(
        wh,
        schema,
        k,
        pruning=pruning,
        max_contribution=max_contribution,
        noise=noise,
        valid_count=valid_count,
        sampling_probability=sampling_probability,
        build_histogram=False,
    )
    plan = sips_level_rounds(sigma, eta, inputs.previous, inputs.valid, rounds, ratio, admission)
    chosen = choose_variant(variant, inputs.valid, exact_max_valid)
    keys = _sips_level_keys(
        wh, schema, inputs, plan, chosen, max_contribution=max_contribution, noise=noise, admission=admission
    )
    return _install_and_report(
        wh,
        schema,
        inputs,
        pruning,
        keys,
        sigma=sigma,
        rho=plan[0].threshold,
        variant=chosen,
        valid_count=valid_count,
        rounds=plan,
    )


def _sips_level_keys(
    wh: Engine,
    schema: str,
    inputs: LevelInputs,
    plan: tuple[SipsRound, ...],
    chosen: Literal["exact", "scalable"],
    *,
    max_contribution: int,
    noise: NoiseSource,
    admission: float | None,
) -> np.ndarray:
    """The keys level k's DP-SIPS rounds release, all rounds together (unsorted): the rounds of
    :func:`dpngram.mechanisms.dpsu.sips_rounds_release` over the level's source, each drawn by
    :func:`_sips_level_draw`."""
    released = sips_rounds_release(
        wh,
        schema,
        inputs.source,
        f"dpne_sips{inputs.k}",
        rounds=plan,
        max_contribution=max_contribution,
        noise=noise,
        draw=_sips_level_draw(wh, schema, inputs, chosen, noise),
        label=f"level {inputs.k}",
        # With admission, round 2 reads each user's round-1 list (one GROUP BY over the level's
        # candidates instead of two; the same histograms, tests/test_dpsu_sips.py).
        per_user_lists=admission is not None,
    )
    return (
        np.concatenate([a.to_numpy(zero_copy_only=False) for a in released])
        if released
        else np.empty(0, dtype=np.int64)
    )


def _sips_level_draw(
    wh: Engine, schema: str, inputs: LevelInputs, chosen: Literal["exact", "scalable"], noise: NoiseSource
) -> SipsDraw:
    """The draw of each DP-SIPS round of level k. Round r treats every not-yet-released valid
    k-gram alike: the exact variant thresholds V_k minus the released ones (weight 0 where nobody
    holds it in this round; :func:`_sips_exact_keys`); the scalable one thresholds supp(H_r), then
    adds Binomial(|V_k| - |released| - |supp(H_r)|, Phi(-rho_r/sigma_r)) k-grams drawn uniformly
    from V_k minus (supp(H_r) and the released ones) (:func:`_sips_scalable_keys`). Round 1 also
    collects the admitted k-grams when asked."""
    index: list[ValidKgramIndex] = []  # built by the scalable variant's first round, then reused

    def draw(
        histogram: str, released: str | None, count: int, rnd: SipsRound, admitted: list[pa.Array] | None
    ) -> pa.Array:
        if rnd.threshold is None:  # V_k empty: nothing can be released
            return pa.array([], type=pa.int64())
        admit = {"admit_floor": rnd.admit_floor, "admitted": admitted} if admitted is not None else {}
        if chosen == "exact":
            return _sips_exact_keys(wh, schema, inputs, histogram, released, rnd, noise, admit)
        return _sips_scalable_keys(wh, schema, inputs, index, histogram, released, count, rnd, noise, admit)

    return draw


def _sips_exact_keys(
    wh: Engine,
    schema: str,
    inputs: LevelInputs,
    histogram: str,
    released: str | None,
    rnd: SipsRound,
    noise: NoiseSource,
    admit: dict[str, Any],
) -> pa.Array:
    """Exact variant, round r: threshold every valid k-gram not released yet, with weight 0 where
    nobody holds it this round (``dpne/valid_weighted``; from round 2 ``dpsu/sips_valid_weighted``)."""
    assert rnd.threshold is not None
    kept = threshold_histogram(
        wh,
        load_sql(
            "dpne/valid_weighted" if released is None else "dpsu/sips_valid_weighted",
            schema=schema,
            left_side=inputs.left,
            right_side=inputs.right,
            histogram=histogram,
            **({} if released is None else {"released": released}),
        ),
        sigma=rnd.sigma,
        threshold=rnd.threshold,
        noise=noise,
        **admit,
    )
    return pa.array(kept.column("item").to_numpy().astype(np.int64))


def _sips_scalable_keys(
    wh: Engine,
    schema: str,
    inputs: LevelInputs,
    index: list[ValidKgramIndex],
    histogram: str,
    released: str | None,
    count: int,
    rnd: SipsRound,
    noise: NoiseSource,
    admit: dict[str, Any],
) -> pa.Array:
    """Scalable variant, round r: threshold supp(H_r), then add Binomial(|V_k| - |released| -
    |supp(H_r)|, Phi(-rho_r/sigma_r)) k-grams drawn uniformly from V_k minus supp(H_r) and the
    ``count`` released ones. |supp(H_r)| and the binomial draw never leave this function.
    ``index`` holds the level's :class:`ValidKgramIndex` once built (here, on first use)."""
    assert rnd.threshold is not None
    kept = threshold_histogram(
        wh,
        load_sql("dpsu/histogram_scan", schema=schema, histogram=histogram),
        sigma=rnd.sigma,
        threshold=rnd.threshold,
        noise=noise,
        **admit,
    )
    support = int(wh.fetch_scalar(load_sql("dpne/support_size", schema=schema, histogram=histogram)))
    if not index:
        index.append(valid_kgram_index(wh, schema, inputs))
    free = index[0].size - support - count  # |V_k minus (supp(H_r) and the released)|
    tail = float(stats.norm.sf(rnd.threshold / rnd.sigma))
    spurious_n = noise.binomial(max(0, inputs.valid - count - support), tail)
    spurious_n = min(spurious_n, max(0, free))  # binds only for an over-estimated |V_k|
    exclude = _spurious_exclusion(wh, schema, histogram, released)
    try:
        spurious = sample_spurious(wh, schema, index[0], exclude, spurious_n, noise, support + count)
    finally:
        if exclude != histogram:
            drop_tables(wh, schema, exclude)
    return pa.array(np.concatenate([kept.column("item").to_numpy().astype(np.int64), spurious]))


def _spurious_exclusion(wh: Engine, schema: str, histogram: str, released: str | None) -> str:
    """The table of k-grams the spurious sample avoids: supp(H_r) itself in round 1, from round 2
    supp(H_r) and the released k-grams (``dpsu/sips_exclusion``, built here; the caller drops it)."""
    if released is None:
        return histogram
    exclude = f"{histogram}_exclude"
    wh.execute(
        load_sql(
            "dpsu/sips_exclusion",
            schema=schema,
            target=exclude,
            histogram=histogram,
            released=released,
        )
    )
    return exclude


def choose_variant(variant: Variant, valid: int, exact_max_valid: int) -> Literal["exact", "scalable"]:
    """'auto' materialises V_k (exact) when |V_k| <= exact_max_valid, else samples it (scalable)."""
    if variant not in ("auto", "exact", "scalable"):
        raise ConfigError(f"dpne_variant: must be 'auto', 'exact' or 'scalable' (got {variant!r})")
    if variant != "auto":
        return variant
    return "exact" if valid <= exact_max_valid else "scalable"


def release_level(
    wh: Engine,
    schema: str,
    k: int,
    *,
    sigma: float,
    eta: float,
    max_contribution: int,
    pruning: Pruning,
    variant: Variant,
    exact_max_valid: int,
    noise: NoiseSource,
    valid_count: Literal["exact", "estimate"] = "exact",
    sampling_probability: float = 0.01,
    policy: Policy = "weighted",
    policy_cap: float = 2.0,
    sips_rounds: int = 1,
    sips_ratio: float = 1.0,
    sips_admission: float | None = None,
) -> LevelOutcome:
    """DPNE level k (Alg. 1 loop body; supplement Alg. 1 for the scalable variant).

    ``policy`` builds H_k with the weighted or the policy Gaussian (fill level rho_k + policy_cap
    sigma_k; :mod:`dpngram.mechanisms.dpsu`): either has l2-sensitivity 1 over V_k, so sigma_k
    and the privacy argument are unchanged. Needs ``dpne_s{j}`` for j < k and ``dpne_occ{k-1}`` in
    ``schema``; writes ``dpne_s{k}`` and ``dpne_occ{k}`` and drops the private candidates and
    histogram. ``policy='dp-sips'`` releases the level in ``sips_rounds`` rounds
    (:func:`_release_level_sips`), whose Gaussians compose exactly to sigma_k.

    Over 60 lines: the signature is the level's 18 parameters and the DP-SIPS branch hands them
    on; the rest is the level's recipe in order (prepare, threshold, draw, install)."""
    choose_variant(variant, 0, exact_max_valid)  # validate before any work
    check_policy(policy)
    if policy == "dp-sips":
        return _release_level_sips(
            wh,
            schema,
            k,
            sigma=sigma,
            eta=eta,
            max_contribution=max_contribution,
            pruning=pruning,
            variant=variant,
            exact_max_valid=exact_max_valid,
            noise=noise,
            valid_count=valid_count,
            sampling_probability=sampling_probability,
            rounds=sips_rounds,
            ratio=sips_ratio,
            admission=sips_admission,
        )

    inputs = prepare_level(
        wh,
        schema,
        k,
        pruning=pruning,
        max_contribution=max_contribution,
        noise=noise,
        valid_count=valid_count,
        sampling_probability=sampling_probability,
        cap=_level_fill_level(sigma, eta, policy, policy_cap),
    )
    rho = level_threshold(sigma, eta, inputs.previous, inputs.valid)
    chosen = choose_variant(variant, inputs.valid, exact_max_valid)
    keys = draw_level_keys(wh, schema, inputs, sigma=sigma, rho=rho, variant=chosen, noise=noise)
    return _install_and_report(
        wh, schema, inputs, pruning, keys, sigma=sigma, rho=rho, variant=chosen, valid_count=valid_count
    )


def _level_fill_level(
    sigma: float, eta: float, policy: Policy, policy_cap: float
) -> Callable[[int, int], float | None]:
    """``cap(|S_{k-1}|, |V_k|)`` for :func:`prepare_level`: the policy Gaussian's fill level
    rho_k + policy_cap sigma_k (None for the weighted policy, or when V_k is empty)."""

    def cap(previous: int, valid: int) -> float | None:
        rho = level_threshold(sigma, eta, previous, valid)
        return None if rho is None else policy_fill_level(policy, rho, sigma, policy_cap)

    return cap


def _install_and_report(
    wh: Engine,
    schema: str,
    inputs: LevelInputs,
    pruning: Pruning,
    keys: np.ndarray,
    *,
    sigma: float,
    rho: float | None,
    variant: str,
    valid_count: str,
    rounds: tuple[SipsRound, ...] = (),
) -> LevelOutcome:
    """The end of level k after the noisy step: S_k and its positions from the released ``keys``
    (post-processing), the level's private inputs dropped, and its public facts."""
    k = inputs.k
    released = _install_level(wh, schema, k, pruning, keys, inputs.candidates)
    drop_level_inputs(wh, schema, inputs)
    if k > 2:  # level k+1 extends level-k positions (and level-1 ones, single-side) only
        drop_tables(wh, schema, occurrence_table(k - 1))
    return LevelOutcome(
        k=k,
        released=released,
        valid=inputs.valid,
        previous=inputs.previous,
        sigma=sigma,
        rho=rho,
        variant=variant,
        valid_count=valid_count,
        rounds=rounds,
    )


def drop_level_inputs(wh: Engine, schema: str, inputs: LevelInputs) -> None:
    """Drop a level's private working tables (candidates, histogram, views)."""
    drop_tables(wh, schema, inputs.source, inputs.histogram, inputs.candidates, inputs.left, inputs.right)


def _install_level(
    wh: Engine, schema: str, k: int, pruning: Pruning, keys: np.ndarray, candidates: str
) -> int:
    """S_k level table from released keys, then its surviving positions dpne_occ{k}."""
    keys = np.sort(np.asarray(keys, dtype=np.int64))
    table = pa.table(
        {
            "item": keys,
            "l": (keys >> KEY_SHIFT).astype(np.int32),
            "r": (keys & ((1 << KEY_SHIFT) - 1)).astype(np.int32),
        }
    )
    view = "dpne_released_keys"
    with wh.registered(**{view: table}):
        wh.execute(
            load_sql(
                "dpne/level_table",
                schema=schema,
                target=level_table(k),
                released=view,
                previous=level_table(k - 1),
                right_level=level_table(k - 1) if pruning == "both" else level_table(1),
                unigrams=level_table(1),
            )
        )
    size = level_size(wh, schema, k)
    if size != keys.size:
        raise RuntimeError(f"level {k}: released keys do not resolve to n-grams (internal error)")
    wh.execute(
        load_sql(
            "dpne/occurrences",
            schema=schema,
            target=occurrence_table(k),
            candidates=candidates,
            level=level_table(k),
        )
    )
    return size


def _split_released(path: Path, k: int, right_start: int) -> pa.Table:
    """(left_text, right_text) of every released k-gram in ``path``: its first k-1 tokens and its
    tokens from 0-based ``right_start`` on (released keys only: post-processing of a DP output)."""
    import pyarrow.compute as pc

    tokens = pc.split_pattern(pq.read_table(path, columns=["ngram"]).column("ngram"), " ")
    return pa.table(
        {
            "left_text": pc.binary_join(pc.list_slice(tokens, 0, k - 1), " "),
            "right_text": pc.binary_join(pc.list_slice(tokens, right_start, k), " "),
        }
    )


def restore_level(wh: Engine, schema: str, k: int, pruning: Pruning, path: Path) -> int:
    """Rebuild ``dpne_s{k}``/``dpne_occ{k}`` from a released level file (post-processing of DP
    output + the private sentences; no noise, no spend). Needs level k-1's tables."""
    view = "dpne_released_parts"
    with wh.registered(**{view: _split_released(path, k, 1 if pruning == "both" else k - 1)}):
        cols = wh.fetch_numpy(
            load_sql(
                "dpne/level_restore",
                schema=schema,
                released=view,
                previous=level_table(k - 1),
                right_level=level_table(k - 1) if pruning == "both" else level_table(1),
            )
        )
    expected = pq.ParquetFile(path).metadata.num_rows
    if cols["item"].size != expected:
        raise RuntimeError(f"cannot restore level {k} from {path.name}: it does not match level {k - 1}")
    candidates = build_candidates(wh, schema, k, pruning)
    size = _install_level(wh, schema, k, pruning, np.asarray(cols["item"]), candidates)
    drop_tables(wh, schema, candidates)
    return size


def file_rows(path: Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows
