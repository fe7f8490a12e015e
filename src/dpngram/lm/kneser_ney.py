"""Kneser-Ney from (fractional) n-gram pseudo-counts: the public model P's smoothing
(:func:`dpngram.lm.open_model.public_model`), as a model (:func:`kneser_ney`) or as terms that a
cache can keep and complete per run (:func:`kneser_ney_terms`, :func:`kneser_ney_model`).

Smoothing (docs/lm.md, "Kneser-Ney on fractional counts"): interpolated modified Kneser-Ney (Chen
& Goodman 1998, §3.5, §4.1.6 — what KenLM's lmplz estimates) extended to fractional pseudo-counts
r >= 0 (e.g. M·θ) in the spirit of Zhang & Chiang, "Kneser-Ney Smoothing on Expected Counts" (ACL
2014): a count r < 1 is a partial occurrence, so

* "seen" becomes min(1, r): continuation counts N1+(• g) = Σ_v min(1, r(v g));
* an n-gram gives up D(r)·min(1, r) with D(r) = D1, D2, D3+ for r < 1.5, < 2.5, >= 2.5
  (:func:`modified_discounts`, Chen & Goodman's estimates from counts-of-counts with r binned to
  the nearest integer). On integer counts this is exactly modified KN.

For an n-gram g = (h, w) with adjusted count a (raw pseudo-count at the top order, continuation
count below; n-grams starting with ``<s>`` keep their raw count, as in lmplz):

    p(w | h) = (a(hw) - D(a(hw)) min(1, a(hw))) / S(h) + γ(h) p(w | h'),   S(h) = Σ_w a(h w),
    γ(h)     = Σ_w D(a(hw)) min(1, a(hw)) / S(h)                       (the ARPA backoff of h),

and at order 1 the lower distribution is uniform over the vocabulary without ``<s>``. Every
context's listed probabilities plus γ(h) times the lower-order mass sum to exactly 1. A context
whose continuations all have zero count (present only for ARPA closure) gets γ(h) = 1.

Owns: fractional-count modified Kneser-Ney (its discounts, adjusted counts, terms and model), the
marginals of top-order counts.
Imports: dpngram.lm.ngram_tables, dpngram.core; numpy, polars.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import polars as pl

from dpngram.core.errors import ArpaError
from dpngram.lm.ngram_tables import (
    BOS,
    BOS_LOGPROB,
    EOS,
    MIN_PROB,
    UNK,
    ArpaModel,
    NgramLinks,
    ngram_context,
    ngram_suffix,
)

D_MIN, D_MAX = 0.05, (0.95, 1.45, 2.45)


DEFAULT_DISCOUNTS = (0.5, 1.0, 1.5)


def _first(col: str = "ngram") -> pl.Expr:
    return pl.col(col).str.extract(r"^([^ ]+)", 1)


def _seen(col: str) -> pl.Expr:
    """min(1, r): a fractional count r < 1 is a partial occurrence."""
    return pl.col(col).clip(None, 1.0)


def modified_discounts(counts: pl.Series) -> tuple[float, float, float]:
    """Chen & Goodman's modified-KN discounts (D1, D2, D3+) from counts-of-counts, with
    fractional counts binned to the nearest integer (n_k = #{r : k - 1/2 <= r < k + 1/2}):
    Y = n1/(n1 + 2 n2), D1 = 1 - 2Y n2/n1, D2 = 2 - 3Y n3/n2, D3+ = 3 - 4Y n4/n3. Clamped so that
    a count is never discounted below 0 (D1 <= 0.95, D2 <= 1.45, D3+ <= 2.45) nor by less than 0.05;
    a missing count-of-count gives the defaults (0.5, 1.0, 1.5)."""
    r = counts.cast(pl.Float64)
    n = [float(((r >= k - 0.5) & (r < k + 0.5)).sum()) for k in (1, 2, 3, 4)]
    if min(n) <= 0:
        return DEFAULT_DISCOUNTS
    y = n[0] / (n[0] + 2 * n[1])
    raw = (1 - 2 * y * n[1] / n[0], 2 - 3 * y * n[2] / n[1], 3 - 4 * y * n[3] / n[2])
    return tuple(min(hi, max(D_MIN, d)) for d, hi in zip(raw, D_MAX, strict=True))  # type: ignore[return-value]


def _discount(col: str, d: tuple[float, float, float]) -> pl.Expr:
    """Mass taken from an n-gram with (pseudo-)count r: D(r) * min(1, r) with D(r) = D1 for r < 1.5,
    D2 for r < 2.5, else D3+ (equals modified KN on integer counts; <= r for every r >= 0)."""
    c = pl.col(col)
    return pl.when(c < 1.5).then(d[0]).when(c < 2.5).then(d[1]).otherwise(d[2]) * _seen(col)


def raw_marginals(top: pl.DataFrame, order: int) -> dict[int, pl.DataFrame]:
    """Raw (pseudo-)counts of every order from top-order counts (``ngram``, ``count``).

    With one ``<s>`` and one ``</s>`` per sentence, every occurrence of an n-gram g not starting
    with ``<s>`` is the suffix of exactly one (n+1)-gram occurrence (v may be ``<s>``), and every
    occurrence of g starting with ``<s>`` (and not ending with ``</s>``) is the prefix of one: so
    r(g) = Σ_v r(v g), and r(<s> g') = Σ_w r(<s> g' w). Exact on complete counts."""
    raw = {order: top.group_by("ngram").agg(pl.col("count").sum()).filter(pl.col("count") > 0)}
    for n in range(order - 1, 0, -1):
        higher = raw[n + 1]
        from_left = higher.group_by(ngram_suffix().alias("ngram")).agg(pl.col("count").sum())
        from_right = (
            higher.filter(_first() == BOS).group_by(ngram_context().alias("ngram")).agg(pl.col("count").sum())
        )
        if n == 1:
            from_right = from_right.with_columns(count=pl.lit(0.0))  # <s> is never predicted
        raw[n] = pl.concat([from_left, from_right]).group_by("ngram").agg(pl.col("count").sum())
    return raw


def _adjusted(raw: dict[int, pl.DataFrame], order: int) -> dict[int, pl.DataFrame]:
    """KN counts: raw at the top order and for n-grams starting with <s>; below, fractional
    continuation counts Σ_v min(1, r(v g))."""
    adjusted = {order: raw[order]}
    for n in range(order - 1, 0, -1):
        cont = raw[n + 1].group_by(ngram_suffix().alias("ngram")).agg(_seen("count").sum().alias("count"))
        starts = raw[n].filter(_first() == BOS)
        adjusted[n] = pl.concat([cont, starts]).group_by("ngram").agg(pl.col("count").sum())
    return adjusted


def _close(tables: dict[int, pl.DataFrame], order: int, vocabulary: Iterable[str]) -> dict[int, pl.DataFrame]:
    """Add zero-count n-grams so that every n-gram's prefix and suffix exist one order below,
    and every vocabulary word plus <s>, </s>, <unk> is a unigram."""
    out = dict(tables)
    for n in range(order, 1, -1):
        needed = pl.concat(
            [out[n].select(ngram_context().alias("ngram")), out[n].select(ngram_suffix().alias("ngram"))]
        ).unique()
        missing = needed.join(out[n - 1].select("ngram"), on="ngram", how="anti")
        if missing.height:
            out[n - 1] = pl.concat([out[n - 1], missing.with_columns(count=pl.lit(0.0))])
    words = pl.DataFrame({"ngram": sorted({*vocabulary, BOS, EOS, UNK})}, schema={"ngram": pl.String})
    missing = words.join(out[1].select("ngram"), on="ngram", how="anti")
    out[1] = pl.concat([out[1], missing.with_columns(count=pl.lit(0.0))])
    return out


def kneser_ney(
    top: pl.DataFrame,
    order: int,
    vocabulary: Iterable[str] = (),
    discounts: dict[int, tuple[float, float, float]] | None = None,
) -> ArpaModel:
    """Interpolated modified Kneser-Ney on fractional counts (module docstring) from top-order
    pseudo-counts.

    ``top``: columns ``ngram`` (``order`` space-joined tokens, with ``<s>`` only first and ``</s>``
    only last) and ``count`` (float >= 0). ``vocabulary``: words that must be unigrams even
    without counts. ``discounts``: fixed (D1, D2, D3+) per order (default: :func:`modified_discounts`)."""
    return kneser_ney_model(kneser_ney_terms(top, order, vocabulary, discounts))


def kneser_ney_terms(
    top: pl.DataFrame,
    order: int,
    vocabulary: Iterable[str] = (),
    discounts: dict[int, tuple[float, float, float]] | None = None,
    prune: float = 0.0,
) -> dict[int, pl.DataFrame]:
    """:func:`kneser_ney` before the uniform distribution's share is fixed: per order, ``ngram``,
    ``a``, ``b`` with p(w|h) = a + b/H (H: the number of predictable unigrams, ``<s>`` excluded)
    and, below the top order, ``gamma`` (the backoff weight of the n-gram as a context).

    Interpolation bottoms out in γ₀/H for every word, and every higher order is affine in the order
    below, so a word without counts added to the vocabulary only raises H:
    :func:`kneser_ney_model` with ``extra_words`` equals :func:`kneser_ney` over the larger
    vocabulary. That lets the public model be fitted once per public corpus and completed per run
    with the run's DP-only words (:func:`dpngram.lm.open_model.open_public_model`).

    ``prune`` > 0 (order >= 2 only): the top-order n-grams with a count at most ``prune`` are left
    out (:func:`_pruned`); everything below the top order, the discounts included, is
    estimated from every n-gram, as without the cut."""
    if prune < 0 or not np.isfinite(prune):
        raise ArpaError(f"prune: must be finite and >= 0 (got {prune})")
    top = _checked_top(top, order)
    adjusted = _close(_adjusted(raw_marginals(top, order), order), order, vocabulary)
    discounts = dict(discounts or {})
    for n in range(1, order + 1):
        adjusted[n] = adjusted[n].group_by("ngram").agg(pl.col("count").sum())
        if n not in discounts:
            discounts[n] = modified_discounts(adjusted[n].filter(pl.col("count") > 0)["count"])
    terms = {1: _unigram_terms(adjusted[1], discounts[1])}
    for n in range(2, order + 1):
        cut = prune if n == order else 0.0
        terms[n - 1], terms[n] = _order_terms(adjusted[n], discounts[n], terms[n - 1], n, cut)
    return {n: t.sort("ngram") for n, t in terms.items()}


def _checked_top(top: pl.DataFrame, order: int) -> pl.DataFrame:
    """``top`` as (String, Float64) columns, or :class:`ArpaError` on a bad order, a negative or NaN
    count, or an n-gram of another length."""
    if order < 1:
        raise ArpaError(f"order: must be >= 1 (got {order})")
    top = top.select(pl.col("ngram").cast(pl.String), pl.col("count").cast(pl.Float64))
    if top.filter(pl.col("count") < 0).height or top.filter(pl.col("count").is_nan()).height:
        raise ArpaError("count: pseudo-counts must be >= 0")
    bad = top.filter(pl.col("ngram").str.split(" ").list.len() != order)
    if bad.height:
        raise ArpaError(f"ngram: {bad.height} row(s) do not have exactly {order} tokens")
    return top


def _unigram_terms(table: pl.DataFrame, d: tuple[float, float, float]) -> pl.DataFrame:
    """Order 1's terms from its adjusted counts: a = (r − D(r))/T, b = γ₀ (T: the total count, γ₀
    the discounted share; with no counts a = 0, γ₀ = 1), and ``<s>`` with a = b = 0."""
    table = table.filter(pl.col("ngram") != BOS)
    total = float(table["count"].sum())
    gamma0 = float(table.select(_discount("count", d).sum()).item()) / total if total > 0 else 1.0
    alpha = (pl.col("count") - _discount("count", d)) / total if total > 0 else pl.lit(0.0)
    t = table.select("ngram", a=alpha, b=pl.lit(gamma0))
    return pl.concat([t, pl.DataFrame({"ngram": [BOS], "a": [0.0], "b": [0.0]})])


def _order_terms(
    table: pl.DataFrame, d: tuple[float, float, float], lower_terms: pl.DataFrame, n: int, prune: float = 0.0
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Order n's terms from its adjusted counts and order n − 1's terms: (order n − 1's terms with
    ``gamma``, each n-gram's backoff weight as a context (1 when it is none), order n's terms).
    ``prune`` > 0: the n-grams :func:`_pruned` selects give their context all of their count and
    get no row."""
    table = table.with_columns(ctx=ngram_context(), suf=ngram_suffix())
    given_up = _discount("count", d)
    if prune > 0:  # a pruned n-gram gives its context all of its count, not only its discount
        given_up = pl.when(_pruned(prune)).then(pl.col("count")).otherwise(given_up)
    ctx = (
        table.group_by("ctx")
        .agg(total=pl.col("count").sum(), seen=given_up.sum())
        .with_columns(
            gamma=pl.when(pl.col("total") > 0).then(pl.col("seen") / pl.col("total")).otherwise(1.0)
        )
    )
    lower_terms = lower_terms.join(
        ctx.select(pl.col("ctx").alias("ngram"), "gamma"), on="ngram", how="left"
    ).with_columns(pl.col("gamma").fill_null(1.0))
    lower = lower_terms.select(pl.col("ngram").alias("suf"), la="a", lb="b")
    own = pl.when(pl.col("total") > 0).then((pl.col("count") - _discount("count", d)) / pl.col("total"))
    kept = table.filter(~_pruned(prune)) if prune > 0 else table
    t = (
        kept.join(ctx, on="ctx", how="left")
        .join(lower, on="suf", how="left")
        .select(
            "ngram",
            a=own.otherwise(0.0) + pl.col("gamma") * pl.col("la"),
            b=pl.col("gamma") * pl.col("lb"),
        )
    )
    if t["a"].null_count():
        raise ArpaError(f"order {n}: a suffix is missing one order below (closure failed)")
    return lower_terms, t


