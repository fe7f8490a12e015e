"""How P and Q become the released model M (docs/lm.md, "Open-vocabulary model"): P adapted to
Q's unigrams (:func:`adapt_to_unigrams`), the union of the two models' n-grams
(:func:`union_ngrams`, :class:`NgramUnion`) and the static mixture λ·Q + (1 − λ)·P′ over it
(:func:`mix_models`), written as one ARPA backoff model. All of it is arithmetic over
:meth:`~dpngram.lm.ngram_tables.ArpaModel.structure`'s row numbers; :func:`model_probabilities`
and :func:`backoff_weights` are the same quantities by joining n-gram strings (tests, benchmarks).

Owns: the unigram adaptation, the union of two models' n-grams, the mixture.
Imports: dpngram.lm.ngram_tables, dpngram.core; numpy, polars.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from dpngram.core.errors import ArpaError
from dpngram.lm.ngram_tables import (
    BOS,
    BOS_LOGPROB,
    MIN_PROB,
    ArpaModel,
    NgramLinks,
    ngram_context,
    ngram_links,
    ngram_suffix,
    strictly_sorted,
)


@dataclass(frozen=True)
class NgramUnion:
    """:func:`union_ngrams` of ``base`` and ``other``, computed ahead (stage ``lm_counts`` has its
    worker compute it while the weight selection runs): it serves every model with ``base``'s
    n-grams in ``base``'s rows, which a model carrying ``base``'s structure object has
    (:meth:`ArpaModel.with_structure`: an adaptation of ``base``), mixed with ``other`` itself."""

    structure: dict[int, NgramLinks] | None
    other: ArpaModel
    union: ArpaModel
    base_rows: dict[int, np.ndarray] | None

    @classmethod
    def of(cls, base: ArpaModel, other: ArpaModel) -> NgramUnion:
        # the structure union_ngrams starts from (another thread may derive base's meanwhile: a
        # union built from the strings then serves nobody, and the mixture builds its own)
        structure = base.derived_structure()
        union, rows = union_ngrams(base, other)
        return cls(structure, other, union, rows)

    def serves(self, base: ArpaModel, other: ArpaModel) -> bool:
        return (
            self.structure is not None and base.derived_structure() is self.structure and other is self.other
        )


def union_ngrams(base: ArpaModel, other: ArpaModel) -> tuple[ArpaModel, dict[int, np.ndarray] | None]:
    """The union of two models' n-grams: per order one ``ngram`` column, unique and sorted, with its
    :meth:`ArpaModel.structure`; and, per order, the row in the union of each of ``base``'s rows
    (None when the union was built from the strings alone).

    When ``base``'s structure is derived and its tables are strictly sorted (a Kneser-Ney model,
    or one adapted from it), the union is ``base``'s rows with ``other``'s few extra n-grams merged
    in: its structure is ``base``'s, renumbered, plus the extra rows' links, instead of joining
    every n-gram's strings again. Either way the same tables and structure (a closed union)."""
    order = base.order
    links = base.derived_structure()
    tables = {n: base.tables[n].select("ngram") for n in range(1, order + 1)}
    if links is None or not all(strictly_sorted(t["ngram"]) for t in tables.values()):
        union = ArpaModel(
            {
                n: pl.concat([tables[n], other.tables[n].select("ngram")]).unique().sort("ngram")
                for n in range(1, order + 1)
            }
        )
        union.structure()
        return union, None
    rows: dict[int, np.ndarray] = {}
    inserted: dict[int, np.ndarray] = {}
    extra: dict[int, pl.DataFrame] = {}
    union_tables: dict[int, pl.DataFrame] = {}
    for n in range(1, order + 1):
        extra[n] = (
            other.tables[n].select("ngram").join(tables[n], on="ngram", how="anti").unique().sort("ngram")
        )
        at = tables[n]["ngram"].search_sorted(extra[n]["ngram"], side="left").to_numpy().astype(np.int64)
        inserted[n] = at + np.arange(at.size, dtype=np.int64)  # extra k goes before base row at[k]
        height = tables[n].height
        rows[n] = np.arange(height, dtype=np.int64) + np.searchsorted(at, np.arange(height), side="right")
        # the inverse of the final positions (base rows, then the extra ones): which row of
        # concat([base, extra]) lands at each position; a permutation, so no sort is needed
        place = np.empty(height + at.size, dtype=np.int64)
        place[rows[n]] = np.arange(height, dtype=np.int64)
        place[inserted[n]] = height + np.arange(at.size, dtype=np.int64)
        union_tables[n] = pl.concat([tables[n], extra[n]]).select(pl.col("ngram").gather(place))
    structure: dict[int, NgramLinks] = {}
    for n in range(2, order + 1):
        size = union_tables[n].height
        arrays = [np.empty(size, dtype=np.int64) for _ in range(3)]
        lower = rows[n - 1]
        for target, source, below in zip(
            arrays, (links[n].context, links[n].suffix, links[n].word), (lower, lower, rows[1]), strict=True
        ):
            target[rows[n]] = below[source]
        if extra[n].height:
            new = ngram_links(extra[n], union_tables[n - 1], union_tables[1], n)
            for target, source in zip(arrays, (new.context, new.suffix, new.word), strict=True):
                target[inserted[n]] = source
        structure[n] = NgramLinks(*arrays)
    return ArpaModel.with_structure(union_tables, structure), rows


