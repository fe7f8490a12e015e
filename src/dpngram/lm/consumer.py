"""A downstream consumer's held-out scoring of a released model (dags/dpngram_consume_lm.py).

:func:`score_heldout` checks the consumer's evaluation text against the public corpus the model was
trained on (:func:`training_overlap`: sentences tokenized as the model's, 64-bit hashes, the corpus
streamed), scores it (:func:`dpngram.lm.evaluate.evaluate_file`) and puts the score beside the
release's own private-domain verdict (:func:`release_verdict`).

Owns: :func:`score_heldout`, :func:`training_overlap`, :func:`release_verdict`, :data:`MAX_TRAINING_OVERLAP`.
Imports: dpngram.lm (evaluate, model_card), dpngram.text, dpngram.core; polars.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from dpngram.lm.evaluate import evaluate_file

#: Largest fraction of an evaluation text's sentences that may occur verbatim in the public corpus
#: the model was trained on before :func:`score_heldout` refuses to score it (its perplexity would
#: then measure memorisation of the training corpus, not how the model does on unseen text).
MAX_TRAINING_OVERLAP = 0.01

#: Seed of the 64-bit sentence hashes (:func:`_sentence_hashes`): fixed, so that both sides of one
#: comparison hash alike. The hashes never leave the process.
_HASH_SEED = 0x64706E


class TrainingOverlapError(ValueError):
    """The evaluation text overlaps the corpus the model was trained on (one-line message)."""


def _sentence_hashes(sentences: pl.Series) -> pl.Series:
    """64-bit hashes of tokenized sentences (space-joined tokens: what the model was built from)."""
    return sentences.list.join(" ").hash(seed=_HASH_SEED)


def training_overlap(
    text_path: str | os.PathLike[str], corpus_path: str | os.PathLike[str], lowercase: bool = True
) -> dict[str, Any]:
    """How much of an evaluation text the model saw in training: the number and fraction of the
    text's sentences (tokenized like the model's training text,
    :func:`dpngram.text.public.read_public_batches`)
    that occur verbatim in the public corpus at ``corpus_path``.

    The text's sentences are hashed into a set of 64-bit hashes (the text is small); the corpus is
    streamed batch by batch against it and never held whole. A hash collision can only count a
    sentence as seen (overlap over-estimated, never hidden)."""
    from dpngram.text.public import read_public_batches

    text_hashes = [_sentence_hashes(batch) for batch in read_public_batches(text_path, lowercase)]
    hashes = pl.concat(text_hashes) if text_hashes else pl.Series("tokens", [], pl.UInt64)
    wanted = hashes.unique()
    seen: set[int] = set()
    for batch in read_public_batches(corpus_path, lowercase):
        batch_hashes = _sentence_hashes(batch)
        seen.update(batch_hashes.filter(batch_hashes.is_in(wanted.implode())).to_list())
        if len(seen) == len(wanted):
            break  # every distinct sentence of the text is in the corpus: nothing more to learn
    overlapping = int(hashes.is_in(pl.Series(sorted(seen), dtype=pl.UInt64).implode()).sum()) if seen else 0
    return {
        "sentences": len(hashes),
        "in_training_corpus": overlapping,
        "fraction": overlapping / len(hashes) if len(hashes) else 0.0,
    }


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: Keys of report.json's ``model.private_domain`` a consumer records beside its own score.
VERDICT_KEYS = (
    "released_perplexity",
    "public_only_perplexity",
    "log_ratio",
    "interval",
    "epsilon",
    "verdict",
)


def release_verdict(report: dict[str, Any]) -> dict[str, Any] | None:
    """The release's private-domain verdict (report.json ``model.private_domain``: a DP estimate of
    the held-out private users' perplexity, docs/lm_privacy.md) with its one-line summary, or None
    when the release has none."""
    from dpngram.lm.model_card import verdict_line

    verdict = (report.get("model") or {}).get("private_domain")
    if not verdict:
        return None
    return {
        **{key: verdict.get(key) for key in VERDICT_KEYS},
        "line": verdict_line(verdict).removeprefix("**Verdict:** "),
    }


def score_heldout(
    model_path: str | os.PathLike[str],
    text_path: str | os.PathLike[str],
    training_corpus: str | os.PathLike[str] | None,
    report_path: str | os.PathLike[str],
    *,
    max_overlap: float = MAX_TRAINING_OVERLAP,
) -> dict[str, Any]:
    """What a downstream team records when it scores a released model on its own held-out text:
    the text (path, SHA-256, sentences, tokens), its overlap with the public corpus the model was
    trained on (:func:`training_overlap`), perplexity and OOV rate (:func:`evaluate_file`), and the
    release's private-domain verdict (:func:`release_verdict`) beside it.

    Tokenized as the model was built (the release's ``lowercase`` parameter). Raises
    :class:`TrainingOverlapError` (one line; ``err.record`` holds everything but the metrics) when
    more than ``max_overlap`` of the text's sentences are in the training corpus, and ConfigError
    when the training corpus is unknown or missing (the check cannot be made)."""
    import json

    from dpngram.core.errors import ConfigError

    text = Path(text_path)
    if not text.is_file():
        raise FileNotFoundError(f"eval_text: {text} does not exist or is not a file")
    if training_corpus is None or not Path(training_corpus).is_file():
        raise ConfigError(
            f"training corpus {training_corpus}: unknown or not a file, so the evaluation text cannot be "
            "checked against it; name the public corpus the release was built from"
        )
    report = json.loads(Path(report_path).read_text(encoding="utf-8"))
    lowercase = bool((report.get("parameters") or {}).get("lowercase", True))
    overlap = training_overlap(text, training_corpus, lowercase)
    record: dict[str, Any] = {
        "model": str(model_path),
        "text": {"path": str(text), "sha256": file_sha256(text), "sentences": overlap["sentences"]},
        "training_corpus": str(training_corpus),
        "overlap": {**overlap, "max_fraction": max_overlap},
        "release_verdict": release_verdict(report),
    }
    if overlap["fraction"] > max_overlap:
        err = TrainingOverlapError(
            f"eval_text: {overlap['in_training_corpus']} of its {overlap['sentences']} sentences "
            f"({overlap['fraction']:.1%}) occur verbatim in the public corpus the model was trained on "
            f"(more than {max_overlap:.0%}): score it on text the model never saw"
        )
        err.record = record  # type: ignore[attr-defined]
        raise err
    metrics = evaluate_file(model_path, text, lowercase=lowercase)
    record["text"]["tokens"] = metrics["tokens"]
    record.update(
        perplexity=metrics["perplexity"],
        perplexity_without_oov=metrics["perplexity_without_oov"],
        open_vocab_perplexity=metrics["open_vocab_perplexity"],
        oov_rate=metrics["oov_rate"],
        order=metrics["order"],
    )
    return record