def _pruned(prune: float) -> pl.Expr:
    """The top-order n-grams a pruned model leaves out: a positive count r <= ``prune`` = K (lmplz
    ``--prune 0 … 0 K``; docs/lm.md, "A pruned public model").

    A pruned n-gram (h, w) gives its context all of its count instead of D(r)·min(1, r):
    γ'(h) = (Σ_kept D(r)·min(1, r) + Σ_pruned r) / S(h), and a kept n-gram's probability is
    (r − D(r)·min(1, r))/S(h) + γ'(h)·p(w | h'). A pruned w gets γ'(h)·p(w | h') through the backoff,
    so every context still sums to exactly 1: Σ_kept (r − D·min(1, r))/S(h) + γ'(h)·Σ_w p(w | h') =
    (S(h) − Σ_pruned r − Σ_kept D·min(1, r))/S(h) + γ'(h) = 1. Lower orders, their continuation
    counts and every discount are those of the full counts."""
    return (pl.col("count") > 0) & (pl.col("count") <= prune)


def terms_structure(terms: dict[int, pl.DataFrame]) -> dict[int, pl.DataFrame]:
    """The :meth:`ArpaModel.structure` of the model of :func:`kneser_ney_terms` (without extra
    words), as one frame per order n >= 2 (``context``, ``suffix``, ``word``) that the public-model
    cache can store; no frames when the terms are not closed (the model's checks say why)."""
    try:
        links = ArpaModel({n: t.select("ngram") for n, t in terms.items()}).structure()
    except ArpaError:
        return {}
    return {
        n: pl.DataFrame({"context": k.context, "suffix": k.suffix, "word": k.word}) for n, k in links.items()
    }