def model_probabilities(model: ArpaModel, ngrams: dict[int, pl.DataFrame]) -> dict[int, pl.DataFrame]:
    """The model's probability p(w|h) (listed or backed off, ARPA semantics) of every n-gram in
    ``ngrams[n]`` (column ``ngram``), for n = 1..order. Each ``ngrams[n]`` must contain the suffixes
    of ``ngrams[n + 1]`` (closure), as the union of two ARPA models' n-grams does."""
    out: dict[int, pl.DataFrame] = {}
    for n in sorted(ngrams):
        own = model.tables[n].select(
            "ngram",
            own=pl.when(pl.col("ngram") == BOS).then(0.0).otherwise(pl.lit(10.0).pow(pl.col("logprob"))),
        )
        g = ngrams[n].select("ngram").unique().join(own, on="ngram", how="left")
        if n == 1:
            out[1] = g.select("ngram", prob=pl.col("own").fill_null(0.0))
            continue
        bo = model.tables[n - 1].select(
            pl.col("ngram").alias("ctx"), bo=pl.lit(10.0).pow(pl.col("backoff").fill_null(0.0))
        )
        lower = out[n - 1].rename({"ngram": "suf", "prob": "lower"})
        g = (
            g.with_columns(ctx=ngram_context(), suf=ngram_suffix())
            .join(bo, on="ctx", how="left")
            .join(lower, on="suf", how="left")
        )
        if g["lower"].null_count():
            raise ArpaError(f"order {n}: a suffix is missing from the n-grams one order below")
        out[n] = g.select(
            "ngram", prob=pl.coalesce(pl.col("own"), pl.col("bo").fill_null(1.0) * pl.col("lower"))
        )
    return out


