"""Differentially private set union (DPSU), weighted or policy Gaussian: the vocabulary S_1.

Papers: Gopi, Gulhane, Kulkarni, Shen, Shokouhi & Yekhanin (2020), "Differentially private set
union" (GGK+20); DPNE (Kim, Gopi, Kulkarni & Yekhanin 2021) Algorithm 1 line 1, Theorem 2.1, and
its supplement, Algorithm 5.

Mechanism (supplement Alg. 5), run entirely in SQL except the noisy threshold:

1. every user's DISTINCT items U_i (``sql/dpsu/histogram.sql``);
2. contribution bound: if ``|U_i| > Delta`` keep ``Delta`` of them. The paper picks a uniformly
   random subset; we keep the ``Delta`` items with the smallest ``hash(item, salt)`` for a secret
   per-run salt from :meth:`NoiseSource.selection_salt`. Any selection rule that depends only on the user's
   own items (and data-independent randomness) keeps the sensitivity bound below, which is all the
   privacy proof uses; the salted hash also makes the subset look random to an analyst;
3. weight ``1/sqrt(|U_i|)`` per kept item, so each user's contribution vector has l2 norm
   ``sqrt(|U_i| * 1/|U_i|) = 1``: the histogram has l2-sensitivity 1;
4. release the items with ``H[u] + N(0, sigma^2) > rho``, streaming the histogram out of DuckDB in
   Arrow record batches (:func:`threshold_histogram`). Items no user holds are never in the
   histogram and so never released (DPNE Prop. 2.2: no spurious 1-grams).

Privacy (GGK+20 Thm. 5.1 / DPNE Thm. 2.1): with ``rho = max_{1<=t<=Delta} 1/sqrt(t) +
sigma * Phi^-1((1 - delta_0)^(1/t))`` (:func:`dpngram.core.accounting.dpsu_threshold`) the release
is a Gaussian mechanism (sensitivity 1, noise sigma) composed with a (0, delta_0) event: delta_0
bounds the probability that an item held only by the added/removed user crosses the threshold.

Policy Gaussian (GGK+20 §5, ``policy='policy-gaussian'``): instead of step 3, users are visited
one after the other in a secret random order (a salted hash of the user id), and each user adds
``P(g)`` to its kept items, where ``g = (cap - H)_+`` on those items and ``P`` projects onto the
unit l2 ball: weight goes to the items still below ``cap = rho + alpha*sigma`` instead of piling
onto items far above the threshold. In ``y = cap - H`` coordinates a user's update is the
proximal map of the convex function ``||y_+||_2`` (identity off the user's items), hence
non-expansive; adding a user therefore changes the final histogram by at most its own update,
norm <= 1, whatever its position in the order: l2-sensitivity 1 as for the weighted policy, and the
same threshold rho (an item held only by the added user gets at most ``1/sqrt(t)`` of its
``t`` new items). Derivation: docs/dpne.md, "Policy Gaussian". The update is sequential, so it
runs on the driver, compiled (:mod:`dpngram.mechanisms.policy_kernel`), over users streamed in
visiting order, holding one float per item of the support.

DP-SIPS (Swanberg, Desfontaines & Haney 2023, ``policy='dp-sips'``): R rounds of the weighted
policy, round r over the items not released by rounds < r (an anti-join in SQL) with noise
``sigma / sqrt(f_r)`` (sum_r f_r = 1), so the rounds compose exactly to one Gaussian of ``sigma``;
the threshold delta is split over the rounds (:func:`sips_release`, :func:`sips_rounds_release`;
the rounds' public parameters, :class:`SipsRound`, are in :mod:`dpngram.mechanisms.dpsu_rounds`).
Only histograms and released keys reach the driver, so it scales out like the weighted policy.
Derivation: docs/dpne.md, "DP-SIPS". The vocabulary's public domain (:class:`PublicDomain`,
:func:`public_domain_draw`): docs/dpne.md, "The public domain of the vocabulary".

Why one module (over 600 lines): DP-SIPS's rounds, their admission and the public domain share
one histogram SQL, one thresholding rule and one set of release parameters; the DPNE levels and
the audit call them as one API, and splitting would only move the shared helpers apart. The policy
Gaussian's sequential update and the secret histogram live in :mod:`dpngram.mechanisms.dpsu_policy`
(re-exported here).

Owns: the DPSU release over any ``(user_id, item)`` relation with any policy, the vocabulary
S_1 and its parameters, writing released keys (:func:`write_keys_parquet`).
Imports: dpngram.mechanisms (dpsu_policy, dpsu_rounds; policy_kernel lazily), dpngram.engines,
dpngram.core; numpy, pyarrow.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dpngram.core.accounting import PrivacyEvent, dpne_sigmas, dpsu_threshold
from dpngram.core.budget import Budget
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql, safe_identifier
from dpngram.mechanisms.dpsu_policy import (
    Policy,
    check_policy,
    policy_fill_level,
    secret_histogram,
)
from dpngram.mechanisms.dpsu_policy import dpsu_histogram as dpsu_histogram  # re-exported
from dpngram.mechanisms.dpsu_rounds import SipsRound, sips_vocabulary_rounds

VOCABULARY_STAGE = "dpne.k1"


VOCABULARY_TABLE = "dpne_s1_items"  # released S_1 (item column), private schema but DP output


BATCH_ROWS = 1 << 20


@dataclass(frozen=True)
class DpsuParameters:
    """Public parameters of one DPSU release (all data-independent). ``cap`` is the policy
    Gaussian's fill level (None for the weighted policy)."""

    sigma: float
    threshold: float
    max_contribution: int
    threshold_delta: float
    policy: Policy = "weighted"
    cap: float | None = None
    rounds: tuple[SipsRound, ...] = ()

    def events(self, stage: str) -> list[PrivacyEvent]:
        """Gaussian (sensitivity 1) + the (0, delta_0) threshold event (DPNE Thm. 2.1 proof).
        DP-SIPS: one Gaussian sigma_r and one (0, delta_0r) event per round; the Gaussians compose
        exactly to ``sigma`` and the deltas add up to ``threshold_delta`` (docs/dpne.md, "DP-SIPS")."""
        if self.rounds:
            return [
                event
                for r, rnd in enumerate(self.rounds, start=1)
                for event in (
                    PrivacyEvent(
                        stage=stage, mechanism="gaussian", sigma=rnd.sigma, note=f"DP-SIPS round {r}"
                    ),
                    PrivacyEvent(
                        stage=stage,
                        mechanism="approx",
                        epsilon=0.0,
                        delta=rnd.threshold_delta,
                        note=f"DPSU threshold, DP-SIPS round {r}",
                    ),
                )
            ]
        return [
            PrivacyEvent(stage=stage, mechanism="gaussian", sigma=self.sigma),
            PrivacyEvent(
                stage=stage,
                mechanism="approx",
                epsilon=0.0,
                delta=self.threshold_delta,
                note="DPSU threshold",
            ),
        ]


