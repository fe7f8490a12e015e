"""Evaluation of a KenLM model on text tokenised with the pipeline's tokenizer (docs/lm_evaluation.md).

Counting: every sentence is scored with one ``<s>`` context and one ``</s>`` event; the events are
the sentence's tokens plus ``</s>``. A token is an OOV when it is not in the model's vocabulary
(KenLM maps it to ``<unk>``; the context after it is the state KenLM reaches after ``<unk>``).

* perplexity (with OOVs): 10^(-Σ log10 p / events), OOV tokens scored as ``<unk>``. This rewards a
  small vocabulary: mapping a word to ``<unk>`` can only add probability to it;
* perplexity without OOVs: OOV events dropped from both sums (SRILM's ``ppl``);
* open-vocabulary perplexity: as the first, but an OOV token w costs p(<unk>|h) · P_spell(w), with
  P_spell a fixed, data-free spelling model (:func:`spelling_log10prob`) that is the same for every
  model: an unknown word has to be spelled out, so shrinking the vocabulary is no longer free;
* OOV rate: OOV tokens / tokens (``</s>`` not counted);
* top-1 / top-3 next-word accuracy: at every token position (not ``</s>``) the model ranks the
  words of its vocabulary (without ``<s>``, ``</s>``, ``<unk>``) by p(w|h) for the context
  h = ``<s>`` + the preceding tokens (OOVs as ``<unk>``); a hit when the true token is among the
  k most probable (ties broken by the word string). An OOV target is a miss. Needs the ARPA file
  (:class:`NextWordPredictor`); a binary model does not list its vocabulary.

Why one module (just over 600 lines): the metrics, the predictor and the two entry points share
the counting conventions above; :class:`NextWordPredictor` (with ``_Ranking``) is the seam to split
along when it grows.

Owns: the evaluation metrics (open-vocabulary perplexity, OOV rate, top-k next-word accuracy),
the spelling model, ``dpngram evaluate``'s computation (a consumer's held-out scoring built on it:
:mod:`dpngram.lm.consumer`).
Imports: dpngram.lm.ngram_tables, dpngram.lm.arpa_file, dpngram.lm.backoff_scorer, dpngram.text,
dpngram.core; kenlm, numpy, polars.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from dpngram.core.errors import ArpaError
from dpngram.lm.arpa_file import read_arpa
from dpngram.lm.ngram_tables import BOS, EOS, UNK, ArpaModel

if TYPE_CHECKING:
    from dpngram.lm.backoff_scorer import BackoffScorer

BATCH_LINES = 20_000


#: Size of the spelling model's alphabet: every character (code point) costs 1/30.
SPELL_ALPHABET = 30


#: Mean of the spelling model's geometric length distribution: P(len = n) = (1/7)(6/7)^(n-1).
SPELL_MEAN_LENGTH = 7


#: The k of the top-k accuracies reported.
TOP_K = (1, 3)


#: Largest |log10 p(ARPA) - log10 p(KenLM)| accepted on an in-vocabulary event before the ARPA file
#: is declared not to be the model's (stale file; also a quantized binary, build_binary -q).
ARPA_MATCH_TOLERANCE = 0.01


_SPECIAL = frozenset((BOS, EOS, UNK))


def spelling_log10prob(
    word: str, alphabet: int = SPELL_ALPHABET, mean_length: float = SPELL_MEAN_LENGTH
) -> float:
    """log10 P_spell(word): n = len(word) code points, each costing 1/``alphabet``, and the length
    geometric with mean ``mean_length``:

        log10 P_spell(w) = n log10(1/A) + log10(1/m) + (n - 1) log10(1 - 1/m).

    Summed over every string over an A-symbol alphabet this is Σ_n A^n A^-n (1/m)(1-1/m)^(n-1) = 1.
    A deliberately simple model without data: its only job is that every model pays the same price
    to spell a word it does not know (the defaults are the module constants; the parameters exist
    for the normalisation test)."""
    n = len(word)
    if n < 1:
        raise ValueError("word: the spelling model has no mass on the empty string")
    if alphabet < 1 or mean_length < 1:
        raise ValueError("alphabet and mean_length must be >= 1")
    stop = 1.0 / mean_length
    cont = math.log10(1.0 - stop) if stop < 1.0 else -math.inf
    return -n * math.log10(alphabet) + math.log10(stop) + ((n - 1) * cont if n > 1 else 0.0)


def load_model(path: str | os.PathLike[str]) -> Any:
    """``kenlm.Model(path)``, quietly; a missing or unreadable model raises FileNotFoundError /
    ArpaError with a one-line message.

    KenLM's loader writes to the process's stderr from C++ (a progress bar, and for every ARPA file
    "Loading the LM will be faster if you build a binary file."), which the CLI's output showed
    once per model loaded. The progress bar is switched off through ``kenlm.Config``; the message
    has no switch, so file descriptor 2 points at /dev/null while the model loads (the process's
    other stderr output in that time is dropped too; loading takes seconds at most)."""
    import kenlm

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"model: {p} does not exist or is not a file")
    quiet = kenlm.Config()
    quiet.show_progress = False
    try:
        with _stderr_silenced():
            return kenlm.Model(str(p), quiet)
    except (OSError, RuntimeError):
        # KenLM's message quotes the file's first line, which could be text: not repeated here.
        raise ArpaError(f"model: {p} is not a readable KenLM ARPA/binary model") from None


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 redirected to /dev/null inside the block (C++ writes bypass sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


# ----------------------------------------------------------------------------------------------
# Next-word prediction from the ARPA tables
# ----------------------------------------------------------------------------------------------
class _Ranking:
    """The words of the vocabulary (specials excluded) in decreasing p(w | h) for one context h,
    produced lazily and cached (``items``: (log10 p, word id), best first; ties by word). A word id
    is the word's rank in string order (:class:`NextWordPredictor`), so comparing ids compares the
    words.

    Backoff: p(w|h) = p listed for (h w) if listed, else bo(h) p(w|h'). The listed continuations
    of h come sorted; every other word keeps its order from h' (multiplied by the same bo(h)), so
    the ranking of h is a merge of the two streams, skipping the words of h' listed with h."""

    __slots__ = ("words", "lps", "own", "bo", "lower", "items", "i", "j", "top")

    def __init__(self, words: list[int], lps: list[float], bo: float, lower: _Ranking | None) -> None:
        self.words, self.lps = words, lps
        self.own = dict(zip(words, lps, strict=True))
        self.bo = bo
        self.lower = lower
        self.items: list[tuple[float, int]] = []
        self.i = 0
        self.j = 0
        self.top: list[int] | None = None  # the first TOP_K[-1] word ids (score_sentences)

    def log10prob(self, word: int) -> float | None:
        lp = self.own.get(word)
        if lp is not None:
            return lp
        if self.lower is None:
            return None
        lower = self.lower.log10prob(word)
        return None if lower is None else self.bo + lower

    def item(self, idx: int) -> tuple[float, int] | None:
        items = self.items
        while len(items) <= idx:
            nxt = self._next()
            if nxt is None:
                return None
            items.append(nxt)
        return items[idx]

    def _next(self) -> tuple[float, int] | None:
        backed: tuple[float, int] | None = None
        if self.lower is not None:
            while True:
                below = self.lower.item(self.j)
                if below is None:
                    break
                if below[1] in self.own:
                    self.j += 1
                    continue
                backed = (self.bo + below[0], below[1])
                break
        if self.i < len(self.words):
            mine = (self.lps[self.i], self.words[self.i])
            if backed is None or (-mine[0], mine[1]) <= (-backed[0], backed[1]):
                self.i += 1
                return mine
        if backed is not None:
            self.j += 1
        return backed


class NextWordPredictor:
    """Exact top-k next words of an ARPA back-off model (any order), with standard back-off
    semantics (a missing backoff is log10 1 = 0), as KenLM scores them.

    Words are numbered by their rank in string order. Per order n >= 2 the continuations (the
    n-grams' last words, specials excluded) are grouped by their context row at order n - 1, as
    arrays; a context's group, sorted by (-log10 p, word), becomes a :class:`_Ranking` on first use
    and is cached, so a frequent context costs its continuations once. The context rows come from the
    model's :meth:`~dpngram.lm.ngram_tables.ArpaModel.structure` when it has been derived (a model that was
    written or mixed), else from its n-gram strings. Contexts are looked up in batches
    (:meth:`prepare`): :func:`score_sentences` resolves all of its events' contexts at once."""

    def __init__(self, model: ArpaModel) -> None:
        self.order = model.order
        self._tables = model.tables
        names = model.tables[1]["ngram"].to_list()
        self.vocabulary = frozenset(names) - _SPECIAL
        self._names = sorted(set(names))  # word id -> word (string order)
        self._ids = {w: i for i, w in enumerate(self._names)}
        rank = np.array([self._ids[w] for w in names], dtype=np.int64)  # unigram row -> word id
        special = np.array([w in _SPECIAL for w in names], dtype=bool)
        lps = model.tables[1]["logprob"].to_numpy().astype(np.float64)
        keep = np.flatnonzero(~special)
        perm = keep[np.lexsort((rank[keep], -lps[keep]))]
        self._root = _Ranking(rank[perm].tolist(), lps[perm].tolist(), 0.0, None)
        self._cache: dict[str, _Ranking] = {"": self._root}
        self._index: dict[int, pl.DataFrame] = {}
        #: per order n >= 2: (word ids, log10 p) sorted by (context, -log10 p, word), and each order
        #: n - 1 row's span [start[r], start[r + 1]) in them
        self._cont: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._backoff: dict[int, np.ndarray] = {}
        structure = model.derived_structure()
        for n in range(2, self.order + 1):
            if structure is not None:
                ctx, word = structure[n].context, structure[n].word
            else:
                ctx, word = self._links(n)
            lp = model.tables[n]["logprob"].to_numpy().astype(np.float64)
            ok = (ctx >= 0) & (word >= 0)
            ok[ok] = ~special[word[ok]]
            c, w, lp = ctx[ok], rank[word[ok]], lp[ok]
            perm = np.argsort(c, kind="stable")  # by context only: each context's own order in prepare
            start = np.searchsorted(c[perm], np.arange(model.tables[n - 1].height + 1))
            self._cont[n] = (w[perm], lp[perm], start)
            self._backoff[n - 1] = model.tables[n - 1]["backoff"].fill_null(0.0).to_numpy().astype(np.float64)

    def _links(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Each order-n row's context row at order n - 1 and its last word's unigram row, from the
        strings (-1 where the model does not list it)."""
        parts = self._tables[n].select(
            ctx=pl.col("ngram").str.replace(r" [^ ]+$", ""),
            word=pl.col("ngram").str.extract(r"([^ ]+)$", 1),
        )
        return self._rows(n - 1, parts["ctx"]), self._rows(1, parts["word"])

    def _rows(self, m: int, keys: pl.Series | list[str]) -> np.ndarray:
        """Row numbers of ``keys`` (space-joined m-grams) in the order-m table, -1 where unlisted."""
        index = self._index.get(m)
        if index is None:
            index = self._index[m] = self._tables[m].select("ngram").with_row_index("row")
        found = pl.DataFrame({"key": pl.Series(keys, dtype=pl.String)}).join(
            index, left_on="key", right_on="ngram", how="left", maintain_order="left"
        )["row"]
        return found.cast(pl.Int64).fill_null(-1).to_numpy()

    @classmethod
    def from_arpa(cls, path: str | os.PathLike[str]) -> NextWordPredictor:
        return cls(read_arpa(path)[1])

    def _resolve(self, contexts: Sequence[Sequence[str]]) -> list[tuple[int, int, str]]:
        """Per context (OOVs already ``<unk>``): (m, row, key) of its longest suffix of at most
        N - 1 tokens that the model lists at order m (an unlisted context has no continuations and
        backoff 1, so p(w|h) = p(w|h')); (0, 0, '') when there is none."""
        out = [(0, 0, "")] * len(contexts)
        pending = list(range(len(contexts)))
        for m in range(self.order - 1, 0, -1):
            ask = [i for i in pending if len(contexts[i]) >= m]
            if not ask:
                continue
            keys = [" ".join(contexts[i][len(contexts[i]) - m :]) for i in ask]
            rows = self._rows(m, keys).tolist()
            for i, key, row in zip(ask, keys, rows, strict=True):
                if row >= 0:
                    out[i] = (m, row, key)
            pending = [i for i in pending if out[i][0] == 0]
        return out

    def prepare(self, contexts: Sequence[Sequence[str]]) -> list[_Ranking]:
        """The rankings of ``contexts`` (token lists, OOVs already ``<unk>``), building those not
        cached yet and the rankings they back off to, with one lookup per order for the batch."""
        resolved = self._resolve(contexts)
        todo = {key: (m, row) for m, row, key in resolved if key not in self._cache}
        new: dict[str, tuple[int, int, str]] = {}
        while todo:
            tails = self._resolve([key.split(" ")[1:] for key in todo])
            later: dict[str, tuple[int, int]] = {}
            for (key, (m, row)), (tm, trow, tkey) in zip(todo.items(), tails, strict=True):
                new[key] = (m, row, tkey)
                if tkey not in self._cache and tkey not in new:
                    later[tkey] = (tm, trow)
            todo = later
        for m in sorted({m for m, _, _ in new.values()}):  # a ranking's lower one is built first
            self._build(m, [(key, row, lower) for key, (mm, row, lower) in new.items() if mm == m])
        return [self._cache[key] for _, _, key in resolved]

    def _build(self, m: int, items: list[tuple[str, int, str]]) -> None:
        """Rankings for order-m contexts (key, row, key of the lower ranking): each context's
        continuations sorted by (-log10 p, word), all of them with one sort."""
        words, lps, start = self._cont[m + 1]
        rows = np.array([row for _, row, _ in items], dtype=np.int64)
        a, b = start[rows], start[rows + 1]
        ends = np.cumsum(b - a)
        group = np.repeat(np.arange(rows.size), b - a)
        idx = np.arange(int(ends[-1]) if rows.size else 0) - np.repeat(ends - (b - a) - a, b - a)
        idx = idx[np.lexsort((words[idx], -lps[idx], group))]
        w, lp, bos = words[idx].tolist(), lps[idx].tolist(), self._backoff[m][rows].tolist()
        bounds = [0, *ends.tolist()]
        for i, (key, _, lower) in enumerate(items):
            lo, hi = bounds[i], bounds[i + 1]
            self._cache[key] = _Ranking(w[lo:hi], lp[lo:hi], bos[i], self._cache[lower])

    def mapped_context(self, context: Sequence[str]) -> list[str]:
        """The last N - 1 tokens of ``context`` (all of them count for nothing else), OOVs as ``<unk>``."""
        if self.order <= 1:
            return []
        return [t if t in self.vocabulary or t == BOS else UNK for t in context[-(self.order - 1) :]]

    def _ranking(self, context: Sequence[str]) -> _Ranking:
        return self.prepare([self.mapped_context(context)])[0]

    def top(self, context: Sequence[str], k: int) -> list[tuple[str, float]]:
        """The k most probable next words after ``context`` (a token list, normally starting with
        ``<s>``; words outside the vocabulary are read as ``<unk>``), as (word, log10 p), best first;
        ties by word string."""
        ranking = self._ranking(context)
        out = []
        for idx in range(k):
            it = ranking.item(idx)
            if it is None:
                break
            out.append((self._names[it[1]], it[0]))
        return out

    def log10prob(self, context: Sequence[str], word: str) -> float | None:
        """log10 p(word | context) by back-off; None for a word outside the ranked vocabulary."""
        if word not in self.vocabulary:
            return None
        return self._ranking(context).log10prob(self._ids[word])

    def word_id(self, word: str) -> int:
        """The id of a vocabulary word (its rank in string order)."""
        return self._ids[word]


def find_arpa(
    model_path: str | os.PathLike[str], arpa_path: str | os.PathLike[str] | None = None
) -> tuple[Path | None, str | None]:
    """(ARPA file to rank next words with, None) or (None, one-line reason). ``arpa_path`` if given
    (FileNotFoundError when missing); else the model itself when it is an ARPA text file; else,
    for ``X.binary``, ``X.arpa`` beside it."""
    if arpa_path is not None:
        p = Path(arpa_path)
        if not p.is_file():
            raise FileNotFoundError(f"arpa: {p} does not exist or is not a file")
        return p, None
    model = Path(model_path)
    if model.suffix == ".arpa" or _looks_like_arpa(model):
        return model, None
    if model.suffix == ".binary":
        beside = model.with_suffix(".arpa")
        if beside.is_file():
            return beside, None
        return None, f"top-k accuracy needs the ARPA file ({beside.name} not found beside the binary)"
    return None, "top-k accuracy needs the ARPA file (give --arpa; a binary model lists no vocabulary)"


def _looks_like_arpa(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return False
    return head.lstrip().startswith(b"\\data\\")


# ----------------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------------
def score_sentences(
    model: Any,
    sentences: Iterable[list[str]],
    predictor: NextWordPredictor | None = None,
    accuracy_note: str | None = None,
) -> dict[str, Any]:
    """Sums over ``sentences`` (token lists): see the module docstring for the definitions. The
    accuracy keys are None without a ``predictor`` (``accuracy_note`` says why), or when the
    predictor's probabilities disagree with KenLM's on an in-vocabulary event by more than
    :data:`ARPA_MATCH_TOLERANCE` (the ARPA file is not the model's)."""
    logprob = logprob_in_vocab = logprob_open = 0.0
    events = events_in_vocab = tokens = oov = sentences_n = 0
    pred_events = 0
    hits = dict.fromkeys(TOP_K, 0)
    # the events whose next-word prediction is checked, in batches (contexts resolved together)
    pending: list[tuple[list[str], str, float]] = []
    diff = [0.0]  # the largest |log10 p(ARPA) - log10 p(KenLM)| so far
    missing_word = False
    for sentence in sentences:
        if not sentence:
            continue
        sentences_n += 1
        scores = list(model.full_scores(" ".join(sentence), bos=True, eos=True))
        if len(scores) != len(sentence) + 1:
            raise ValueError("text: a token contains whitespace (KenLM would split it)")
        context = [BOS]
        for i, (lp, _length, is_oov) in enumerate(scores):
            events += 1
            logprob += lp
            if is_oov:
                logprob_open += lp + spelling_log10prob(sentence[i])
            else:
                logprob_open += lp
                events_in_vocab += 1
                logprob_in_vocab += lp
            if i == len(sentence):
                break
            tokens += 1
            oov += bool(is_oov)
            if predictor is not None:
                pred_events += 1
                word = sentence[i]
                if not is_oov and word not in _SPECIAL:
                    pending.append((predictor.mapped_context(context), word, lp))
                    if len(pending) >= PREDICTION_BATCH:
                        missing_word |= _predict(predictor, pending, hits, diff)
                        pending.clear()
            context.append(UNK if is_oov else sentence[i])
    if predictor is not None and pending:
        missing_word |= _predict(predictor, pending, hits, diff)
    result = _perplexities(
        sentences_n, tokens, oov, events, events_in_vocab, logprob, logprob_in_vocab, logprob_open
    )
    if predictor is not None and (missing_word or diff[0] > ARPA_MATCH_TOLERANCE):
        what = "a word KenLM knows is missing" if missing_word else f"log10 p differs by {diff[0]:.3g}"
        accuracy_note = f"the ARPA file does not match the model ({what}); top-k not computed"
        predictor = None
    return result | _accuracies(hits, pred_events if predictor is not None else None, accuracy_note)


def _perplexities(
    sentences: int,
    tokens: int,
    oov: int,
    events: int,
    events_in_vocab: int,
    logprob: float,
    logprob_in_vocab: float,
    logprob_open: float,
) -> dict[str, Any]:
    """:func:`score_sentences`'s counts and perplexities from its sums (module docstring)."""
    return {
        "sentences": sentences,
        "tokens": tokens,
        "oov_tokens": oov,
        "oov_rate": oov / tokens if tokens else 0.0,
        "log10_prob": logprob,
        "perplexity": 10 ** (-logprob / events) if events else math.nan,
        "perplexity_without_oov": 10 ** (-logprob_in_vocab / events_in_vocab)
        if events_in_vocab
        else math.nan,
        "open_vocab_log10_prob": logprob_open,
        "open_vocab_perplexity": 10 ** (-logprob_open / events) if events else math.nan,
    }


def _accuracies(hits: dict[int, int], pred_events: int | None, accuracy_note: str | None) -> dict[str, Any]:
    """:func:`score_sentences`'s top-k keys: the share of the ``pred_events`` predicted events
    among ``hits``, or None for each (with ``accuracy_note`` saying why) when ``pred_events`` is
    None (no predictor, or one that does not match the ARPA file)."""
    if pred_events is None:
        return {f"top{k}_accuracy": None for k in TOP_K} | {
            "prediction_events": None,
            "accuracy_note": accuracy_note,
        }
    accuracies = {f"top{k}_accuracy": hits[k] / pred_events if pred_events else math.nan for k in TOP_K}
    return accuracies | {"prediction_events": pred_events, "accuracy_note": None}


#: Prediction events resolved together by :func:`score_sentences` (bounds the memory they take).
PREDICTION_BATCH = 100_000


def _predict(
    predictor: NextWordPredictor,
    events: list[tuple[list[str], str, float]],
    hits: dict[int, int],
    diff: list[float],
) -> bool:
    """Add the top-k hits of ``events`` ((mapped context, in-vocabulary target, KenLM's log10 p))
    to ``hits`` and raise ``diff[0]`` to the largest |ARPA - KenLM| log10 p; True when a target
    is missing from the predictor's vocabulary. Each context's top words are computed once."""
    kmax = max(TOP_K)
    missing = False
    worst = diff[0]
    rankings = predictor.prepare([context for context, _, _ in events])
    for ranking, (_, word, lp) in zip(rankings, events, strict=True):
        if word not in predictor.vocabulary:
            missing = True
            continue
        wid = predictor.word_id(word)
        top = ranking.top
        if top is None:
            top = ranking.top = [it[1] for it in (ranking.item(i) for i in range(kmax)) if it is not None]
        for k in TOP_K:
            hits[k] += wid in top[:k]
        arpa_lp = ranking.log10prob(wid)
        if arpa_lp is None:
            missing = True
        else:
            worst = max(worst, abs(arpa_lp - lp))
    diff[0] = worst
    return missing


def _file_sentences(path: Path, lowercase: bool) -> Iterable[list[str]]:
    from dpngram.text.public import read_public_corpus

    yield from read_public_corpus(path, lowercase)


def evaluate_file(
    model_path: str | os.PathLike[str],
    text_path: str | os.PathLike[str],
    lowercase: bool = True,
    arpa_path: str | os.PathLike[str] | None = None,
    arpa_model: ArpaModel | None = None,
) -> dict[str, Any]:
    """Score a plain-text file (one or more sentences per line, ``.gz`` accepted) with the model at
    ``model_path``; top-k accuracy from ``arpa_path`` (default: :func:`find_arpa`), or from
    ``arpa_model`` when the caller holds the model's tables already (the ARPA file it compiled
    ``model_path`` from; saves parsing that file again). Raises FileNotFoundError for a missing
    file, ArpaError for an unreadable model/ARPA (one line)."""
    text = Path(text_path)
    if not text.is_file():
        raise FileNotFoundError(f"text: {text} does not exist or is not a file")
    model = load_model(model_path)
    if arpa_model is not None:
        arpa, note = None, None
        predictor: NextWordPredictor | None = NextWordPredictor(arpa_model)
        if arpa_model.order != int(model.order):
            raise ArpaError(f"arpa_model: order {arpa_model.order} differs from the model's {model.order}")
    else:
        arpa, note = find_arpa(model_path, arpa_path)
        predictor = None
    if arpa is not None:
        try:
            predictor = NextWordPredictor.from_arpa(arpa)
        except ArpaError as err:  # one line, no data values
            raise ArpaError(f"arpa: {arpa} is not a readable ARPA file ({err})") from None
        except (OSError, ValueError, KeyError):  # not UTF-8, a bad \data\ line, no 1-grams, ...
            raise ArpaError(f"arpa: {arpa} is not a readable ARPA file") from None
        if predictor.order != int(model.order):
            note = f"the ARPA file has order {predictor.order}, the model {model.order}; top-k not computed"
            predictor = None
    result = score_sentences(model, _file_sentences(text, lowercase), predictor, note)
    result["order"] = int(model.order)
    result["arpa_path"] = str(arpa) if predictor is not None and arpa is not None else None
    return result


def evaluate_model(
    model: ArpaModel,
    text_path: str | os.PathLike[str],
    lowercase: bool = True,
    scorer: BackoffScorer | None = None,
) -> dict[str, Any]:
    """:func:`evaluate_file` for a model held in memory, the same metrics without writing or parsing
    an ARPA file (about 0.7 s a model on SOTU's public model) and without a Python step per token:
    the events by :class:`dpngram.lm.backoff_scorer.BackoffScorer` (KenLM's probabilities from the
    model's own tables, to about 1e-6 in log10), the top-k hits by its compiled ranking (the
    ranking of :class:`NextWordPredictor`). ``scorer``: the model's scorer when the caller has built
    it already (``BackoffScorer.from_model(model)``)."""
    from dpngram.lm.backoff_scorer import BackoffScorer

    text = Path(text_path)
    if not text.is_file():
        raise FileNotFoundError(f"text: {text} does not exist or is not a file")
    sentences = [s for s in _file_sentences(text, lowercase) if s]
    if scorer is None:
        scorer = BackoffScorer.from_model(model)
    lengths = np.array([len(s) for s in sentences], dtype=np.int64)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = pl.Series([t for s in sentences for t in s], dtype=pl.String)
    rows = scorer.word_rows(flat)
    lp, hits = scorer.scores_and_hits(rows, offsets, max(TOP_K))
    # token j of sentence s is event j + s; each sentence's last event is its </s>
    token_event = np.arange(rows.size) + np.repeat(np.arange(lengths.size), lengths)
    oov = rows == scorer.unk
    oov_lp = lp[token_event[oov]]
    spelled = sum(spelling_log10prob(w) for w in flat.filter(pl.Series(oov)).to_list())
    events = int(lp.size)
    tokens = int(rows.size)
    logprob = float(lp.sum())
    in_vocab = events - int(oov.sum())
    logprob_in_vocab = logprob - float(oov_lp.sum())
    return {
        "sentences": len(sentences),
        "tokens": tokens,
        "oov_tokens": int(oov.sum()),
        "oov_rate": int(oov.sum()) / tokens if tokens else 0.0,
        "log10_prob": logprob,
        "perplexity": 10 ** (-logprob / events) if events else math.nan,
        "perplexity_without_oov": 10 ** (-logprob_in_vocab / in_vocab) if in_vocab else math.nan,
        "open_vocab_log10_prob": logprob + spelled,
        "open_vocab_perplexity": 10 ** (-(logprob + spelled) / events) if events else math.nan,
        **{f"top{k}_accuracy": int(hits[k - 1]) / tokens if tokens else math.nan for k in TOP_K},
        "prediction_events": tokens,
        "accuracy_note": None,
        "order": int(model.order),
        "arpa_path": None,
    }
