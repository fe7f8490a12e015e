"""The open-vocabulary language model's two components: a public Kneser-Ney model P and a model Q
estimated from the run's DP-noisy n-gram counts (step ``lm_counts``); their mixture, written as
one ARPA backoff model, is :mod:`dpngram.lm.mixture` (docs/lm.md, "Open-vocabulary model").

Everything here is post-processing: inputs are the public corpus, released DP outputs (the DP
vocabulary, the noisy counts, the selected weight λ) and public parameters. No private data.

* :func:`model_vocabulary` — V_LM = DP vocabulary ∪ the public corpus's words (at most
  ``public_cap`` of them, by public count): a word public text knows never becomes ``<unk>``.
* :func:`public_counts` — order-1..N counts of the public corpus with V_LM's ``<unk>`` mapping.
* :func:`public_model` — P: interpolated modified Kneser-Ney on the public counts
  (:func:`dpngram.lm.kneser_ney.kneser_ney`).
* :func:`noisy_count_model` — Q: interpolated absolute discounting on noisy counts whose context
  totals are the noisy counts of the contexts themselves; its unigram level spreads the mass left
  below the threshold in P's shape or by empirical-Bayes counts (:mod:`dpngram.lm.unigram_shrinkage`),
  so with no private evidence Q's unigram level is P's.

Owns: the model vocabulary V_LM, the public corpus's n-gram counts, the public model P, the
noisy-count model Q, the held-out public split (:data:`HELDOUT_EVERY`).
Imports: dpngram.lm.ngram_tables, dpngram.lm.kneser_ney, dpngram.lm.unigram_shrinkage,
dpngram.text, dpngram.core; polars.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from dpngram.core.errors import ArpaError
from dpngram.lm.kneser_ney import (
    kneser_ney,
    kneser_ney_model,
    kneser_ney_terms,
    raw_marginals,
    terms_structure,
)
from dpngram.lm.ngram_tables import (
    BOS,
    EOS,
    UNK,
    ArpaModel,
    model_from_probabilities,
    ngram_context,
    ngram_suffix,
    unigram_distribution,
)
from dpngram.lm.unigram_shrinkage import unresolved_shape

MARKERS = (BOS, EOS, UNK)


PUBLIC_BATCH_SENTENCES = 100_000


#: Every HELDOUT_EVERY-th public sentence (index % HELDOUT_EVERY == HELDOUT_EVERY - 1) is the
#: model card's held-out public text, and no model of a run trains on it: P, and so the released
#: model, is fitted on the rest (:data:`RELEASED_PART`), so the card scores the released model
#: itself and P on it (:func:`dpngram.lm.build.heldout_public_metrics`). 1 in 100 costs the
#: released model about 0.25% open-vocabulary perplexity on SOTU against a P fitted on every
#: sentence (docs/lm.md, "What leaving the held-out lines out costs").
HELDOUT_EVERY = 100

#: The public sentences P is fitted on in a run (every stage): all but the held-out ones.
RELEASED_PART = "train"


def public_sentence_batches(
    path: str | os.PathLike[str], lowercase: bool = True, part: str = "train"
) -> Iterator[pl.Series]:
    """Sentences of the public corpus as polars ``list[str]`` batches
    (:func:`dpngram.text.public.read_public_batches`): ``part`` 'train' (all but every
    :data:`HELDOUT_EVERY`-th sentence, counted over the whole file), 'heldout' (those) or 'all'."""
    from dpngram.text.public import read_public_batches

    if part not in ("train", "heldout", "all"):
        raise ValueError(f"part must be 'train', 'heldout' or 'all' (got {part!r})")
    offset = 0
    for batch in read_public_batches(path, lowercase):
        size = batch.len()
        if part != "all":
            index = pl.int_range(offset, offset + size, eager=True)
            held = (index % HELDOUT_EVERY) == HELDOUT_EVERY - 1
            batch = batch.filter(held if part == "heldout" else ~held)
        offset += size
        if batch.len():
            yield batch


def public_sentences(path: str | os.PathLike[str], lowercase: bool = True, part: str = "train"):
    """:func:`public_sentence_batches` one sentence (a Python token list) at a time."""
    for batch in public_sentence_batches(path, lowercase, part):
        yield from batch.to_list()


def write_heldout_text(
    path: str | os.PathLike[str], target: str | os.PathLike[str], lowercase: bool = True
) -> int:
    """The held-out public sentences as a text file (one tokenised sentence a line); returns how many."""
    n = 0
    with open(target, "w", encoding="utf-8") as fh:
        for batch in public_sentence_batches(path, lowercase, "heldout"):
            lines = batch.list.join(" ")
            fh.write("\n".join(lines.to_list()) + "\n")
            n += lines.len()
    return n


class _SummedCounts:
    """A running ``(key, count)`` sum fed batch by batch. Batches wait in a list and are merged
    into the total (one concat + group-by) only when they hold as many rows as the total does, so
    every row takes part in O(log batches) merges; merging at every batch re-aggregated the whole
    running total each time, a cost quadratic in the corpus (with the polars batches, one build of
    P is 27-38% faster: benchmarks/results/lm_public.json)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.total: pl.DataFrame | None = None
        self.pending: list[pl.DataFrame] = []
        self.pending_rows = 0

    def add(self, frame: pl.DataFrame) -> None:
        self.pending.append(frame)
        self.pending_rows += frame.height
        if self.pending_rows >= max(MERGE_MIN_ROWS, self.total.height if self.total is not None else 0):
            self._merge()

    def _merge(self) -> None:
        parts = ([self.total] if self.total is not None else []) + self.pending
        if parts:
            self.total = pl.concat(parts).group_by(self.key).agg(pl.col("count").sum())
        self.pending, self.pending_rows = [], 0

    def result(self) -> pl.DataFrame | None:
        self._merge()
        return self.total


