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
:func:`public_domain_draw`, in :mod:`dpngram.mechanisms.dpsu_public`): docs/dpne.md, "The public
domain of the vocabulary".

Why one module (over 600 lines): DP-SIPS's rounds and their admission share one histogram SQL,
one thresholding rule and one set of release parameters; the DPNE levels and the audit call them
as one API, and splitting would only move the shared helpers apart. What has its own seam lives
beside it: the policy Gaussian's sequential update and the secret histogram in
:mod:`dpngram.mechanisms.dpsu_policy` (re-exported here), DP-SIPS's public round parameters in
:mod:`dpngram.mechanisms.dpsu_rounds`, the vocabulary's public domain in
:mod:`dpngram.mechanisms.dpsu_public`.

Owns: the DPSU release over any ``(user_id, item)`` relation with any policy, the vocabulary
S_1 and its parameters, writing released keys (:func:`write_keys_parquet`).
Imports: dpngram.mechanisms (dpsu_policy, dpsu_public, dpsu_rounds; policy_kernel lazily),
dpngram.engines, dpngram.core; pyarrow.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dpngram.core.accounting import PrivacyEvent, dpne_sigmas, dpsu_threshold
from dpngram.core.budget import Budget
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql, safe_identifier
from dpngram.mechanisms.dpsu_new_words import (
    NewWordsFunding,
    NewWordsRound,
    new_words_from_levels,
    release_new_words,
    split_new_words,
)
from dpngram.mechanisms.dpsu_policy import BATCH_ROWS as BATCH_ROWS  # re-exported
from dpngram.mechanisms.dpsu_policy import (
    Policy,
    check_policy,
    policy_fill_level,
    secret_histogram,
)
from dpngram.mechanisms.dpsu_policy import dpsu_histogram as dpsu_histogram  # re-exported
from dpngram.mechanisms.dpsu_policy import threshold_histogram as threshold_histogram  # re-exported
from dpngram.mechanisms.dpsu_public import (
    PublicDomain,
    public_domain_draw,
    public_round_shares,
    public_threshold,
)
from dpngram.mechanisms.dpsu_rounds import SipsRound, dpsu_events, sips_vocabulary_rounds

VOCABULARY_STAGE = "dpne.k1"


