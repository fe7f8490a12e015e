"""The in-memory backoff model: :class:`ArpaModel` (one polars frame per order, log10
probabilities and backoffs as an ARPA file lists them), its row structure (:class:`NgramLinks`:
each n-gram's context, suffix and word as row numbers one order down) and the sentence markers.

Every other step of ``lm`` reads or builds these tables: Kneser-Ney (:mod:`dpngram.lm.kneser_ney`),
the mixture (:mod:`dpngram.lm.mixture`), the ARPA file (:mod:`dpngram.lm.arpa_file`), the scorer
(:mod:`dpngram.lm.backoff_scorer`). The n-gram string helpers (:func:`ngram_context`,
:func:`ngram_suffix`) and :func:`ngram_links` are public because they do. Memory: one row per
n-gram, never per-user data.

Owns: :class:`ArpaModel`, :class:`NgramLinks`, the sentence markers, :data:`BOS_LOGPROB`,
:data:`MIN_PROB`, tables from probabilities.
Imports: dpngram.core; numpy, polars.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from dpngram.core.errors import ArpaError

BOS, EOS, UNK = "<s>", "</s>", "<unk>"


#: log10 probability written for <s> (it is never predicted; the SRILM/KenLM convention).
BOS_LOGPROB = -99.0


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
                n: ngram_links(self.tables[n], self.tables[n - 1], self.tables[1], n)
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


def ngram_links(table: pl.DataFrame, lower: pl.DataFrame, unigrams: pl.DataFrame, n: int) -> NgramLinks:
    """The links of ``table``'s order-n rows: their contexts and suffixes found in ``lower`` (order
    n − 1), their words in ``unigrams``, by joining the strings. Raises :class:`ArpaError` naming
    how many are missing (the tables are not closed)."""
    parts = table.select(
        ctx=ngram_context(), suf=ngram_suffix(), w=pl.col("ngram").str.extract(r"([^ ]+)$", 1)
    )

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


def strictly_sorted(column: pl.Series) -> bool:
    """Whether the strings rise strictly (so they are unique too): every table this package builds."""
    return column.len() < 2 or bool((column.slice(1) > column.slice(0, column.len() - 1)).all())


def ngram_context(col: str = "ngram") -> pl.Expr:
    """An n-gram's context: its first n − 1 words (the whole n-gram for a unigram)."""
    return pl.col(col).str.replace(r" [^ ]+$", "")


def ngram_suffix(col: str = "ngram") -> pl.Expr:
    """An n-gram's suffix: its last n − 1 words (the whole n-gram for a unigram)."""
    return pl.col(col).str.replace(r"^[^ ]+ ", "")


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


def unigram_distribution(model: ArpaModel) -> pl.DataFrame:
    """The model's unigram probabilities (``ngram``, ``prob``; ``<s>`` has 0)."""
    return model.tables[1].select(
        "ngram",
        prob=pl.when(pl.col("ngram") == BOS).then(0.0).otherwise(pl.lit(10.0).pow(pl.col("logprob"))),
    )