#: Rows of waiting batch counts below which :class:`_SummedCounts` does not merge.
MERGE_MIN_ROWS = 1_000_000


def public_word_counts(
    path: str | os.PathLike[str], lowercase: bool = True, part: str = "all"
) -> Counter[str]:
    """Token counts of the public corpus (``part``: see :func:`public_sentence_batches`)."""
    summed = _SummedCounts("token")
    for batch in public_sentence_batches(path, lowercase, part):
        tokens = batch.explode().drop_nulls().rename("token")
        summed.add(tokens.value_counts(name="count").with_columns(pl.col("count").cast(pl.Int64)))
    total = summed.result()
    if total is None:
        return Counter()
    return Counter(dict(zip(total["token"].to_list(), total["count"].to_list(), strict=True)))


def model_vocabulary(
    dp_vocabulary: Iterable[str], public_words: Mapping[str, float] | pl.DataFrame | None, public_cap: int
) -> list[str]:
    """V_LM: the DP vocabulary ∪ the ``public_cap`` most frequent public words (ties broken by the
    word, so the choice is deterministic), without the markers. ``public_words``: word -> count, or
    a frame (``ngram``, ``count``) of them (the public unigram counts as read: ranked in polars,
    without a Python tuple per word). Public data and a DP output only."""
    words = {w for w in dp_vocabulary if w and w not in MARKERS}
    if public_words is not None and len(public_words) and public_cap > 0:
        frame = (
            public_words.select(word=pl.col("ngram"), count=pl.col("count"))
            if isinstance(public_words, pl.DataFrame)
            else pl.DataFrame(
                {"word": list(public_words), "count": list(public_words.values())},
                schema={"word": pl.String, "count": pl.Float64},
            )
        )
        # by count, then by the word (polars compares UTF-8 bytes: code point order, as str does)
        top = (
            frame.filter(~pl.col("word").is_in(list(MARKERS)))
            .sort(["count", "word"], descending=[True, False])
            .head(public_cap)
        )
        words.update(top["word"].to_list())
    return sorted(words)


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


