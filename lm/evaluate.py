"""Perplexity of a KenLM model on text tokenised with the pipeline's tokenizer.

Counting (docs/lm.md, "Evaluation"): every sentence is scored with one ``<s>`` context and one
``</s>`` event; the events are the sentence's tokens plus ``</s>``. A token is an OOV when it is not
in the model's vocabulary (KenLM maps it to ``<unk>``).

* perplexity (with OOVs): 10^(-Σ log10 p / events), OOV tokens scored as ``<unk>``;
* perplexity without OOVs: OOV events dropped from both sums (SRILM's ``ppl``); the word after an
  OOV is still scored in the context KenLM reaches after the ``<unk>``;
* OOV rate: OOV tokens / tokens (``</s>`` not counted).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lm.arpa import ArpaError

__all__ = ["score_sentences", "evaluate_file", "load_model"]

BATCH_LINES = 20_000


def load_model(path: str | os.PathLike[str]) -> Any:
    """``kenlm.Model(path)``; a missing or unreadable model raises FileNotFoundError / ArpaError
    with a one-line message."""
    import kenlm

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"model: {p} does not exist or is not a file")
    try:
        return kenlm.Model(str(p))
    except (OSError, RuntimeError):
        # KenLM's message quotes the file's first line, which could be text: not repeated here.
        raise ArpaError(f"model: {p} is not a readable KenLM ARPA/binary model") from None


def score_sentences(model: Any, sentences: Iterable[list[str]]) -> dict[str, Any]:
    """Sums over ``sentences`` (token lists): see the module docstring for the definitions."""
    logprob = logprob_in_vocab = 0.0
    events = events_in_vocab = tokens = oov = sentences_n = 0
    for sentence in sentences:
        if not sentence:
            continue
        sentences_n += 1
        scores = list(model.full_scores(" ".join(sentence), bos=True, eos=True))
        for i, (lp, _length, is_oov) in enumerate(scores):
            events += 1
            logprob += lp
            if i < len(sentence):
                tokens += 1
                oov += bool(is_oov)
            if not is_oov:
                events_in_vocab += 1
                logprob_in_vocab += lp
    return {
        "sentences": sentences_n,
        "tokens": tokens,
        "oov_tokens": oov,
        "oov_rate": oov / tokens if tokens else 0.0,
        "log10_prob": logprob,
        "perplexity": 10 ** (-logprob / events) if events else math.nan,
        "perplexity_without_oov": 10 ** (-logprob_in_vocab / events_in_vocab)
        if events_in_vocab
        else math.nan,
    }


def _file_sentences(path: Path, lowercase: bool) -> Iterable[list[str]]:
    from pipeline.ingest import read_public_corpus

    yield from read_public_corpus(path, lowercase)


def evaluate_file(
    model_path: str | os.PathLike[str], text_path: str | os.PathLike[str], lowercase: bool = True
) -> dict[str, Any]:
    """Score a plain-text file (one or more sentences per line, ``.gz`` accepted) with the model at
    ``model_path``. Raises FileNotFoundError for a missing file (one line)."""
    text = Path(text_path)
    if not text.is_file():
        raise FileNotFoundError(f"text: {text} does not exist or is not a file")
    model = load_model(model_path)
    result = score_sentences(model, _file_sentences(text, lowercase))
    result["order"] = int(model.order)
    return result