def vocabulary_parameters(
    budget: Budget,
    max_n: int,
    sigma_decay: float,
    max_contribution: int,
    *,
    threshold_delta: float = 0.5,
    policy: Policy = "weighted",
    policy_cap: float = 2.0,
    sips_rounds: int = 1,
    sips_ratio: float = 1.0,
    sips_admission: float | None = None,
) -> DpsuParameters:
    """sigma_1 from DPNE Thm. 2.1 (``dpne_sigmas`` over ``max_n`` levels at the dpne ``budget``, the
    Gaussian at ``(1 - threshold_delta) * delta``) and rho_1 at ``threshold_delta * delta`` (the
    paper's split is 1/2). With the policy Gaussian, items are filled up to
    ``rho_1 + policy_cap * sigma_1``. With DP-SIPS, ``rounds`` splits sigma_1 and delta_0 over
    ``sips_rounds`` rounds (:func:`sips_vocabulary_rounds`); ``threshold`` stays the one-round rho_1."""
    check_policy(policy)
    epsilon, delta = budget
    _, sigmas = dpne_sigmas(epsilon, delta, max_n, sigma_decay, gaussian_delta=1.0 - threshold_delta)
    sigma_1 = sigmas[0]
    rho = dpsu_threshold(sigma_1, threshold_delta * delta, max_contribution)
    rounds: tuple[SipsRound, ...] = ()
    if policy == "dp-sips":
        rounds = sips_vocabulary_rounds(
            sigma_1, threshold_delta * delta, max_contribution, sips_rounds, sips_ratio, sips_admission
        )
    return DpsuParameters(
        sigma=sigma_1,
        threshold=rho,
        max_contribution=max_contribution,
        threshold_delta=threshold_delta * delta,
        policy=policy,
        cap=policy_fill_level(policy, rho, sigma_1, policy_cap),
        rounds=rounds,
    )