def mix_models(
    public: ArpaModel,
    private: ArpaModel,
    weight: float,
    order_weights: dict[int, float] | None = None,
    union: NgramUnion | None = None,
) -> ArpaModel:
    """λ·private + (1 − λ)·public (λ = ``weight``; a static mixture, SRILM's ``-mix-lm``) as one
    ARPA model over the union of the two models' n-grams. ``order_weights``: another λ for the
    listed n-grams of some orders (benchmarks/studies/lm_merge_study.py; the product passes none).

    Listed n-grams get the exact mixture; the backoff weight of a context h is
    (1 − Σ listed p(w|h)) / (1 − Σ listed p(w|h')) so every context sums to one (1 for a context
    with no listed continuation). Both models must have the same order and the same unigrams.
    Array arithmetic over the union's rows (:meth:`ArpaModel.structure`); the result carries that
    structure, so checking and writing it joins no strings again. ``union``: the two models'
    n-gram union computed ahead, used when it serves them (:meth:`NgramUnion.serves`)."""
    weights = {n: weight for n in range(1, public.order + 1)} | (order_weights or {})
    for n, w in weights.items():
        if not 0.0 <= w <= 1.0:
            raise ArpaError(f"weight of order {n}: must be in [0, 1] (got {w})")
    order = public.order
    if private.order != order:
        raise ArpaError(f"orders differ: public {order}, private {private.order}")
    uni_p, uni_q = set(public.tables[1]["ngram"].to_list()), set(private.tables[1]["ngram"].to_list())
    if uni_p != uni_q:
        raise ArpaError("the two models must have the same unigrams (vocabulary)")
    ahead = union if union is not None and union.serves(public, private) else NgramUnion.of(public, private)
    union_model, public_rows = ahead.union, ahead.base_rows
    links = union_model.structure()
    pp, qq = _probabilities_on(public, union_model, public_rows), _probabilities_on(private, union_model)
    probs = {n: (1.0 - weights[n]) * pp[n] + weights[n] * qq[n] for n in range(1, order + 1)}
    tables: dict[int, pl.DataFrame] = {}
    for n in range(1, order + 1):
        frame = union_model.tables[n].with_columns(
            logprob=pl.when(pl.col("ngram") == BOS)
            .then(BOS_LOGPROB)
            .otherwise(pl.Series(np.log10(np.clip(probs[n], MIN_PROB, 1.0))))
        )
        if n < order:
            link = links[n + 1]
            contexts = union_model.tables[n].height
            listed = np.bincount(link.context, weights=probs[n + 1], minlength=contexts)
            lower = np.bincount(link.context, weights=probs[n][link.suffix], minlength=contexts)
            num, den = 1.0 - listed, 1.0 - lower
            with np.errstate(divide="ignore", invalid="ignore"):
                gamma = np.where(den > 1e-12, np.clip(num, 0.0, None) / den, 0.0)
            gamma = np.where(np.bincount(link.context, minlength=contexts) > 0, gamma, 1.0)
            frame = frame.with_columns(backoff=pl.Series(np.log10(np.clip(gamma, MIN_PROB, None))))
        else:
            frame = frame.with_columns(backoff=pl.lit(None, dtype=pl.Float64))
        tables[n] = frame
    return ArpaModel.with_structure(tables, links)


def _probabilities_on(
    model: ArpaModel, closed: ArpaModel, rows: dict[int, np.ndarray] | None = None
) -> dict[int, np.ndarray]:
    """The model's probability p(w|h) (listed or backed off, ARPA semantics; ``<s>`` 0) of every
    row of ``closed`` (a closed set of n-grams containing the model's, e.g. a union), as arrays in
    ``closed``'s row order: :func:`model_probabilities` through ``closed``'s structure. ``rows``:
    the row in ``closed`` of each of the model's rows, when known (:func:`union_ngrams`); else the
    n-grams are matched by their strings."""
    links = closed.structure()
    out: dict[int, np.ndarray] = {}
    backoff_lower: np.ndarray | None = None
    for n in range(1, model.order + 1):
        logprob, backoff = _listed_on(model, closed, n, None if rows is None else rows[n])
        listed = ~np.isnan(logprob)
        if n == 1:
            prob = np.where(listed, np.power(10.0, np.nan_to_num(logprob)), 0.0)
            prob = np.where(closed.tables[1]["ngram"] == BOS, 0.0, prob)
        else:
            link = links[n]
            assert backoff_lower is not None
            backed = backoff_lower[link.context] * out[n - 1][link.suffix]
            prob = np.where(listed, np.power(10.0, np.nan_to_num(logprob)), backed)
        out[n] = prob
        # a context the model does not list (or lists without a backoff) backs off with weight 1
        backoff_lower = np.power(10.0, backoff)
    return out


