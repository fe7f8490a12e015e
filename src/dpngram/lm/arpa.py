"""ARPA language models from (fractional) n-gram pseudo-counts: interpolated modified Kneser-Ney
with fractional counts, an ARPA writer, and an ARPA reader (for validation and tests).

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

ARPA validity rules enforced by :func:`write_arpa` (what KenLM's ``build_binary`` needs): exact
``\\data\\`` counts, every n-gram's context (prefix) and suffix present at order n - 1, ``<s>``,
``</s>``, ``<unk>`` among the unigrams, log10 probabilities <= 0, no backoff column at the top
order. Memory: the tables are polars frames (one row per n-gram), never per-user data.

Why one module (over 600 lines): the tables, their row structure (:class:`NgramLinks`: each
n-gram's context, suffix and word as rows one order down), Kneser-Ney and the ARPA checks, writer
and reader are one representation. Deriving the structure from the strings (``_links``) is what
the checks, the union of two models (:func:`union_ngrams`) and the cached public model
(:func:`terms_structure`) share; split, it would have to be public to each of them.

Owns: :class:`ArpaModel`, its row structure and unions, fractional-count modified Kneser-Ney,
ARPA writing and reading, the sentence markers.
Imports: dpngram.core; numpy, polars.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import polars as pl

from dpngram.core.errors import ArpaError

BOS, EOS, UNK = "<s>", "</s>", "<unk>"


#: log10 probability written for <s> (it is never predicted; the SRILM/KenLM convention).
BOS_LOGPROB = -99.0


D_MIN, D_MAX = 0.05, (0.95, 1.45, 2.45)


DEFAULT_DISCOUNTS = (0.5, 1.0, 1.5)


#: Probabilities are floored here before log10 (a context-closure n-gram can have p ~ 1e-300).
MIN_PROB = 1e-98


@dataclass
class ArpaModel:
    """One frame per order n = 1..N with columns ``ngram`` (space-joined tokens), ``logprob``
    (log10) and ``backoff`` (log10; null at the top order). The tables are not changed after
    construction (:meth:`structure` caches what it derives from them)."""

    tables: dict[int, pl.DataFrame]
    _structure: dict[int, NgramLinks] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def order(self) -> int:
        return max(self.tables)

    def counts(self) -> dict[int, int]:
        return {n: self.tables[n].height for n in sorted(self.tables)}

    @classmethod
    def with_structure(cls, tables: dict[int, pl.DataFrame], structure: dict[int, NgramLinks]) -> ArpaModel:
        """A model whose tables list the same n-grams, in the same rows, as those ``structure``
        was derived from (a model computed row by row from another): its structure is not derived
        again."""
        model = cls(tables)
        model._structure = structure
        return model

    def derived_structure(self) -> dict[int, NgramLinks] | None:
        """:meth:`structure` if it has been derived already (or was given), else None: for callers
        that can use it but should not pay for deriving it (or fail on a model that is not closed)."""
        return self._structure

    def structure(self) -> dict[int, NgramLinks]:
        """Per order n >= 2, each listed n-gram's links one order down (row numbers, computed once
        per model): what lets arithmetic over the whole model (unigram adaptation) run on arrays
        instead of joining n-gram strings per call. Raises :class:`ArpaError` if the model is not
        closed (a context or suffix missing one order below)."""
        if self._structure is None:
            self._structure = {
                n: _links(self.tables[n], self.tables[n - 1], self.tables[1], n)
                for n in range(2, self.order + 1)
            }
        return self._structure


@dataclass(frozen=True)
class NgramLinks:
    """Row numbers, for each row of an order-n table: ``context`` and ``suffix`` (its first and last
    n − 1 words) in the order n − 1 table, ``word`` (its last word) in the unigram table."""

    context: np.ndarray
    suffix: np.ndarray
    word: np.ndarray


def _links(table: pl.DataFrame, lower: pl.DataFrame, unigrams: pl.DataFrame, n: int) -> NgramLinks:
    parts = table.select(ctx=_context(), suf=_suffix(), w=pl.col("ngram").str.extract(r"([^ ]+)$", 1))

    def rows(column: str, target: pl.DataFrame, name: str) -> np.ndarray:
        index = target.select("ngram").with_row_index("row")
        found = parts.select(column).join(
            index, left_on=column, right_on="ngram", how="left", maintain_order="left"
        )["row"]
        if found.null_count():
            missing = parts.filter(found.is_null())[column].n_unique()
            raise ArpaError(f"order {n}: {missing} n-gram {name}(s) missing at order {n - 1}")
        return found.to_numpy().astype(np.int64)

    return NgramLinks(
        rows("ctx", lower, "context"), rows("suf", lower, "suffix"), rows("w", unigrams, "word")
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
    if links is None or not all(_strictly_sorted(t["ngram"]) for t in tables.values()):
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
            new = _links(extra[n], union_tables[n - 1], union_tables[1], n)
            for target, source in zip(arrays, (new.context, new.suffix, new.word), strict=True):
                target[inserted[n]] = source
        structure[n] = NgramLinks(*arrays)
    return ArpaModel.with_structure(union_tables, structure), rows


def _strictly_sorted(column: pl.Series) -> bool:
    return column.len() < 2 or bool((column.slice(1) > column.slice(0, column.len() - 1)).all())


def _context(col: str = "ngram") -> pl.Expr:
    return pl.col(col).str.replace(r" [^ ]+$", "")


def _suffix(col: str = "ngram") -> pl.Expr:
    return pl.col(col).str.replace(r"^[^ ]+ ", "")


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


def ngrams_of_sentences(sentences: pl.Series, order: int, vocabulary: set[str] | None) -> pl.DataFrame:
    """(ngram, count) of sentences (a list[str] series) with one <s> and one </s> per sentence,
    tokens outside ``vocabulary`` mapped to <unk> (None: no mapping); order-n grams with <s> only
    first: a sentence of m tokens gives m + 1 - (n - 2) n-grams for n >= 2 (same convention as
    sql/bayes/occurrences.sql for n = 3)."""
    frame = pl.DataFrame({"toks": sentences}).filter(pl.col("toks").list.len() > 0)
    frame = frame.with_row_index("sid").explode("toks")
    if vocabulary is not None:
        vocab = pl.Series("v", sorted(vocabulary), dtype=pl.String)
        frame = frame.with_columns(
            toks=pl.when(pl.col("toks").is_in(vocab.implode())).then(pl.col("toks")).otherwise(pl.lit(UNK))
        )
    padded = (
        frame.group_by("sid", maintain_order=True)
        .agg(pl.col("toks"))
        .select(toks=pl.concat_list(pl.lit(BOS), pl.col("toks"), pl.lit(EOS)))
    )
    width = max(order, 2)
    # list.len() is unsigned: a sentence shorter than the width would wrap below 0 to ~2^32 starts
    # (order 5 on a one-token sentence asked polars for 34 GB), so the count is signed first
    starts = pl.col("toks").list.len().cast(pl.Int64) - width + 1
    grams = (
        padded.with_columns(start=pl.int_ranges(0, starts))
        .explode("start")
        .drop_nulls("start")
        .select(ngram=pl.col("toks").list.slice(pl.col("start") + (width - order), order).list.join(" "))
    )
    if order == 1:  # unigrams: every predicted token (not <s>)
        grams = grams.filter(pl.col("ngram") != BOS)
    return grams.group_by("ngram").agg(count=pl.len().cast(pl.Float64))


def raw_marginals(top: pl.DataFrame, order: int) -> dict[int, pl.DataFrame]:
    """Raw (pseudo-)counts of every order from top-order counts (``ngram``, ``count``).

    With one ``<s>`` and one ``</s>`` per sentence, every occurrence of an n-gram g not starting
    with ``<s>`` is the suffix of exactly one (n+1)-gram occurrence (v may be ``<s>``), and every
    occurrence of g starting with ``<s>`` (and not ending with ``</s>``) is the prefix of one: so
    r(g) = Σ_v r(v g), and r(<s> g') = Σ_w r(<s> g' w). Exact on complete counts."""
    raw = {order: top.group_by("ngram").agg(pl.col("count").sum()).filter(pl.col("count") > 0)}
    for n in range(order - 1, 0, -1):
        higher = raw[n + 1]
        from_left = higher.group_by(_suffix().alias("ngram")).agg(pl.col("count").sum())
        from_right = (
            higher.filter(_first() == BOS).group_by(_context().alias("ngram")).agg(pl.col("count").sum())
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
        cont = raw[n + 1].group_by(_suffix().alias("ngram")).agg(_seen("count").sum().alias("count"))
        starts = raw[n].filter(_first() == BOS)
        adjusted[n] = pl.concat([cont, starts]).group_by("ngram").agg(pl.col("count").sum())
    return adjusted


def _close(tables: dict[int, pl.DataFrame], order: int, vocabulary: Iterable[str]) -> dict[int, pl.DataFrame]:
    """Add zero-count n-grams so that every n-gram's prefix and suffix exist one order below,
    and every vocabulary word plus <s>, </s>, <unk> is a unigram."""
    out = dict(tables)
    for n in range(order, 1, -1):
        needed = pl.concat(
            [out[n].select(_context().alias("ngram")), out[n].select(_suffix().alias("ngram"))]
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
) -> dict[int, pl.DataFrame]:
    """:func:`kneser_ney` before the uniform distribution's share is fixed: per order, ``ngram``,
    ``a``, ``b`` with p(w|h) = a + b/H (H: the number of predictable unigrams, ``<s>`` excluded)
    and, below the top order, ``gamma`` (the backoff weight of the n-gram as a context).

    Interpolation bottoms out in γ₀/H for every word, and every higher order is affine in the order
    below, so a word without counts added to the vocabulary only raises H:
    :func:`kneser_ney_model` with ``extra_words`` equals :func:`kneser_ney` over the larger
    vocabulary. That lets the public model be fitted once per public corpus and completed per run
    with the run's DP-only words (:func:`dpngram.lm.open_model.open_public_model`)."""
    if order < 1:
        raise ArpaError(f"order: must be >= 1 (got {order})")
    top = top.select(pl.col("ngram").cast(pl.String), pl.col("count").cast(pl.Float64))
    if top.filter(pl.col("count") < 0).height or top.filter(pl.col("count").is_nan()).height:
        raise ArpaError("count: pseudo-counts must be >= 0")
    bad = top.filter(pl.col("ngram").str.split(" ").list.len() != order)
    if bad.height:
        raise ArpaError(f"ngram: {bad.height} row(s) do not have exactly {order} tokens")
    adjusted = _close(_adjusted(raw_marginals(top, order), order), order, vocabulary)
    discounts = dict(discounts or {})
    for n in range(1, order + 1):
        adjusted[n] = adjusted[n].group_by("ngram").agg(pl.col("count").sum())
        if n not in discounts:
            discounts[n] = modified_discounts(adjusted[n].filter(pl.col("count") > 0)["count"])

    terms: dict[int, pl.DataFrame] = {}
    for n in range(1, order + 1):
        d = discounts[n]
        table = adjusted[n]
        if n == 1:
            table = table.filter(pl.col("ngram") != BOS)
            total = float(table["count"].sum())
            gamma0 = float(table.select(_discount("count", d).sum()).item()) / total if total > 0 else 1.0
            alpha = (pl.col("count") - _discount("count", d)) / total if total > 0 else pl.lit(0.0)
            t = table.select("ngram", a=alpha, b=pl.lit(gamma0))
            t = pl.concat([t, pl.DataFrame({"ngram": [BOS], "a": [0.0], "b": [0.0]})])
        else:
            table = table.with_columns(ctx=_context(), suf=_suffix())
            ctx = (
                table.group_by("ctx")
                .agg(total=pl.col("count").sum(), seen=_discount("count", d).sum())
                .with_columns(
                    gamma=pl.when(pl.col("total") > 0).then(pl.col("seen") / pl.col("total")).otherwise(1.0)
                )
            )
            terms[n - 1] = (
                terms[n - 1]
                .join(ctx.select(pl.col("ctx").alias("ngram"), "gamma"), on="ngram", how="left")
                .with_columns(pl.col("gamma").fill_null(1.0))
            )
            lower = terms[n - 1].select(pl.col("ngram").alias("suf"), la="a", lb="b")
            own = pl.when(pl.col("total") > 0).then(
                (pl.col("count") - _discount("count", d)) / pl.col("total")
            )
            t = (
                table.join(ctx, on="ctx", how="left")
                .join(lower, on="suf", how="left")
                .select(
                    "ngram",
                    a=own.otherwise(0.0) + pl.col("gamma") * pl.col("la"),
                    b=pl.col("gamma") * pl.col("lb"),
                )
            )
            if t["a"].null_count():
                raise ArpaError(f"order {n}: a suffix is missing one order below (closure failed)")
        terms[n] = t
    return {n: t.sort("ngram") for n, t in terms.items()}


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