def threshold_histogram(
    wh: Engine,
    scan_sql: str,
    *,
    sigma: float,
    threshold: float,
    noise: NoiseSource,
    params: dict[str, Any] | None = None,
    batch_rows: int = BATCH_ROWS,
    admit_floor: float | None = None,
    admitted: list[pa.Array] | None = None,
) -> pa.Table:
    """Stream ``scan_sql`` (columns ``item``, ``weight``) and keep the items with
    ``weight + N(0, sigma^2) > threshold`` (supplement Alg. 5 lines 7-10 / Alg. 1 thresholding).

    Noise is drawn per record batch (vectorised); only the kept keys are held in memory, so
    memory follows the size of the release, not of the histogram. Returns a table with column
    ``item``. With ``admit_floor`` (DP-SIPS admission), the same noisy values also decide the
    items with ``admit_floor <= weight + noise <= threshold``, appended to ``admitted`` (keys only;
    private: a run-internal table, never released)."""
    if (admit_floor is None) != (admitted is None):
        raise ValueError("admit_floor and admitted go together")
    kept: list[pa.RecordBatch] = []
    item_type = None
    for batch in wh.fetch_batches(scan_sql, params, batch_rows):
        item_type = batch.schema.field("item").type
        if batch.num_rows == 0:
            continue
        weights = batch.column("weight").to_numpy(zero_copy_only=False)
        if admit_floor is None:
            mask = noise.above_threshold(weights, sigma, threshold)
        else:
            assert admitted is not None
            mask, admit = noise.threshold_bands(weights, sigma, threshold, admit_floor)
            if admit.any():
                admitted.append(batch.column("item").filter(pa.array(admit)))
        if mask.any():
            kept.append(batch.select(["item"]).filter(pa.array(mask)))
    schema = pa.schema([pa.field("item", item_type or pa.int64())])
    return pa.Table.from_batches(kept, schema=schema) if kept else schema.empty_table()


def dpsu_release(
    wh: Engine,
    schema: str,
    source: str,
    target: str,
    *,
    sigma: float,
    threshold: float,
    max_contribution: int,
    noise: NoiseSource,
    cap: float | None = None,
) -> int:
    """DPSU over any ``{schema}.{source}(user_id, item)`` relation: weighted Gaussian policy, or the
    policy Gaussian filling items up to ``cap`` when it is given.

    Writes the released items to ``{schema}.{target}(item)`` and returns how many were released
    (a DP count: the size of the release). The private histogram is dropped afterwards.
    ``sigma``/``threshold`` must come from the accountant (see :func:`vocabulary_parameters`).
    """
    histogram = safe_identifier(f"{target}_histogram")
    secret_histogram(wh, schema, source, histogram, max_contribution=max_contribution, cap=cap, noise=noise)
    released = threshold_histogram(
        wh,
        load_sql("dpsu/histogram_scan", schema=schema, histogram=histogram),
        sigma=sigma,
        threshold=threshold,
        noise=noise,
    )
    _store_items(wh, schema, target, released)
    wh.drop(schema, histogram)
    return released.num_rows