VOCABULARY_TABLE = "dpne_s1_items"  # released S_1 (item column), private schema but DP output


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
    #: The vocabulary's new-words round (``dpsu_new_words`` > 0; None: off). ``sigma`` and
    #: ``threshold_delta`` above are then what is left for the release before it.
    new_words: NewWordsRound | None = None

    def events(self, stage: str) -> list[PrivacyEvent]:
        """Gaussian (sensitivity 1) + the (0, delta_0) threshold event (DPNE Thm. 2.1 proof).
        DP-SIPS: one Gaussian sigma_r and one (0, delta_0r) event per round; the Gaussians compose
        exactly to ``sigma`` and the deltas add up to ``threshold_delta`` (docs/dpne.md, "DP-SIPS").
        The new-words round adds its own two events (:meth:`NewWordsRound.events`)."""
        extra = self.new_words.events(stage) if self.new_words is not None else []
        return self._release_events(stage) + extra

    def _release_events(self, stage: str) -> list[PrivacyEvent]:
        if self.rounds:
            return [
                event
                for r, rnd in enumerate(self.rounds, start=1)
                for event in dpsu_events(stage, rnd.sigma, rnd.threshold_delta or 0.0, f"DP-SIPS round {r}")
            ]
        return dpsu_events(stage, self.sigma, self.threshold_delta)


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
    new_words: int = 0,
    new_words_share: float = 0.25,
    new_words_funding: NewWordsFunding = "vocabulary",
) -> DpsuParameters:
    """sigma_1 from DPNE Thm. 2.1 (``dpne_sigmas`` over ``max_n`` levels at the dpne ``budget``, the
    Gaussian at ``(1 - threshold_delta) * delta``) and rho_1 at ``threshold_delta * delta`` (the
    paper's split is 1/2). With the policy Gaussian, items are filled up to
    ``rho_1 + policy_cap * sigma_1``. With DP-SIPS, ``rounds`` splits sigma_1 and delta_0 over
    ``sips_rounds`` rounds (:func:`sips_vocabulary_rounds`); ``threshold`` stays the one-round rho_1.
    With ``new_words`` = m > 0, the new-words round runs at sigma_1 / sqrt(``new_words_share``) with
    that share of delta_0, and everything above runs on the rest: the vocabulary's sigma_1 / sqrt(1 -
    share) with ``new_words_funding`` 'vocabulary'
    (:func:`dpngram.mechanisms.dpsu_new_words.split_new_words`), or every level's sigma scaled
    alike with 'dpne' (:func:`dpngram.mechanisms.dpsu_new_words.new_words_from_levels`)."""
    check_policy(policy)
    epsilon, delta = budget
    _, sigmas = dpne_sigmas(epsilon, delta, max_n, sigma_decay, gaussian_delta=1.0 - threshold_delta)
    sigma_1, delta_0 = sigmas[0], threshold_delta * delta
    new_round = None
    if new_words and new_words_funding == "dpne":
        sigma_1, delta_0, new_round = new_words_from_levels(sigmas, delta_0, new_words_share, new_words)
    elif new_words:
        sigma_1, delta_0, new_round = split_new_words(sigma_1, delta_0, new_words_share, new_words)
    rho = dpsu_threshold(sigma_1, delta_0, max_contribution)
    rounds: tuple[SipsRound, ...] = ()
    if policy == "dp-sips":
        rounds = sips_vocabulary_rounds(
            sigma_1, delta_0, max_contribution, sips_rounds, sips_ratio, sips_admission
        )
    return DpsuParameters(
        sigma=sigma_1,
        threshold=rho,
        max_contribution=max_contribution,
        threshold_delta=delta_0,
        policy=policy,
        cap=policy_fill_level(policy, rho, sigma_1, policy_cap),
        rounds=rounds,
        new_words=new_round,
    )


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
    token_items: bool = False,
) -> list[pa.Array]:
    """The rounds of one DP-SIPS release over ``{schema}.{source}(user_id, item)`` (docs/dpne.md,
    "DP-SIPS"). Round r: the shared weighted histogram of the items not released in rounds < r
    (:func:`_build_round_histogram`: at most ``max_contribution`` of each user's remaining distinct
    items, weight 1/sqrt(#kept), a fresh secret subset salt each round), then
    ``draw(histogram, released_table_or_None, released_count, round, admitted)``, which returns
    the round's released items (the noisy step; never a per-user row). Returns the non-empty
    per-round releases (disjoint). The private histogram and views are dropped.
    Admission (round 1's ``admit_floor`` set; docs/dpne.md, "Admission by the first round"): one
    salt for every round, so each user's kept set is round 1's; round 1's draw also collects into
    ``admitted`` the items whose noisy weight reached the floor without being released (plus
    ``always_admitted``, public keys), and rounds r >= 2 keep only those of each user's kept items
    not released yet (:func:`_store_admitted`).
    ``per_user_lists`` (more than one round) and ``coded_items`` (kept lists): one list table of
    the users' items that every round reads (:func:`_build_user_lists`; same histograms, cheaper;
    ``token_items``: built from the token ids, the source being the run's tokens)."""
    if max_contribution < 1:
        raise ValueError(f"max_contribution: must be >= 1 (got {max_contribution})")
    tables = _sips_tables(schema, source, work, rounds, per_user_lists, coded_items, token_items)
    shared_salt = int(noise.selection_salt()) if tables.admission else None
    admitted: pa.Array | None = None
    released: list[pa.Array] = []
    count = 0
    try:
        tables = _build_user_lists(wh, tables, shared_salt, max_contribution)
        for r, rnd in enumerate(rounds, start=1):
            started = time.perf_counter()
            if count:
                _store_items(wh, schema, tables.done, pa.table({"item": pa.concat_arrays(released)}))
            if tables.admission and r >= 2:
                admitted = _store_admitted(wh, tables, admitted, released, count)
            _build_round_histogram(wh, tables, r, count, shared_salt, max_contribution, noise)
            built = time.perf_counter()
            collect: list[pa.Array] | None = [] if tables.admission and r == 1 else None
            items = draw(tables.histogram, tables.done if count else None, count, rnd, collect)
            wh.drop(schema, tables.histogram)
            if collect is not None:
                admitted = _admitted_keys(collect, always_admitted, items)
            if len(items):
                released.append(items)
                count += len(items)
            _record_sips_timing(label, r, started, built)
    finally:
        tables.drop_all(wh)
    return released