def model_from_probabilities(
    probs: dict[int, pl.DataFrame], gammas: dict[int, pl.DataFrame], order: int
) -> ArpaModel:
    """ARPA tables from probabilities ``probs[n]`` (``ngram``, ``prob``) and backoff weights
    ``gammas[n]`` (``ngram`` = a context of order n − 1, ``gamma``): log10 values, ``<s>`` at
    :data:`BOS_LOGPROB`, probabilities floored at :data:`MIN_PROB`, backoff 1 (log10 0) for a
    context with no entry, no backoff column at the top order."""
    tables: dict[int, pl.DataFrame] = {}
    for n in range(1, order + 1):
        t = probs[n].with_columns(
            logprob=pl.when(pl.col("ngram") == BOS)
            .then(BOS_LOGPROB)
            .otherwise(pl.col("prob").clip(MIN_PROB, 1.0).log10())
        )
        if n < order:
            g = gammas.get(n + 1, pl.DataFrame(schema={"ngram": pl.String, "gamma": pl.Float64}))
            t = t.join(g, on="ngram", how="left").with_columns(
                backoff=pl.col("gamma").fill_null(1.0).clip(MIN_PROB, None).log10()
            )
        else:
            t = t.with_columns(backoff=pl.lit(None, dtype=pl.Float64))
        tables[n] = t.select("ngram", "logprob", "backoff").sort("ngram")
    return ArpaModel(tables)