def sentence_ngram_counts(
    sentences: Iterable[list[str]], order: int, vocabulary: Iterable[str] | None = None
) -> dict[int, pl.DataFrame]:
    """Counts (``ngram``, ``count``) of every order 1..``order`` of token lists, in batches of
    :data:`PUBLIC_BATCH_SENTENCES` (:func:`batch_ngram_counts`)."""

    def batches() -> Iterator[pl.Series]:
        batch: list[list[str]] = []
        for sentence in sentences:
            batch.append(sentence)
            if len(batch) >= PUBLIC_BATCH_SENTENCES:
                yield pl.Series("toks", batch, dtype=pl.List(pl.String))
                batch = []
        if batch:
            yield pl.Series("toks", batch, dtype=pl.List(pl.String))

    return batch_ngram_counts(batches(), order, vocabulary)


def batch_ngram_counts(
    batches: Iterable[pl.Series], order: int, vocabulary: Iterable[str] | None = None
) -> dict[int, pl.DataFrame]:
    """Counts (``ngram``, ``count``) of every order 1..``order`` of sentence batches (``list[str]``
    series); tokens outside ``vocabulary`` mapped to ``<unk>`` (None: no mapping), one
    ``<s>``/``</s>`` per sentence (order 1 has no ``<s>``).

    At order 2 or 3 only the top order is counted: every non-empty sentence, padded, has at least
    one n-gram of that order, so the lower orders are its marginals, exactly
    (:func:`dpngram.lm.kneser_ney.raw_marginals`; tests/test_lm_public_cache.py). A pass per order cost
    Brown 1.9 s against 1.1 s. Longer orders count every order (a short sentence has no top-order
    n-gram)."""
    vocab = None if vocabulary is None else set(vocabulary)
    counted = [order] if 1 < order <= 3 else list(range(1, order + 1))
    totals = {n: _SummedCounts("ngram") for n in counted}
    for batch in batches:
        # at most PUBLIC_BATCH_SENTENCES at a time: the n-gram expansion of a batch is several
        # times its size (a reader batch of 16 MB of text peaked at 1.6x the memory of 100k)
        for start in range(0, batch.len(), PUBLIC_BATCH_SENTENCES):
            chunk = batch.slice(start, PUBLIC_BATCH_SENTENCES)
            for n, summed in totals.items():
                summed.add(ngrams_of_sentences(chunk, n, vocab))
    empty = pl.DataFrame(schema={"ngram": pl.String, "count": pl.Float64})
    counts = {n: (t if (t := summed.result()) is not None else empty) for n, summed in totals.items()}
    if len(counted) == order:
        return counts
    raw = raw_marginals(counts[order], order)
    raw[1] = raw[1].filter(pl.col("ngram") != BOS)  # <s> is never predicted: not a counted unigram
    return {n: raw[n] for n in range(1, order + 1)}


def public_counts(
    path: str | os.PathLike[str],
    order: int,
    vocabulary: Iterable[str],
    lowercase: bool = True,
    part: str = "all",
) -> dict[int, pl.DataFrame]:
    """:func:`batch_ngram_counts` of the public corpus (``part``) with ``vocabulary``'s ``<unk>``
    mapping."""
    return batch_ngram_counts(public_sentence_batches(path, lowercase, part), order, vocabulary)