@dataclass(frozen=True)
class _SipsTables:
    """The private work tables of one DP-SIPS release, and how its rounds read the source:
    ``lists`` (per-user list table, None without), ``codes`` (coded kept lists, None without),
    ``admission`` (round 1 has an admission floor, with more than one round) and
    ``from_kept_lists`` (the list table holds each user's KEPT items: lists and admission)."""

    schema: str
    source: str
    work: str
    done: str
    remaining: str
    histogram: str
    admitted: str
    admitted_codes: str
    lists: str | None
    codes: str | None
    admission: bool
    from_kept_lists: bool
    token_items: bool = False

    def drop_all(self, wh: Engine) -> None:
        """Drop every table the release may have left (the list table last)."""
        wh.drop(
            self.schema,
            self.histogram,
            self.remaining,
            self.done,
            self.admitted,
            self.admitted_codes,
            f"{self.work}_codes",
        )
        wh.drop(self.schema, *([self.lists] if self.lists else []))


def _sips_tables(
    schema: str,
    source: str,
    work: str,
    rounds: Sequence[SipsRound],
    per_user_lists: bool,
    coded_items: bool,
    token_items: bool = False,
) -> _SipsTables:
    """The work tables' names (``{work}_*``) and the release's reading mode (:class:`_SipsTables`)."""
    lists = safe_identifier(f"{work}_lists") if per_user_lists and len(rounds) > 1 else None
    admission = len(rounds) > 1 and rounds[0].admit_floor is not None
    from_kept_lists = lists is not None and admission  # one salt: every round keeps round 1's sets
    return _SipsTables(
        schema=schema,
        source=source,
        work=work,
        done=safe_identifier(f"{work}_done"),
        remaining=safe_identifier(f"{work}_remaining"),
        histogram=safe_identifier(f"{work}_histogram"),
        admitted=safe_identifier(f"{work}_admitted"),
        admitted_codes=safe_identifier(f"{work}_admitted_codes"),
        lists=lists,
        codes=safe_identifier(f"{work}_codes") if coded_items and from_kept_lists else None,
        admission=admission,
        from_kept_lists=from_kept_lists,
        token_items=token_items,
    )


def _build_user_lists(
    wh: Engine, tables: _SipsTables, shared_salt: int | None, max_contribution: int
) -> _SipsTables:
    """The list table every round reads, built once before round 1 (none without ``lists``).

    Without admission it holds each user's distinct items (``sql/dpsu/user_item_lists.sql``),
    read by ``dpsu/histogram_lists.sql`` (from round 2 minus the released items,
    ``dpsu/histogram_lists_remaining.sql``): the same histograms, without a GROUP BY over every
    occurrence per round. With admission it holds each user's KEPT items instead
    (``dpsu/user_kept_lists.sql``: one salt, so round 1's kept sets serve every round), read by
    ``dpsu/histogram_kept.sql`` and ``histogram_kept_admitted.sql``: each user's items are ranked
    once, not once per round. Worth it where the source has many duplicates per user (the
    vocabulary: ~100 token occurrences, ~70 distinct words a user); the DPNE levels' sources are not.

    Coded kept lists hold hash(item), not the item (docs/dpne.md, "Coded kept lists"; the same
    histograms, cheaper for strings) when no two items share a code; otherwise the returned
    tables have ``codes`` None and the lists hold the items. With ``token_items`` the codes and
    the coded lists come from the sentences' token ids and the dictionary
    (``dpsu/item_codes_tokens.sql``, ``dpsu/user_kept_lists_coded_tokens.sql``)."""
    if tables.from_kept_lists:  # every round's kept sets are round 1's, ranked once
        codes = tables.codes
        if codes is not None and not _one_to_one_codes(
            wh, tables.schema, tables.source, codes, tables.token_items
        ):
            codes = None
        coded = "dpsu/user_kept_lists_coded_tokens" if tables.token_items else "dpsu/user_kept_lists_coded"
        wh.execute(
            load_sql(
                coded if codes else "dpsu/user_kept_lists",
                schema=tables.schema,
                target=tables.lists,
                source=tables.source,
            ),
            {"salt": shared_salt, "max_contribution": int(max_contribution)},
        )
        return dataclasses.replace(tables, codes=codes)
    if tables.lists:
        wh.execute(
            load_sql("dpsu/user_item_lists", schema=tables.schema, target=tables.lists, source=tables.source)
        )
    return tables