def check_model(model: ArpaModel, *, links: bool = True) -> None:
    """Raise :class:`ArpaError` unless the tables satisfy the ARPA rules (module docstring).
    Closure is tested by deriving the model's structure (kept: what adapting, mixing or scoring it
    needs next), or with ``links=False`` by membership only, for a model read just to be checked
    (the model.arpa suite: 0.36 s against 0.68 s on SOTU's model)."""
    order = model.order
    if sorted(model.tables) != list(range(1, order + 1)):
        raise ArpaError("orders: every order 1..N must be present")
    unigrams = set(model.tables[1]["ngram"].to_list())
    for marker in (BOS, EOS, UNK):
        if marker not in unigrams:
            raise ArpaError(f"unigrams: {marker} is missing")
    for n, t in model.tables.items():
        # strictly sorted (every table this package builds) is unique, and cheaper to see than hashing
        if not _strictly_sorted(t["ngram"]) and t["ngram"].n_unique() != t.height:
            raise ArpaError(f"order {n}: duplicate n-grams")
        if t.filter(pl.col("logprob") > 0).height or t["logprob"].null_count():
            raise ArpaError(f"order {n}: log10 probabilities must be <= 0")
        if n == order and t["backoff"].null_count() != t.height:
            raise ArpaError(f"order {n}: the top order has no backoff")
    if links or model.derived_structure() is not None:
        model.structure()  # closure: every context and suffix listed one order below
    else:
        _check_closed(model)