#: Seconds of every DP-SIPS round run in this process (benchmark instrumentation only: timings,
#: never data), appended by :func:`sips_rounds_release`: the round's histogram SQL and its draw
#: (the thresholding stream, plus the spurious sampling at DPNE levels).
SIPS_TIMINGS: list[dict[str, Any]] = []


SipsDraw = Callable[[str, "str | None", int, SipsRound, "list[pa.Array] | None"], pa.Array]


def sips_rounds_release(
    wh: Engine,
    schema: str,
    source: str,
    work: str,
    *,
    rounds: Sequence[SipsRound],
    max_contribution: int,
    noise: NoiseSource,
    draw: SipsDraw,
    label: str = "dpsu",
    per_user_lists: bool = False,
    always_admitted: pa.Array | None = None,
    coded_items: bool = False,
) -> list[pa.Array]:
    """The rounds of one DP-SIPS release over ``{schema}.{source}(user_id, item)`` (docs/dpne.md,
    "DP-SIPS"). Round r: the source minus the items released in rounds < r (anti-join,
    ``sql/dpsu/sips_remaining.sql``; the released set is public), then the shared weighted
    histogram (``sql/dpsu/histogram.sql``: at most ``max_contribution`` of each user's remaining
    distinct items, weight 1/sqrt(#kept), a fresh secret subset salt each round), then
    ``draw(histogram, released_table_or_None, released_count, round, admitted)``, which returns
    the round's released items (the noisy step; never a per-user row). Returns the non-empty
    per-round releases (disjoint). The private histogram and views are dropped.

    Admission (round 1's ``admit_floor`` set; docs/dpne.md, "Admission by the first round"): one
    salt for every round, so each user's kept set is round 1's; round 1's draw also collects into
    ``admitted`` the items whose noisy weight reached the floor without being released (plus
    ``always_admitted``, public keys), and rounds r >= 2 keep only those of each user's kept items
    not released yet (``sql/dpsu/histogram_admitted.sql``, ``histogram_kept_admitted.sql``).

    ``per_user_lists`` (with more than one round): each user's distinct items are collected once
    into a list table (``sql/dpsu/user_item_lists.sql``) that every round reads
    (``dpsu/histogram_lists.sql``; from round 2 minus the released items,
    ``dpsu/histogram_lists_remaining.sql``): the same histograms, without a GROUP BY over every
    occurrence per round. With admission the table holds each user's KEPT items instead
    (``dpsu/user_kept_lists.sql``: one salt, so round 1's kept sets serve every round), read by
    ``dpsu/histogram_kept.sql`` and ``histogram_kept_admitted.sql``: each user's items are ranked
    once, not once per round. Worth it where the source has many duplicates per user (the vocabulary:
    ~100 token occurrences, ~70 distinct words a user); the DPNE levels' sources are not.

    ``coded_items`` (with kept lists): the lists hold hash(item), not the item (docs/dpne.md, "Coded
    kept lists"; the same histograms, cheaper for strings) when no two items share a code."""
    if max_contribution < 1:
        raise ValueError(f"max_contribution: must be >= 1 (got {max_contribution})")
    done = safe_identifier(f"{work}_done")
    remaining = safe_identifier(f"{work}_remaining")
    histogram = safe_identifier(f"{work}_histogram")
    admitted_table = safe_identifier(f"{work}_admitted")
    lists = safe_identifier(f"{work}_lists") if per_user_lists and len(rounds) > 1 else None
    admission = len(rounds) > 1 and rounds[0].admit_floor is not None
    shared_salt = int(noise.selection_salt()) if admission else None
    from_kept_lists = lists is not None and admission  # one salt: every round keeps round 1's sets
    codes = safe_identifier(f"{work}_codes") if coded_items and from_kept_lists else None
    admitted_codes = safe_identifier(f"{work}_admitted_codes")
    admitted: pa.Array | None = None
    released: list[pa.Array] = []
    count = 0
    try:
        if from_kept_lists:  # every round's kept sets are round 1's, ranked once
            if codes is not None and not _one_to_one_codes(wh, schema, source, codes):
                codes = None
            wh.execute(
                load_sql(
                    "dpsu/user_kept_lists_coded" if codes else "dpsu/user_kept_lists",
                    schema=schema,
                    target=lists,
                    source=source,
                ),
                {"salt": shared_salt, "max_contribution": int(max_contribution)},
            )
        elif lists:
            wh.execute(load_sql("dpsu/user_item_lists", schema=schema, target=lists, source=source))
        for r, rnd in enumerate(rounds, start=1):
            started = time.perf_counter()
            if count:
                _store_items(wh, schema, done, pa.table({"item": pa.concat_arrays(released)}))
            if admission and r >= 2:
                assert admitted is not None
                if count:  # admitted minus everything released so far (keys only)
                    admitted = admitted.filter(pc.invert(pc.is_in(admitted, pa.concat_arrays(released))))
                _store_items(wh, schema, admitted_table, pa.table({"item": admitted}))
                coded = (
                    {"codes": codes, "admitted": admitted_codes} if codes else {"admitted": admitted_table}
                )
                if codes:  # the admitted items' codes, matched against the coded lists
                    wh.execute(
                        load_sql(
                            "dpsu/item_codes_of", schema=schema, target=admitted_codes, source=admitted_table
                        )
                    )
                statement = (
                    load_sql(
                        "dpsu/histogram_kept_admitted_coded" if codes else "dpsu/histogram_kept_admitted",
                        schema=schema,
                        kept_lists=lists,
                        histogram=histogram,
                        **coded,
                    )
                    if lists
                    else load_sql(
                        "dpsu/histogram_admitted",
                        schema=schema,
                        source=source,
                        admitted=admitted_table,
                        histogram=histogram,
                    )
                )
            elif from_kept_lists:  # round 1
                statement = load_sql(
                    "dpsu/histogram_kept_coded" if codes else "dpsu/histogram_kept",
                    schema=schema,
                    kept_lists=lists,
                    histogram=histogram,
                    **({"codes": codes} if codes else {}),
                )
            elif lists:
                statement = (
                    load_sql(
                        "dpsu/histogram_lists_remaining",
                        schema=schema,
                        lists=lists,
                        released=done,
                        histogram=histogram,
                    )
                    if count
                    else load_sql("dpsu/histogram_lists", schema=schema, lists=lists, histogram=histogram)
                )
            else:
                round_source = source
                if count:
                    wh.execute(
                        load_sql(
                            "dpsu/sips_remaining",
                            schema=schema,
                            target=remaining,
                            source=source,
                            released=done,
                        )
                    )
                    round_source = remaining
                statement = load_sql(
                    "dpsu/histogram", schema=schema, source=round_source, histogram=histogram
                )
            if from_kept_lists:  # the kept lists already applied the salt and the cap
                wh.execute(statement)
            else:
                salt = shared_salt if shared_salt is not None else int(noise.selection_salt())
                wh.execute(statement, {"salt": salt, "max_contribution": int(max_contribution)})
            built = time.perf_counter()
            collect: list[pa.Array] | None = [] if admission and r == 1 else None
            items = draw(histogram, done if count else None, count, rnd, collect)
            wh.drop(schema, histogram)
            if collect is not None:
                admitted = _admitted_keys(collect, always_admitted, items)
            if len(items):
                released.append(items)
                count += len(items)
            SIPS_TIMINGS.append(
                {
                    "label": label,
                    "round": r,
                    "histogram_seconds": round(built - started, 3),
                    "draw_seconds": round(time.perf_counter() - built, 3),
                }
            )
    finally:
        wh.drop(schema, histogram, remaining, done, admitted_table, admitted_codes, f"{work}_codes")
        wh.drop(schema, *([lists] if lists else []))
    return released