def _store_admitted(
    wh: Engine, tables: _SipsTables, admitted: pa.Array | None, released: list[pa.Array], count: int
) -> pa.Array:
    """Before round r >= 2 with admission: store round 1's admitted keys minus everything released
    so far (keys only; with coded lists, their codes too) for the round's histogram to read
    (``sql/dpsu/histogram_admitted.sql``, ``histogram_kept_admitted.sql``). Returns those keys."""
    assert admitted is not None
    if count:  # admitted minus everything released so far (keys only)
        admitted = admitted.filter(pc.invert(pc.is_in(admitted, pa.concat_arrays(released))))
    _store_items(wh, tables.schema, tables.admitted, pa.table({"item": admitted}))
    if tables.codes:  # the admitted items' codes, matched against the coded lists
        wh.execute(
            load_sql(
                "dpsu/item_codes_of",
                schema=tables.schema,
                target=tables.admitted_codes,
                source=tables.admitted,
            )
        )
    return admitted


def _build_round_histogram(
    wh: Engine,
    tables: _SipsTables,
    r: int,
    count: int,
    shared_salt: int | None,
    max_contribution: int,
    noise: NoiseSource,
) -> None:
    """Round r's secret histogram ``tables.histogram`` (:func:`_round_histogram_sql`). Its subset
    salt is the shared one with admission, else a fresh one drawn here; kept lists already applied
    the salt and the cap."""
    statement = _round_histogram_sql(wh, tables, r, count)
    if tables.from_kept_lists:  # the kept lists already applied the salt and the cap
        wh.execute(statement)
    else:
        salt = shared_salt if shared_salt is not None else int(noise.selection_salt())
        wh.execute(statement, {"salt": salt, "max_contribution": int(max_contribution)})


def _round_histogram_sql(wh: Engine, tables: _SipsTables, r: int, count: int) -> str:
    """The statement of round r's histogram, over the items not released yet (``count`` of them,
    in ``tables.done``; the released set is public). With admission, rounds r >= 2 read only the
    admitted items; without list tables, round r reads the source minus the released items (an
    anti-join, ``sql/dpsu/sips_remaining.sql``, run here) through the shared
    ``sql/dpsu/histogram.sql``."""
    schema, histogram = tables.schema, tables.histogram
    if tables.admission and r >= 2:
        if tables.lists:
            coded = (
                {"codes": tables.codes, "admitted": tables.admitted_codes}
                if tables.codes
                else {"admitted": tables.admitted}
            )
            return load_sql(
                "dpsu/histogram_kept_admitted_coded" if tables.codes else "dpsu/histogram_kept_admitted",
                schema=schema,
                kept_lists=tables.lists,
                histogram=histogram,
                **coded,
            )
        return load_sql(
            "dpsu/histogram_admitted",
            schema=schema,
            source=tables.source,
            admitted=tables.admitted,
            histogram=histogram,
        )
    if tables.from_kept_lists:  # round 1
        return load_sql(
            "dpsu/histogram_kept_coded" if tables.codes else "dpsu/histogram_kept",
            schema=schema,
            kept_lists=tables.lists,
            histogram=histogram,
            **({"codes": tables.codes} if tables.codes else {}),
        )
    if tables.lists:
        if count:
            return load_sql(
                "dpsu/histogram_lists_remaining",
                schema=schema,
                lists=tables.lists,
                released=tables.done,
                histogram=histogram,
            )
        return load_sql("dpsu/histogram_lists", schema=schema, lists=tables.lists, histogram=histogram)
    round_source = tables.source
    if count:
        wh.execute(
            load_sql(
                "dpsu/sips_remaining",
                schema=schema,
                target=tables.remaining,
                source=tables.source,
                released=tables.done,
            )
        )
        round_source = tables.remaining
    return load_sql("dpsu/histogram", schema=schema, source=round_source, histogram=histogram)


def _record_sips_timing(label: str, r: int, started: float, built: float) -> None:
    """Append round r's seconds to :data:`SIPS_TIMINGS` (histogram SQL, then the draw up to now)."""
    SIPS_TIMINGS.append(
        {
            "label": label,
            "round": r,
            "histogram_seconds": round(built - started, 3),
            "draw_seconds": round(time.perf_counter() - built, 3),
        }
    )