def kneser_ney_model(
    terms: dict[int, pl.DataFrame],
    extra_words: Iterable[str] = (),
    structure: dict[int, pl.DataFrame] | None = None,
) -> ArpaModel:
    """The model of :func:`kneser_ney_terms`, its vocabulary grown by ``extra_words`` (words with
    no counts and not yet unigrams): each gets p = γ₀/H, and H counts them. ``structure``: the
    terms' :func:`terms_structure`, when stored; the model then carries its structure (the extra
    unigram rows renumbered) instead of deriving it from the strings when first needed."""
    order = max(terms)
    unigrams = terms[1]
    present = set(unigrams["ngram"].to_list())
    extra = sorted({w for w in extra_words if w not in present})
    if extra:
        gamma0 = float(unigrams.filter(pl.col("ngram") == EOS)["b"].item())
        added = pl.DataFrame({"ngram": extra, "a": [0.0] * len(extra), "b": [gamma0] * len(extra)})
        if order > 1:
            added = added.with_columns(gamma=pl.lit(1.0))
        unigrams = pl.concat([unigrams, added.select(unigrams.columns)]).sort("ngram")
    uniform = 1.0 / (unigrams.height - 1)  # <s> is never predicted
    tables: dict[int, pl.DataFrame] = {}
    for n in range(1, order + 1):
        t = unigrams if n == 1 else terms[n]
        prob = (pl.col("a") + pl.col("b") * uniform).clip(MIN_PROB, 1.0).log10()
        backoff = (
            pl.col("gamma").clip(MIN_PROB, None).log10() if n < order else pl.lit(None, dtype=pl.Float64)
        )
        tables[n] = t.select(
            "ngram",
            logprob=pl.when(pl.col("ngram") == BOS).then(BOS_LOGPROB).otherwise(prob),
            backoff=backoff,
        )
    if not structure or any(
        structure.get(n, tables[1]).height != tables[n].height for n in range(2, order + 1)
    ):
        return ArpaModel(tables)  # none stored (or not the terms'): derived when first needed
    # the terms' unigram rows in the grown unigram table (the higher orders keep their rows)
    grown = tables[1].select("ngram").with_row_index("row")
    row = terms[1].select("ngram").join(grown, on="ngram", how="left", maintain_order="left")["row"]
    row = row.cast(pl.Int64).to_numpy()
    links = {}
    for n, frame in structure.items():
        context, suffix, word = (frame[c].to_numpy().astype(np.int64) for c in ("context", "suffix", "word"))
        links[n] = (
            NgramLinks(row[context], row[suffix], row[word])
            if n == 2
            else NgramLinks(context, suffix, row[word])
        )
    return ArpaModel.with_structure(tables, links)