def _listed_on(
    model: ArpaModel, closed: ArpaModel, n: int, rows: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The model's order-n log10 probability (NaN where not listed) and backoff (0 where not listed
    or null) on ``closed``'s order-n rows; ``rows``: where the model's rows are in ``closed``."""
    table = model.tables[n]
    if rows is None:
        own = closed.tables[n].join(
            table.select("ngram", "logprob", "backoff"), on="ngram", how="left", maintain_order="left"
        )
        return own["logprob"].to_numpy(), own["backoff"].fill_null(0.0).to_numpy()
    size = closed.tables[n].height
    logprob, backoff = np.full(size, np.nan), np.zeros(size)
    logprob[rows] = table["logprob"].to_numpy()
    backoff[rows] = table["backoff"].fill_null(0.0).to_numpy()
    return logprob, backoff


def backoff_weights(probs: dict[int, pl.DataFrame], order: int) -> dict[int, pl.DataFrame]:
    """The backoff weight of every context of a closed set of listed probabilities (``ngram``,
    ``prob`` per order): gamma(h) = (1 - sum of listed p(w|h)) / (1 - sum of listed p(w|h')), so
    every context sums to one (0 where the lower order lists everything)."""
    gammas: dict[int, pl.DataFrame] = {}
    for n in range(2, order + 1):
        lower = probs[n - 1].rename({"ngram": "suf", "prob": "lower"})
        ctx = (
            probs[n]
            .with_columns(ctx=ngram_context(), suf=ngram_suffix())
            .join(lower, on="suf", how="left")
            .group_by("ctx")
            .agg(num=1.0 - pl.col("prob").sum(), den=1.0 - pl.col("lower").sum())
            .with_columns(
                gamma=pl.when(pl.col("den") > 1e-12)
                .then(pl.col("num").clip(0.0, None) / pl.col("den"))
                .otherwise(0.0)
            )
        )
        gammas[n] = ctx.select(pl.col("ctx").alias("ngram"), "gamma")
    return gammas


def adapt_to_unigrams(model: ArpaModel, target: pl.DataFrame, beta: float) -> ArpaModel:
    """Unigram (MDI) adaptation of a backoff model: p'(w|h) = α(w)·p(w|h)/Z(h) with
    α(w) = (target(w)/p(w))^β, Z(h) = Σ_w α(w)·p(w|h) (Kneser, Peters & Klakow 1997, "fast
    marginal adaptation"). ``target``: (``ngram``, ``prob``) unigram distribution over the model's
    vocabulary. In backoff form: listed n-grams are scaled by α(w)/Z(h) and the backoff weight of h
    becomes bo(h)·Z(h')/Z(h), with Z computed order by order from the listed n-grams:
    Z(h) = Σ_listed α(w)p(w|h) + bo(h)·(Z(h') − Σ_listed α(w)p(w|h')) (Z(h) = Z(h') for a context
    with no listed continuation).

    Array arithmetic over the model's rows through :meth:`ArpaModel.structure` (each n-gram's
    context, suffix and word as row numbers, derived once per model): the selection adapts the
    same P at several β. The model must be closed (as every model built here is)."""
    order = model.order
    links = model.structure()
    uni = model.tables[1]
    p1 = np.where(uni["ngram"] == BOS, 0.0, np.power(10.0, uni["logprob"].to_numpy()))
    t = uni.select("ngram").join(target, on="ngram", how="left", maintain_order="left")["prob"]
    t = t.fill_null(0.0).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where((p1 > 0) & (t > 0), np.power(t / p1, beta), 1.0)
    z0 = float(np.sum(p1 * alpha))
    probs = {1: p1 * alpha / z0}
    gammas: dict[int, np.ndarray] = {}
    z_by_order = {0: np.array([z0])}  # Z of every listed context, by its order (0: the empty one)
    prob_lower = p1
    for n in range(2, order + 1):
        link = links[n]
        prob = np.power(10.0, model.tables[n]["logprob"].to_numpy())
        contexts = model.tables[n - 1].height
        bo = np.power(10.0, model.tables[n - 1]["backoff"].fill_null(0.0).to_numpy())
        weighted = alpha[link.word]
        a = np.bincount(link.context, weights=weighted * prob, minlength=contexts)
        b = np.bincount(link.context, weights=weighted * prob_lower[link.suffix], minlength=contexts)
        listed = np.bincount(link.context, minlength=contexts) > 0
        # Z(h') of each context h: its suffix's Z one order down (the empty context's for n = 2)
        z_suffix = np.full(contexts, z0) if n == 2 else z_by_order[n - 2][links[n - 1].suffix]
        z = np.where(listed, a + bo * (z_suffix - b), z_suffix)
        z_by_order[n - 1] = z
        gammas[n - 1] = bo * z_suffix / z
        probs[n] = weighted * prob / z[link.context]
        prob_lower = prob
    tables: dict[int, pl.DataFrame] = {}
    for n in range(1, order + 1):
        logprob = np.log10(np.clip(probs[n], MIN_PROB, 1.0))
        frame = (
            model.tables[n]
            .select("ngram")
            .with_columns(
                logprob=pl.when(pl.col("ngram") == BOS).then(BOS_LOGPROB).otherwise(pl.Series(logprob))
            )
        )
        backoff = (
            pl.Series(np.log10(np.clip(gammas[n], MIN_PROB, None)))
            if n < order
            else pl.lit(None, dtype=pl.Float64)
        )
        tables[n] = frame.with_columns(backoff=backoff)
    return ArpaModel.with_structure(tables, links)  # the same n-grams in the same rows