def _check_closed(model: ArpaModel) -> None:
    """Closure (every n-gram's context and suffix, its first and last n - 1 words, listed one order
    below) by two membership tests per order, without deriving the row links."""
    for n in range(2, model.order + 1):
        lower = model.tables[n - 1]["ngram"].implode()
        parts = model.tables[n].select(context=_context(), suffix=_suffix())
        for name in ("context", "suffix"):
            missing = parts.filter(~pl.col(name).is_in(lower))[name].n_unique()
            if missing:
                raise ArpaError(f"order {n}: {missing} n-gram {name}(s) missing at order {n - 1}")


@dataclass(frozen=True)
class WrittenArpa:
    """An ARPA file as :func:`write_arpa` wrote it: the model (its tables checked by the ARPA rules
    before writing), the counts declared in ``\\data\\`` and the SHA-256 of the bytes written."""

    model: ArpaModel
    declared: dict[int, int]
    sha256: str


class _HashingWriter:
    """A binary file that also feeds every byte written to a hash (polars writes through ``write``)."""

    def __init__(self, fh: BinaryIO, digest: Any) -> None:
        self._fh, self._digest = fh, digest

    def write(self, data: bytes) -> int:
        self._digest.update(data)
        return self._fh.write(data)

    def flush(self) -> None:
        self._fh.flush()