def _one_to_one_codes(wh: Engine, schema: str, source: str, codes: str) -> bool:
    """Build ``{schema}.{codes}(item, code)`` (``sql/dpsu/item_codes.sql``); whether no two items
    share a code (unlikely at 64 bits, but checked). Both answers release the same histograms."""
    wh.execute(load_sql("dpsu/item_codes", schema=schema, target=codes, source=source))
    row = wh.fetch_arrow(load_sql("dpsu/item_codes_distinct", schema=schema, codes=codes)).to_pylist()[0]
    if row["items"] == row["codes"]:
        return True
    wh.drop(schema, codes)
    return False


def _admitted_keys(collected: list[pa.Array], always: pa.Array | None, released: pa.Array) -> pa.Array:
    """Round 1's admitted keys (noisy weight in [floor, threshold]) plus the always-admitted public
    keys, minus round 1's release, distinct, in the released keys' type."""
    parts = [a.cast(released.type) for a in collected]
    if always is not None and len(always):
        parts.append(always.cast(released.type))
    if not parts:
        return pa.array([], type=released.type)
    keys = pc.unique(pa.concat_arrays(parts))
    if len(released):
        keys = keys.filter(pc.invert(pc.is_in(keys, released)))
    return keys


def sips_release(
    wh: Engine,
    schema: str,
    source: str,
    target: str,
    *,
    rounds: Sequence[SipsRound],
    max_contribution: int,
    noise: NoiseSource,
    label: str = "dpsu",
    per_user_lists: bool = False,
    public: PublicDomain | None = None,
    coded_items: bool = False,
) -> int:
    """DPSU by DP-SIPS over ``{schema}.{source}(user_id, item)``: :func:`sips_rounds_release` with
    each round thresholded at its own (sigma_r, rho_r) (:func:`threshold_histogram`; only the
    histogram (item, weight) streams to the driver). Writes the union of the rounds' releases to
    ``{schema}.{target}(item)`` and returns its size. With ``public`` (the vocabulary's public
    domain), rounds 2..R threshold public items at an eta threshold and release unheld public items
    at the same rate (:func:`public_domain_draw`; docs/dpne.md, "The public domain of the
    vocabulary")."""
    shares = public_round_shares(len(rounds))
    calls: list[int] = []

    def draw(
        histogram: str, released: str | None, count: int, rnd: SipsRound, admitted: list[pa.Array] | None
    ) -> pa.Array:
        assert rnd.threshold is not None
        calls.append(1)
        r = len(calls)
        if public is not None and r >= 2:
            rho_public = public_threshold(rnd.sigma, public, shares[r - 1], count)
            if public.log is not None:
                public.log.append({"round": r, "rho_public": rho_public, "released_before": count})
            if rho_public is not None and rho_public < rnd.threshold:
                return public_domain_draw(wh, schema, histogram, released, rnd, rho_public, public, noise)
        kept = threshold_histogram(
            wh,
            load_sql("dpsu/histogram_scan", schema=schema, histogram=histogram),
            sigma=rnd.sigma,
            threshold=rnd.threshold,
            noise=noise,
            admit_floor=rnd.admit_floor if admitted is not None else None,
            admitted=admitted,
        )
        return kept.column("item").combine_chunks()

    always = None
    if public is not None and rounds and rounds[0].admit_floor is not None:
        # Public words are admitted whatever their round-1 noise (a public set: admission stays a
        # function of round 1's output and public data), so the public domain works as before.
        always = wh.fetch_arrow(load_sql("dpsu/public_items", schema=schema, table=public.table))
        always = always.column("item").combine_chunks()
    released = sips_rounds_release(
        wh,
        schema,
        source,
        safe_identifier(f"{target}_sips"),
        rounds=rounds,
        max_contribution=max_contribution,
        noise=noise,
        draw=draw,
        label=label,
        per_user_lists=per_user_lists,
        always_admitted=always,
        coded_items=coded_items,
    )
    if released:
        items = pa.table({"item": pa.concat_arrays(released)})
    else:  # nothing released: an empty table of the source's item type
        items = wh.fetch_arrow(load_sql("dpsu/sips_empty", schema=schema, source=source))
    _store_items(wh, schema, target, items)
    return items.num_rows


