"""The vocabulary's public domain in DP-SIPS: public words thresholded lower, unheld ones sampled.

Derivation: docs/dpne.md, "The public domain of the vocabulary". In rounds 2..R of the
vocabulary's DP-SIPS release (:func:`dpngram.mechanisms.dpsu.sips_release`), the words of a public
set P (the public corpus's most frequent) pass at a lower threshold rho_pub,r
(:func:`public_threshold`) instead of the DPSU threshold rho_r. That is private only because P is
part of the Gaussian mechanism's domain: a word of P that no user holds is released at exactly the
rate its zero weight plus noise would pass, so a word only the added user holds is not a
catastrophic item at the lower threshold (:func:`public_domain_draw`). The expected number of
released words nobody holds is bounded by eta times round 1's release.

Owns: :class:`PublicDomain`, the rounds' shares of eta and public thresholds, one public-domain round.
Imports: dpngram.mechanisms.dpsu_rounds, dpngram.engines, dpngram.core; numpy, pyarrow, scipy
(lazily).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.mechanisms.dpsu_rounds import SipsRound


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
    *,
    batch_rows: int,
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
    the same noisy values. The k-gram levels are seeded without them (docs/dpne.md). The held
    items' histogram streams in record batches of ``batch_rows``."""
    assert rnd.threshold is not None
    assert released is not None  # a public threshold needs a round-1 release (public_threshold)
    kept, public_only, item_type = _threshold_held(
        wh, schema, histogram, rnd, rho_public, public, noise, batch_rows
    )
    if public.sample_unheld:
        chosen, below = _sample_unheld(wh, schema, histogram, released, rnd, rho_public, public, noise)
        if chosen is not None:
            chosen = chosen.cast(item_type)
            kept.append(chosen)
            if below.any():
                public_only.append(chosen.filter(pa.array(below)))
    if public.public_only is not None:
        public.public_only.extend(public_only)
    return pa.concat_arrays(kept) if kept else pa.array([], type=item_type)


def _threshold_held(
    wh: Engine,
    schema: str,
    histogram: str,
    rnd: SipsRound,
    rho_public: float,
    public: PublicDomain,
    noise: NoiseSource,
    batch_rows: int,
) -> tuple[list[pa.Array], list[pa.Array], pa.DataType]:
    """The held items of a public-domain round: weight + N(0, sigma_r^2) against rho_pub (items
    of P) or rho_r (the others), one noise draw per item, streamed by record batch. Returns the
    kept items, those of them that passed rho_pub only (public only), and the items' type."""
    assert rnd.threshold is not None
    scan = load_sql("dpsu/histogram_scan_public", schema=schema, histogram=histogram, public=public.table)
    kept: list[pa.Array] = []
    public_only: list[pa.Array] = []
    item_type: pa.DataType = pa.string()
    for batch in wh.fetch_batches(scan, None, batch_rows):
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
    return kept, public_only, item_type


def _sample_unheld(
    wh: Engine,
    schema: str,
    histogram: str,
    released: str,
    rnd: SipsRound,
    rho_public: float,
    public: PublicDomain,
    noise: NoiseSource,
) -> tuple[pa.Array | None, np.ndarray]:
    """The unheld words of P (in no kept set this round, not released before; weight 0) that pass
    rho_pub: Binomial(#, Phi(-rho_pub / sigma_r)) of them drawn uniformly, then for each whether its
    noisy weight (given > rho_pub) is at most rho_r too (public only). Returns the chosen words
    (None if none) and that mask."""
    from scipy import stats

    assert rnd.threshold is not None
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
    if not n:
        return None, np.zeros(0, dtype=bool)
    chosen = unheld.take(pa.array(noise.sample_without_replacement(len(unheld), n))).combine_chunks()
    # each chosen word's noisy weight is N(0, sigma_r^2) given > rho_pub: above rho_r too
    # with probability sf(rho_r/sigma_r) / sf(rho_pub/sigma_r)
    above = float(stats.norm.sf(rnd.threshold / rnd.sigma)) / tail
    return chosen, noise.uniform(n) >= above