def raw_public_counts(
    path: str | os.PathLike[str],
    order: int,
    lowercase: bool = True,
    part: str = "all",
    cache_dir: Path | None = None,
    digest: str | None = None,
) -> dict[int, pl.DataFrame]:
    """Order-1..``order`` counts of the public corpus (``part``) with no vocabulary mapping, except
    that a literal ``<s>`` or ``</s>`` token reads as ``<unk>`` (so the markers in an n-gram are
    always sentence padding, and :func:`dpngram.lm.public_cache.map_to_vocabulary` of these counts
    equals :func:`public_counts` with the same vocabulary). Through the disk cache when
    ``cache_dir`` is given (keyed by the corpus file's SHA-256, ``digest`` when the caller has it)."""
    from dpngram.lm.public_cache import cached_tables, entry_key, file_digest

    def batches(of: str) -> Iterator[pl.Series]:
        marker = pl.element().is_in([BOS, EOS])
        for batch in public_sentence_batches(path, lowercase, of):
            yield batch.list.eval(pl.when(marker).then(pl.lit(UNK)).otherwise(pl.element()))

    def count() -> dict[int, pl.DataFrame]:
        if part != "all" or not cache_dir:
            return batch_ngram_counts(batches(part), order, None)
        # all = train + heldout (counts add over sentences): with a cache the train part's counts
        # are there (every run's P is fitted on them), so only the held-out 1/HELDOUT_EVERY is
        # counted for the whole corpus's (the public-only baseline on lm_eval_text)
        train = raw_public_counts(path, order, lowercase, RELEASED_PART, cache_dir, digest)
        held = batch_ngram_counts(batches("heldout"), order, None)
        return {n: _with(train[n], held[n]) for n in train}

    if cache_dir and digest is None:
        digest = file_digest(path)
    key = entry_key("public-counts", digest, split_key(part), lowercase, order) if cache_dir else ""
    return cached_tables(cache_dir, "counts", key, count)


def split_key(part: str) -> str:
    """A part of the public corpus as cache keys name it: with the held-out rate, so an entry of
    one split is never read for another."""
    return part if part == "all" else f"{part}/1-in-{HELDOUT_EVERY}"


def _with(one: pl.DataFrame, other: pl.DataFrame) -> pl.DataFrame:
    """The counts of two disjoint sets of sentences added (exact: integer counts held as floats)."""
    return (
        pl.concat([one, other.select(one.columns).cast(one.schema)])
        .group_by("ngram")
        .agg(pl.col("count").sum())
    )


def open_public_model(
    dp_vocabulary: Iterable[str], public_path: str | None, **options: Any
) -> tuple[list[str], dict[int, pl.DataFrame], ArpaModel]:
    """(V_LM, public counts per order, P): :func:`_open_public_model` (``options``: its keywords)
    without its cache key."""
    vocabulary, counts, model, _, _ = _open_public_model(dp_vocabulary, public_path, **options)
    return vocabulary, counts, model


def public_model_and_frequent(
    dp_vocabulary: Iterable[str], public_path: str | None, *, frequent_cap: int, **options: Any
) -> tuple[list[str], ArpaModel, dict[int, pl.DataFrame], list[str]]:
    """(V_LM, P, the ``frequent_cap`` most frequent public n-grams of each order 2..N as
    :func:`most_frequent` picks them, V_LM's public words): the counting domain's public part
    (stage ``lm_counts``; ``options``: :func:`_open_public_model`'s keywords). The picks are sorted
    by the n-gram, with their words' codes over the public words
    (:func:`dpngram.lm.public_cache.word_codes`). With a cache they are stored beside P's terms,
    under the same key plus the cap: they depend on nothing else (the counts over the public words
    V_LM keeps), and picking them from the 1.3M n-grams of Brown cost about 0.09 s a run."""
    from dpngram.lm.public_cache import cached_tables, entry_key, word_codes

    vocabulary, counts, model, key, public_words = _open_public_model(dp_vocabulary, public_path, **options)
    frequent = cached_tables(
        options.get("cache_dir") if key else None,
        "frequent",
        entry_key(key, frequent_cap, "sorted, word codes"),
        lambda: {
            n: word_codes(most_frequent(counts[n], frequent_cap).sort("ngram"), public_words, n)
            for n in range(2, options["order"] + 1)
        },
    )
    return vocabulary, model, frequent, public_words


def most_frequent(counts: pl.DataFrame, cap: int) -> pl.DataFrame:
    """The ``cap`` n-grams with the largest counts, ties broken by the n-gram string (as sorting by
    (count descending, ngram) and keeping the first ``cap`` rows), in no particular order: a
    partial sort, where sorting every public n-gram's string took seconds."""
    return counts.top_k(cap, by=["count", "ngram"], reverse=[False, True]).select("ngram")