@dataclass(frozen=True)
class PublicDomain:
    """The vocabulary's public domain (docs/dpne.md, "The public domain of the vocabulary"):
    ``{schema}.{table}(item)`` holds ``size`` distinct public words (the public corpus's most
    frequent; public data), ``eta`` bounds the expected number of released words nobody holds, as
    a fraction of the words released by round 1. ``log`` (optional) collects each round's public
    threshold for the report (public values only). ``sample_unheld=False`` is a deliberately
    BROKEN variant for the privacy tests' power checks: never use it in a release."""

    table: str
    size: int
    eta: float
    log: list[dict[str, Any]] | None = None
    sample_unheld: bool = True
    #: Collects the released words whose noisy weight passed rho_pub but not the DPSU threshold
    #: rho_r ("public only": they do not seed the k-gram levels). A post-processing of the same
    #: noisy values, so it may be released.
    public_only: list[pa.Array] | None = None


def public_round_shares(rounds: int) -> list[float]:
    """The share of eta of each round (index r - 1): 0 for round 1 (it uses the DPSU threshold for
    every item), an equal share for each of the rounds 2..R."""
    if rounds < 2:
        return [0.0] * rounds
    return [0.0] + [1.0 / (rounds - 1)] * (rounds - 1)


def public_threshold(sigma: float, public: PublicDomain, share: float, released_before: int) -> float | None:
    """rho_pub,r = sigma_r Phi^-1(1 - p_r), p_r = share_r eta min{1, N_<r / |P|}: a public word
    nobody holds passes round r with probability p_r, so over the rounds the expected number of
    such words is at most eta N_1 <= eta |S_1| (N_<r: words released before round r, public).
    None when nothing was released before (no reference size) or the domain is empty."""
    if public.size <= 0 or released_before <= 0 or share <= 0:
        return None
    from scipy import stats

    tail = public.eta * share * min(1.0, released_before / public.size)
    return float(sigma * stats.norm.isf(tail))


