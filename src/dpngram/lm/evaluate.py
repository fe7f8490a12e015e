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

Owns: the evaluation metrics (open-vocabulary perplexity, OOV rate, top-k next-word accuracy),
the spelling model, ``dpngram evaluate``'s computation (a consumer's held-out scoring built on it:
:mod:`dpngram.lm.consumer`).
Imports: dpngram.lm.arpa, dpngram.text, dpngram.core; kenlm, polars.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from dpngram.core.errors import ArpaError
from dpngram.lm.arpa import BOS, EOS, UNK, ArpaModel, read_arpa

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
    produced lazily and cached (``items``: (log10 p, word), best first; ties by word).

    Backoff: p(w|h) = p listed for (h w) if listed, else bo(h) p(w|h'). The listed continuations
    of h come sorted; every other word keeps its order from h' (multiplied by the same bo(h)), so
    the ranking of h is a merge of the two streams, skipping the words of h' listed with h."""

    __slots__ = ("words", "lps", "start", "end", "own", "bo", "lower", "items", "i", "j")

    def __init__(
        self, words: list[str], lps: list[float], start: int, end: int, bo: float, lower: _Ranking | None
    ) -> None:
        self.words, self.lps, self.start, self.end = words, lps, start, end
        self.own = dict(zip(words[start:end], lps[start:end], strict=True))
        self.bo = bo
        self.lower = lower
        self.items: list[tuple[float, str]] = []
        self.i = start
        self.j = 0

    def log10prob(self, word: str) -> float | None:
        lp = self.own.get(word)
        if lp is not None:
            return lp
        if self.lower is None:
            return None
        lower = self.lower.log10prob(word)
        return None if lower is None else self.bo + lower

    def item(self, idx: int) -> tuple[float, str] | None:
        items = self.items
        while len(items) <= idx:
            nxt = self._next()
            if nxt is None:
                return None
            items.append(nxt)
        return items[idx]

    def _next(self) -> tuple[float, str] | None:
        backed: tuple[float, str] | None = None
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
        if self.i < self.end:
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

    Context tables: for each order m < N, ``ngram -> (backoff, start, end)`` where ``start:end``
    indexes that context's continuations at order m + 1, sorted by (-log10 p, word). Rankings per
    context are built on first use and cached, so a frequent context costs its continuations once."""

    def __init__(self, model: ArpaModel) -> None:
        self.order = model.order
        unigrams = model.tables[1]
        self.vocabulary = frozenset(unigrams["ngram"].to_list()) - _SPECIAL
        self._words: dict[int, list[str]] = {}
        self._lps: dict[int, list[float]] = {}
        self._contexts: dict[int, dict[str, tuple[float, int, int]]] = {}
        uni = unigrams.filter(~pl.col("ngram").is_in(list(_SPECIAL))).sort(
            ["logprob", "ngram"], descending=[True, False]
        )
        words, lps = uni["ngram"].to_list(), uni["logprob"].to_list()
        self._root = _Ranking(words, lps, 0, len(words), 0.0, None)
        for n in range(2, self.order + 1):
            cont = (
                model.tables[n]
                .select(
                    ctx=pl.col("ngram").str.replace(r" [^ ]+$", ""),
                    word=pl.col("ngram").str.extract(r"([^ ]+)$", 1),
                    logprob=pl.col("logprob"),
                )
                .filter(~pl.col("word").is_in(list(_SPECIAL)))
                .sort(["ctx", "logprob", "word"], descending=[False, True, False])
                .with_row_index("row")
            )
            self._words[n] = cont["word"].to_list()
            self._lps[n] = cont["logprob"].to_list()
            ranges = cont.group_by("ctx").agg(
                start=pl.col("row").min().cast(pl.Int64), end=pl.col("row").max().cast(pl.Int64) + 1
            )
            ctx = (
                model.tables[n - 1]
                .select("ngram", "backoff")
                .join(ranges, left_on="ngram", right_on="ctx", how="left")
                .with_columns(
                    pl.col("backoff").fill_null(0.0),
                    pl.col("start").fill_null(0),
                    pl.col("end").fill_null(0),
                )
            )
            self._contexts[n - 1] = dict(
                zip(
                    ctx["ngram"].to_list(),
                    zip(ctx["backoff"].to_list(), ctx["start"].to_list(), ctx["end"].to_list(), strict=True),
                    strict=True,
                )
            )
        self._cache: dict[str, _Ranking] = {"": self._root}

    @classmethod
    def from_arpa(cls, path: str | os.PathLike[str]) -> NextWordPredictor:
        return cls(read_arpa(path)[1])

    def _ranking(self, context: Sequence[str]) -> _Ranking:
        """The ranking for ``context`` (OOVs already ``<unk>``): the last N - 1 tokens, shortened
        to the longest suffix the model lists (an unlisted context has no continuations and
        backoff 1, so p(w|h) = p(w|h'))."""
        tokens = list(context[max(0, len(context) - (self.order - 1)) :]) if self.order > 1 else []
        while tokens and " ".join(tokens) not in self._contexts[len(tokens)]:
            tokens = tokens[1:]
        key = " ".join(tokens)
        ranking = self._cache.get(key)
        if ranking is None:
            bo, start, end = self._contexts[len(tokens)][key]
            n = len(tokens) + 1
            ranking = _Ranking(self._words[n], self._lps[n], start, end, bo, self._ranking(tokens[1:]))
            self._cache[key] = ranking
        return ranking

    def _map(self, context: Sequence[str]) -> list[str]:
        return [t if t in self.vocabulary or t == BOS else UNK for t in context]

    def top(self, context: Sequence[str], k: int) -> list[tuple[str, float]]:
        """The k most probable next words after ``context`` (a token list, normally starting with
        ``<s>``; words outside the vocabulary are read as ``<unk>``), as (word, log10 p), best first;
        ties by word string."""
        ranking = self._ranking(self._map(context))
        out = []
        for idx in range(k):
            it = ranking.item(idx)
            if it is None:
                break
            out.append((it[1], it[0]))
        return out

    def log10prob(self, context: Sequence[str], word: str) -> float | None:
        """log10 p(word | context) by back-off; None for a word outside the ranked vocabulary."""
        if word not in self.vocabulary:
            return None
        return self._ranking(self._map(context)).log10prob(word)


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
    kmax = max(TOP_K)
    worst_diff = 0.0
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
                    top = [w for w, _ in predictor.top(context, kmax)]
                    for k in TOP_K:
                        hits[k] += word in top[:k]
                    arpa_lp = predictor.log10prob(context, word)
                    if arpa_lp is None:
                        missing_word = True
                    else:
                        worst_diff = max(worst_diff, abs(arpa_lp - lp))
            context.append(UNK if is_oov else sentence[i])
    result: dict[str, Any] = {
        "sentences": sentences_n,
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
    if predictor is not None and (missing_word or worst_diff > ARPA_MATCH_TOLERANCE):
        what = "a word KenLM knows is missing" if missing_word else f"log10 p differs by {worst_diff:.3g}"
        accuracy_note = f"the ARPA file does not match the model ({what}); top-k not computed"
        predictor = None
    if predictor is None:
        result.update({f"top{k}_accuracy": None for k in TOP_K}, prediction_events=None)
    else:
        result.update(
            {f"top{k}_accuracy": hits[k] / pred_events if pred_events else math.nan for k in TOP_K},
            prediction_events=pred_events,
        )
        accuracy_note = None
    result["accuracy_note"] = accuracy_note
    return result


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