def _open_public_model(
    dp_vocabulary: Iterable[str],
    public_path: str | None,
    *,
    order: int,
    public_cap: int,
    lowercase: bool = True,
    part: str = RELEASED_PART,
    cache_dir: Path | None = None,
    public_prune: int = 0,
) -> tuple[list[str], dict[int, pl.DataFrame], ArpaModel, str, list[str]]:
    """(V_LM, public counts per order, P, cache key, V_LM's public words) from the DP vocabulary
    and the public corpus (or none).
    ``part``: :data:`RELEASED_PART` (the default: without the held-out sentences, as every stage
    fits P) or 'all' (every sentence: the public-only baseline on ``lm_eval_text``).
    ``cache_dir``: the public-model cache (:mod:`dpngram.lm.public_cache`; None: no cache): the
    corpus's raw counts are read from it (or counted once and stored), and P's Kneser-Ney terms are
    fitted once per (corpus, part, order, the public words V_LM keeps), then completed with the
    run's DP-only words (:func:`dpngram.lm.kneser_ney.kneser_ney_terms`: the same P as a fit over all of
    V_LM). ``public_prune`` K > 0: P's top-order n-grams seen at most K times are left out
    (:func:`dpngram.lm.kneser_ney.kneser_ney_terms`; the counts returned are all of them). Also
    returns that cache key ("" without a cache)."""
    from dpngram.lm.public_cache import cached_tables, file_digest, map_to_vocabulary

    empty = pl.DataFrame(schema={"ngram": pl.String, "count": pl.Float64})
    if not public_path:
        vocabulary = model_vocabulary(dp_vocabulary, None, public_cap)
        counts = {n: empty for n in range(1, order + 1)}
        return vocabulary, counts, public_model(counts, order, vocabulary), "", []
    digest = file_digest(public_path) if cache_dir else None  # hashed once for both entries
    raw = raw_public_counts(public_path, order, lowercase, part, cache_dir, digest)
    unigrams = raw[1].filter(~pl.col("ngram").is_in(list(MARKERS)))
    words = set(unigrams["ngram"].to_list())
    vocabulary = model_vocabulary(dp_vocabulary, unigrams, public_cap)
    counts = map_to_vocabulary(raw, vocabulary)
    # P is fitted over the public words V_LM keeps (what the counts depend on) and completed with
    # the DP-only words, which have no public counts (kneser_ney_terms): the fit is cached per
    # public corpus, not per run, whenever V_LM keeps the same public words.
    public_words = [w for w in vocabulary if w in words]
    dp_only = [w for w in vocabulary if w not in words]
    key = _terms_key(digest, part, lowercase, order, public_words, public_prune) if cache_dir else ""
    terms = cached_tables(
        cache_dir,
        "models",
        key,
        lambda: kneser_ney_terms(counts[order], order, public_words, prune=public_prune),
    )
    # P's structure (each n-gram's context, suffix and word rows), stored beside its terms: a run
    # would otherwise derive it from P's strings (~1 s on Brown) for every P it adapts, mixes or writes
    structure = (
        cached_tables(cache_dir, "structure", key, lambda: terms_structure(terms)) if cache_dir else None
    )
    return vocabulary, counts, kneser_ney_model(terms, dp_only, structure), key, public_words


def _terms_key(
    digest: str | None, part: str, lowercase: bool, order: int, public_words: list[str], public_prune: int
) -> str:
    """The cache key of P's Kneser-Ney terms (the keys of unpruned terms are those from before the
    pruning option)."""
    from dpngram.lm.public_cache import entry_key, vocabulary_digest

    pruned = (f"pruned <= {public_prune}",) if public_prune else ()
    return entry_key(
        "public-kn-terms", digest, split_key(part), lowercase, order, vocabulary_digest(public_words), *pruned
    )


def public_model(counts: dict[int, pl.DataFrame], order: int, vocabulary: Iterable[str]) -> ArpaModel:
    """P: interpolated modified Kneser-Ney on the public top-order counts over ``vocabulary``."""
    top = counts[order]
    if top.height == 0:  # no public text: a uniform model over the vocabulary
        top = pl.DataFrame(schema={"ngram": pl.String, "count": pl.Float64})
    return kneser_ney(top, order, vocabulary)