def public_domain_draw(
    wh: Engine,
    schema: str,
    histogram: str,
    released: str | None,
    rnd: SipsRound,
    rho_public: float,
    public: PublicDomain,
    noise: NoiseSource,
) -> pa.Array:
    """One vocabulary round with a public domain P. Held items: kept when weight + N(0, sigma_r^2)
    exceeds rho_pub (items of P) or rho_r (the others, the DPSU threshold). Items of P that no user
    kept this round and that were not released before have weight 0: each passes with probability
    Phi(-rho_pub / sigma_r), exactly as if its zero weight had been noised, so Binomial(#, p) of them
    are drawn uniformly. That is what makes P part of the Gaussian mechanism's domain: without it,
    a public word only the added user holds would be a catastrophic item at the lower threshold.

    The released public words whose noisy weight is at most rho_r (they passed rho_pub only) are
    added to ``public.public_only`` (for an unheld word, its noisy weight given > rho_pub is above
    rho_r with probability sf(rho_r/sigma_r) / sf(rho_pub/sigma_r), drawn): a post-processing of
    the same noisy values. The k-gram levels are seeded without them (docs/dpne.md)."""
    from scipy import stats

    assert rnd.threshold is not None
    assert released is not None  # a public threshold needs a round-1 release (public_threshold)
    scan = load_sql("dpsu/histogram_scan_public", schema=schema, histogram=histogram, public=public.table)
    kept: list[pa.Array] = []
    public_only: list[pa.Array] = []
    item_type: pa.DataType = pa.string()
    for batch in wh.fetch_batches(scan, None, BATCH_ROWS):
        item_type = batch.schema.field("item").type
        if batch.num_rows == 0:
            continue
        weights = batch.column("weight").to_numpy(zero_copy_only=False).astype(np.float64)
        in_public = batch.column("public").to_numpy(zero_copy_only=False).astype(bool)
        noisy = weights + noise.gaussian(rnd.sigma, weights.shape)
        keep = np.where(in_public, noisy > rho_public, noisy > rnd.threshold)
        items = batch.column("item")
        kept.append(items.filter(pa.array(keep)))
        below = keep & (noisy <= rnd.threshold)  # public words that passed rho_pub only
        if below.any():
            public_only.append(items.filter(pa.array(below)))
    if public.sample_unheld:
        unheld = wh.fetch_arrow(
            load_sql(
                "dpsu/public_unheld",
                schema=schema,
                public=public.table,
                histogram=histogram,
                released=released,
            )
        ).column("item")
        tail = float(stats.norm.sf(rho_public / rnd.sigma))
        n = noise.binomial(len(unheld), tail)
        if n:
            chosen = unheld.take(pa.array(noise.sample_without_replacement(len(unheld), n)))
            chosen = chosen.combine_chunks().cast(item_type)
            kept.append(chosen)
            # each chosen word's noisy weight is N(0, sigma_r^2) given > rho_pub: above rho_r too
            # with probability sf(rho_r/sigma_r) / sf(rho_pub/sigma_r)
            above = float(stats.norm.sf(rnd.threshold / rnd.sigma)) / tail
            below = noise.uniform(n) >= above
            if below.any():
                public_only.append(chosen.filter(pa.array(below)))
    if public.public_only is not None:
        public.public_only.extend(public_only)
    return pa.concat_arrays(kept) if kept else pa.array([], type=item_type)