def write_arpa(model: ArpaModel, path: str | os.PathLike[str], *, digest: Any = None) -> dict[int, int]:
    """Check the rules, then write the ARPA file (atomically: ``path.tmp`` then rename). Returns
    the counts per order written in ``\\data\\``. ``digest`` (a ``hashlib`` object, optional) is
    updated with every byte written: step ``lm`` validates the tables it wrote and tells the file
    apart from them by that digest (:func:`dpngram.validation.validate_model`)."""
    check_model(model)
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    counts = model.counts()
    with open(tmp, "wb") as raw:
        fh: Any = raw if digest is None else _HashingWriter(raw, digest)
        fh.write(b"\\data\\\n")
        for n, c in counts.items():
            fh.write(f"ngram {n}={c}\n".encode())
        for n in counts:
            fh.write(f"\n\\{n}-grams:\n".encode())
            t = model.tables[n]
            cols = [pl.col("logprob").round(7).cast(pl.String), pl.col("ngram")]
            if n < model.order:
                cols.append(pl.col("backoff").round(7).cast(pl.String))
            # one line per n-gram, written by polars (no Python string per line)
            lines = t.select(pl.concat_str(cols, separator="\t").alias("line"))
            lines.write_csv(fh, include_header=False, quote_style="never")
            if not t.height:
                fh.write(b"\n")
        fh.write(b"\n\\end\\\n")
    os.replace(tmp, target)
    return counts


def read_arpa(path: str | os.PathLike[str]) -> tuple[dict[int, int], ArpaModel]:
    """Parse an ARPA file: (counts declared in ``\\data\\``, the tables as read). Raises
    :class:`ArpaError` on a malformed file (one line, no data values).

    A file laid out as :func:`write_arpa` and KenLM write it is parsed column-wise by polars
    (:func:`_read_regular_arpa`); anything else goes through the line-by-line reader, which also
    names the first bad line."""
    regular = _read_regular_arpa(path)
    return regular if regular is not None else _read_arpa_lines(path)