def noisy_count_model(
    noisy: pl.DataFrame,
    base: ArpaModel,
    order: int,
    *,
    threshold: float,
    discount: float,
    unresolved: str = "public",
    sigma: float | None = None,
) -> ArpaModel:
    """Q from noisy counts ``noisy`` (columns ``n``, ``ngram``, ``noisy_count``; order 1 holds every
    word of the domain, higher orders the released rows). ``base``: P, whose unigrams are Q's
    bottom level and fix Q's vocabulary.

    * total T = Σ of all order-1 noisy counts (``<s>`` excluded): the noise averages out over the
      whole domain, so T estimates the (weighted) number of predicted tokens well;
    * order 1: a word with ĉ ≥ ``threshold`` gets (ĉ − D)/T; the rest of the mass, γ₀ = 1 − Σ that,
      goes to P's unigram distribution: Q(w) = (ĉ(w) − D)₊/T + γ₀ P(w);
    * order n ≥ 2: an n-gram hw is listed when ĉ(hw) ≥ ``threshold`` and its context h and suffix
      h'w are listed one order below (so the model is closed); S(h) = max(ĉ(h), Σ_w ĉ(hw)) with
      ĉ(h) the context's own noisy count (every occurrence of a context is followed by a token or
      ``</s>``), Q(w|h) = (ĉ(hw) − D)₊/S(h) + γ(h) Q(w|h'), γ(h) = 1 − Σ_w (ĉ(hw) − D)₊/S(h).

    ``discount`` D (in count units) is the absolute discount; ``threshold`` the release threshold.
    ``unresolved`` (:data:`UNRESOLVED_SHAPES`): how γ₀ is spread — ``"public"``, in P's shape over
    every word (as above), or ``"empirical_bayes"``, over the words below the threshold by their
    posterior counts given their noisy counts and the release's ``sigma``
    (:mod:`dpngram.lm.unigram_shrinkage`; P's shape where the counts carry no usable total).
    """
    if unresolved not in UNRESOLVED_SHAPES:
        raise ArpaError(f"unresolved: one of {', '.join(UNRESOLVED_SHAPES)} (got {unresolved!r})")
    if unresolved == "empirical_bayes" and sigma is None:
        raise ArpaError("unresolved='empirical_bayes' needs the release's sigma")
    if order < 1:
        raise ArpaError(f"order: must be >= 1 (got {order})")
    rows = noisy.select(
        pl.col("n").cast(pl.Int64), pl.col("ngram").cast(pl.String), pl.col("noisy_count").cast(pl.Float64)
    )
    ones = rows.filter(pl.col("n") == 1)
    uni = _noisy_unigrams(
        ones, base, threshold=threshold, discount=discount, unresolved=unresolved, sigma=sigma
    )
    probs: dict[int, pl.DataFrame] = {1: uni}
    counts: dict[int, pl.DataFrame] = {1: ones.select("ngram", count=pl.col("noisy_count"))}
    listed: dict[int, pl.DataFrame] = {1: uni.select("ngram")}
    gammas: dict[int, pl.DataFrame] = {}
    for n in range(2, order + 1):
        p, counts[n], gammas[n] = _noisy_order(
            rows,
            n,
            listed[n - 1],
            counts[n - 1],
            probs[n - 1],
            threshold=threshold,
            discount=discount,
        )
        probs[n] = p
        listed[n] = p.select("ngram")
    return model_from_probabilities(probs, gammas, order)