def _store_items(wh: Engine, schema: str, target: str, items: pa.Table) -> None:
    view = "dpsu_released_batch"
    with wh.registered(**{view: items}):
        wh.execute(load_sql("dpsu/released", schema=schema, target=target, released=view))


def release_vocabulary(
    wh: Engine,
    schema: str,
    params: DpsuParameters,
    noise: NoiseSource,
    public: PublicDomain | None = None,
) -> int:
    """S_1 = DPSU over each user's distinct tokens of ``{schema}.sentences``; stored as
    ``{schema}.dpne_s1_items(item)``. Returns |S_1|. ``public``: the public domain of the
    vocabulary (DP-SIPS with 2+ rounds only; ignored otherwise)."""
    source = "dpsu_vocabulary_source"
    wh.execute(load_sql("dpsu/vocabulary_source", schema=schema, target=source))
    if params.rounds:
        return sips_release(
            wh,
            schema,
            source,
            VOCABULARY_TABLE,
            rounds=params.rounds,
            max_contribution=params.max_contribution,
            noise=noise,
            label="vocabulary",
            per_user_lists=True,
            public=public,
            coded_items=True,  # strings: the kept lists are cheaper as 64-bit codes
        )
    return dpsu_release(
        wh,
        schema,
        source,
        VOCABULARY_TABLE,
        sigma=params.sigma,
        threshold=params.threshold,
        max_contribution=params.max_contribution,
        noise=noise,
        cap=params.cap,
    )


def write_keys_parquet(table: pa.Table, path: Path, columns: dict[str, pa.DataType]) -> None:
    """Write released keys with exactly ``columns`` (names and types), nothing else."""
    arrays = [table.column(name).cast(dtype) for name, dtype in columns.items()]
    out = pa.Table.from_arrays(arrays, schema=pa.schema([pa.field(n, t) for n, t in columns.items()]))
    pq.write_table(out, path)