def _read_regular_arpa(path: str | os.PathLike[str]) -> tuple[dict[int, int], ArpaModel] | None:
    """The fast path of :func:`read_arpa`, or None when the file is not regular: the first
    non-blank line ``\\data\\``, then only ``ngram N=C`` lines, then ``\\N-grams:`` sections of
    2- or 3-field tab-separated lines with numeric fields, then ``\\end\\``."""
    try:
        # every line whole, read by polars' parallel CSV reader (a byte that separates no field in
        # an ARPA file, no quoting); a line holding that byte, or bytes that are not UTF-8, makes
        # this fail and the line-by-line reader decide. SOTU's model: 0.1 s against 0.5 s for
        # str.split of the whole file.
        lines = pl.read_csv(
            path, has_header=False, separator="\x01", quote_char=None, schema={"line": pl.String}
        )
    except (pl.exceptions.PolarsError, UnicodeDecodeError, OSError):
        return None
    lines = lines.with_row_index("i").filter(pl.col("line").str.strip_chars() != "")
    ends = lines.filter(pl.col("line") == "\\end\\")["i"]
    if not ends.len() or not lines.height or lines["line"][0] != "\\data\\":
        return None
    lines = lines.filter(pl.col("i") < ends[0]).slice(1)
    header = pl.col("line").str.starts_with("\\") & pl.col("line").str.ends_with("-grams:")
    headers = lines.with_row_index("pos").filter(header)
    if not headers.height:
        return None
    data = lines.slice(0, int(headers["pos"][0]))["line"]
    if not data.str.contains(r"^ngram [0-9]+=[0-9]+$").all():
        return None
    declared = {int(n): int(c) for n, c in (line[6:].split("=") for line in data.to_list())}
    bounds = [*headers["pos"].to_list(), lines.height]
    tables: dict[int, pl.DataFrame] = {}
    for k, name in enumerate(headers["line"].to_list()):
        order = name[1:-7]
        if not order.isdigit() or int(order) in tables:
            return None
        rows = lines.slice(bounds[k] + 1, bounds[k + 1] - bounds[k] - 1).select(
            tabs=pl.col("line").str.count_matches("\t", literal=True),
            fields=pl.col("line").str.split_exact("\t", 2),
        )
        if not rows["tabs"].is_between(1, 2).all():
            return None
        table = rows.unnest("fields").select(
            ngram=pl.col("field_1"),
            logprob=pl.col("field_0").cast(pl.Float64, strict=False),
            backoff=pl.col("field_2").cast(pl.Float64, strict=False),
            bad=(pl.col("field_0").cast(pl.Float64, strict=False).is_null())
            | (pl.col("field_2").is_not_null() & pl.col("field_2").cast(pl.Float64, strict=False).is_null()),
        )
        if table["bad"].any():
            return None
        tables[int(order)] = table.drop("bad")
    return declared, ArpaModel(dict(sorted(tables.items())))


def _read_arpa_lines(path: str | os.PathLike[str]) -> tuple[dict[int, int], ArpaModel]:
    """:func:`read_arpa` line by line (any layout the format allows; names the first bad line)."""
    declared: dict[int, int] = {}
    rows: dict[int, list[tuple[str, float, float | None]]] = {}
    section: int | None = None
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if line == "\\data\\":
                section = 0
                continue
            if line == "\\end\\":
                break
            if line.startswith("\\") and line.endswith("-grams:"):
                try:
                    section = int(line[1:-7])
                except ValueError:
                    raise ArpaError(f"line {line_no}: bad section header") from None
                rows.setdefault(section, [])
                continue
            if section == 0:
                if not line.startswith("ngram "):
                    raise ArpaError(f"line {line_no}: bad \\data\\ line")
                n, c = line[6:].split("=")
                declared[int(n)] = int(c)
                continue
            if section is None:
                raise ArpaError(f"line {line_no}: text before \\data\\")
            fields = line.split("\t")
            if len(fields) not in (2, 3):
                raise ArpaError(f"line {line_no}: expected 2 or 3 tab-separated fields")
            try:
                logprob = float(fields[0])
                backoff = float(fields[2]) if len(fields) == 3 else None
            except ValueError:
                raise ArpaError(f"line {line_no}: non-numeric probability or backoff") from None
            rows[section].append((fields[1], logprob, backoff))
    tables = {
        n: pl.DataFrame(
            r, schema={"ngram": pl.String, "logprob": pl.Float64, "backoff": pl.Float64}, orient="row"
        )
        for n, r in sorted(rows.items())
    }
    return declared, ArpaModel(tables)