def _noisy_unigrams(
    ones: pl.DataFrame,
    base: ArpaModel,
    *,
    threshold: float,
    discount: float,
    unresolved: str = "public",
    sigma: float | None = None,
) -> pl.DataFrame:
    """Q's order 1 (columns ngram, prob) from the order-1 noisy counts ``ones``: Q(w) =
    (ĉ(w) − D)₊/T + γ₀ S(w) over P's vocabulary, S = P or the empirical-Bayes shape of the words
    below the threshold (:func:`noisy_count_model`)."""
    base1 = unigram_distribution(base).rename({"prob": "base"})
    words = ones.filter(pl.col("ngram") != BOS)
    total = float(words["noisy_count"].sum()) if words.height else 0.0
    listed1 = words.filter(pl.col("noisy_count") >= threshold).join(
        base1.select("ngram"), on="ngram", how="semi"
    )
    disc1 = listed1.select("ngram", mass=(pl.col("noisy_count") - discount).clip(0.0, None))
    mass_sum = float(disc1["mass"].sum()) if disc1.height else 0.0
    scale = max(total, mass_sum)
    if scale <= 0:
        disc1 = disc1.with_columns(mass=pl.lit(0.0))
        gamma0 = 1.0
    else:
        disc1 = disc1.with_columns(mass=pl.col("mass") / scale)
        gamma0 = max(0.0, 1.0 - mass_sum / scale)
    shape = base1.select("ngram", shape=pl.col("base"))
    if unresolved == "empirical_bayes":
        shape = unresolved_shape(words, base1, threshold, float(sigma or 0.0)) if scale > 0 else shape
    return (
        base1.join(disc1, on="ngram", how="left")
        .join(shape, on="ngram", how="left")
        .with_columns(prob=pl.col("mass").fill_null(0.0) + gamma0 * pl.col("shape").fill_null(0.0))
        .select("ngram", "prob")
    )


#: How Q spreads the unigram mass the threshold leaves (:func:`noisy_count_model`).
UNRESOLVED_SHAPES = ("public", "empirical_bayes")


def _noisy_order(
    rows: pl.DataFrame,
    n: int,
    listed_lower: pl.DataFrame,
    counts_lower: pl.DataFrame,
    probs_lower: pl.DataFrame,
    *,
    threshold: float,
    discount: float,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Q's order ``n`` ≥ 2 from the noisy counts ``rows`` and Q's order n − 1 (its listed n-grams,
    counts and probabilities): (probabilities (ngram, prob), listed counts (ngram, count), back-off
    weights γ(h) (ngram, gamma)), as in :func:`noisy_count_model`."""
    cand = rows.filter((pl.col("n") == n) & (pl.col("noisy_count") >= threshold)).select(
        "ngram", count=pl.col("noisy_count")
    )
    cand = cand.with_columns(ctx=ngram_context(), suf=ngram_suffix())
    # closure: the context and the suffix must be listed one order below
    cand = cand.join(listed_lower.rename({"ngram": "ctx"}), on="ctx", how="semi")
    cand = cand.join(listed_lower.rename({"ngram": "suf"}), on="suf", how="semi")
    ctx_count = counts_lower.rename({"ngram": "ctx", "count": "ctx_count"})
    ctx = (
        cand.group_by("ctx")
        .agg(cont=pl.col("count").sum(), kept=(pl.col("count") - discount).clip(0.0, None).sum())
        .join(ctx_count, on="ctx", how="left")
        .with_columns(S=pl.max_horizontal(pl.col("ctx_count").fill_null(0.0), pl.col("cont")))
        .with_columns(
            gamma=pl.when(pl.col("S") > 0)
            .then(1.0 - pl.col("kept") / pl.col("S"))
            .otherwise(1.0)
            .clip(0.0, 1.0)
        )
    )
    lower = probs_lower.rename({"ngram": "suf", "prob": "lower"})
    p = (
        cand.join(ctx.select("ctx", "S", "gamma"), on="ctx", how="left")
        .join(lower, on="suf", how="left")
        .select(
            "ngram",
            prob=pl.when(pl.col("S") > 0)
            .then((pl.col("count") - discount).clip(0.0, None) / pl.col("S"))
            .otherwise(0.0)
            + pl.col("gamma") * pl.col("lower"),
        )
    )
    return p, cand.select("ngram", "count"), ctx.select(pl.col("ctx").alias("ngram"), "gamma")