def _one_to_one_codes(wh: Engine, schema: str, source: str, codes: str, token_items: bool = False) -> bool:
    """Build ``{schema}.{codes}(item, code)`` (``sql/dpsu/item_codes.sql``; with ``token_items``,
    ``item_codes_tokens.sql`` from the dictionary); whether no two items share a code (unlikely at
    64 bits, but checked). Both answers release the same histograms."""
    if token_items:
        wh.execute(load_sql("dpsu/item_codes_tokens", schema=schema, target=codes))
    else:
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
    token_items: bool = False,
) -> int:
    """DPSU by DP-SIPS over ``{schema}.{source}(user_id, item)``: :func:`sips_rounds_release` with
    each round thresholded at its own (sigma_r, rho_r) (:func:`threshold_histogram`; only the
    histogram (item, weight) streams to the driver). Writes the union of the rounds' releases to
    ``{schema}.{target}(item)`` and returns its size. With ``public`` (the vocabulary's public
    domain), rounds 2..R threshold public items at an eta threshold and release unheld public items
    at the same rate (:func:`public_domain_draw`; docs/dpne.md, "The public domain of the
    vocabulary")."""
    always = _always_admitted(wh, schema, rounds, public)
    released = sips_rounds_release(
        wh,
        schema,
        source,
        safe_identifier(f"{target}_sips"),
        rounds=rounds,
        max_contribution=max_contribution,
        noise=noise,
        draw=_sips_release_draw(wh, schema, len(rounds), noise, public),
        label=label,
        per_user_lists=per_user_lists,
        always_admitted=always,
        coded_items=coded_items,
        token_items=token_items,
    )
    if released:
        items = pa.table({"item": pa.concat_arrays(released)})
    else:  # nothing released: an empty table of the source's item type
        items = wh.fetch_arrow(load_sql("dpsu/sips_empty", schema=schema, source=source))
    _store_items(wh, schema, target, items)
    return items.num_rows


def _sips_release_draw(
    wh: Engine, schema: str, n_rounds: int, noise: NoiseSource, public: PublicDomain | None
) -> SipsDraw:
    """The draw of each round of :func:`sips_release` (called once a round, in order): the
    histogram thresholded at (sigma_r, rho_r), round 1 also collecting the admitted items when
    asked. With ``public``, a round r >= 2 whose public threshold rho_pub,r
    (:func:`public_threshold`, logged in ``public.log``) is below rho_r draws by
    :func:`public_domain_draw` instead."""
    shares = public_round_shares(n_rounds)
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
                return public_domain_draw(
                    wh, schema, histogram, released, rnd, rho_public, public, noise, batch_rows=BATCH_ROWS
                )
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

    return draw


def _always_admitted(
    wh: Engine, schema: str, rounds: Sequence[SipsRound], public: PublicDomain | None
) -> pa.Array | None:
    """With a public domain and admission, the public words: admitted whatever their round-1 noise
    (a public set: admission stays a function of round 1's output and public data), so the public
    domain works as before. None otherwise."""
    if public is None or not rounds or rounds[0].admit_floor is None:
        return None
    always = wh.fetch_arrow(load_sql("dpsu/public_items", schema=schema, table=public.table))
    return always.column("item").combine_chunks()


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
    log: dict[str, Any] | None = None,
) -> int:
    """S_1 = DPSU over each user's distinct tokens of ``{schema}.sentences``; stored as
    ``{schema}.dpne_s1_items(item)``. Returns |S_1|. ``public``: the public domain of the
    vocabulary (DP-SIPS with 2+ rounds only; ignored otherwise). With ``params.new_words``, the
    new-words round follows and adds its words (their count goes to ``log["new_words"]``)."""
    source = "dpsu_vocabulary_source"
    wh.execute(load_sql("dpsu/vocabulary_source", schema=schema, target=source))
    if params.rounds:
        released = sips_release(
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
            token_items=True,  # ... built from the sentences' token ids
        )
    else:
        released = dpsu_release(
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
    if params.new_words is None:
        return released
    public_table = public.table if public is not None else None
    new = release_new_words(
        wh, schema, source, VOCABULARY_TABLE, public_table, params.new_words, noise, token_items=True
    )
    if len(new):
        with wh.registered(dpsu_new_words_batch=pa.table({"item": new})):
            wh.execute(
                load_sql(
                    "dpsu/released_union",
                    schema=schema,
                    target=VOCABULARY_TABLE,
                    released="dpsu_new_words_batch",
                )
            )
    if log is not None:
        log["new_words"] = len(new)
    return released + len(new)


def write_keys_parquet(table: pa.Table, path: Path, columns: dict[str, pa.DataType]) -> None:
    """Write released keys with exactly ``columns`` (names and types), nothing else."""
    arrays = [table.column(name).cast(dtype) for name, dtype in columns.items()]
    out = pa.Table.from_arrays(arrays, schema=pa.schema([pa.field(n, t) for n, t in columns.items()]))
    pq.write_table(out, path)
