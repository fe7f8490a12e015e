"""Readers of public text: the public corpus and the known-vocabulary file.

Both are public inputs (no privacy cost) tokenized exactly like the private text, so their tokens
match the private ones: :func:`read_public_corpus` streams a plain-text corpus (``.gz`` accepted)
as sentences of tokens, and :func:`load_known_vocabulary` turns a known-vocabulary file into its
sorted distinct tokens (TrieHH leaves known words out of its discovery, the vocabulary step
``dpne.k1`` adds them to S_1; the Bayesian prior and the language model read the public corpus).

Owns: reading the public corpus and the known vocabulary.
Imports: dpngram.text (records, tokenizer), dpngram.core; polars.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from dpngram.core.errors import ConfigError, IngestError
from dpngram.text.records import open_binary, read_lines
from dpngram.text.tokenizer import sentence_tokens_expr


def load_known_vocabulary(path: str | Path | None, lowercase: bool = True) -> list[str]:
    """Tokens of the public known-vocabulary file (one word per line is typical; any text works,
    tokenized like private text, ``.gz`` accepted). ``None``: no known vocabulary."""
    if path is None:
        return []
    try:
        return sorted({tok for sentence in read_public_corpus(path, lowercase) for tok in sentence})
    except IngestError:
        raise ConfigError(f"known_vocabulary: {path} does not exist or is not a file") from None


def public_top_words(path: str | os.PathLike[str], size: int, lowercase: bool = True) -> list[str]:
    """The ``size`` most frequent tokens of the public corpus (ties broken by the token, so the
    choice is deterministic), tokenized like private text. Public data only: the vocabulary step
    uses them as a public domain (docs/dpne.md, "The public domain of the vocabulary")."""
    if size <= 0:
        return []
    totals: pl.DataFrame | None = None
    for batch in read_public_batches(path, lowercase):
        counts = batch.explode().drop_nulls().rename("token").value_counts(name="count")
        counts = counts.with_columns(pl.col("count").cast(pl.Int64))
        if totals is not None:
            counts = pl.concat([totals, counts]).group_by("token").agg(pl.col("count").sum())
        totals = counts
    if totals is None:
        return []
    top = totals.sort(["count", "token"], descending=[True, False]).head(size)
    return top.get_column("token").to_list()


def read_public_corpus(path: str | os.PathLike[str], lowercase: bool = True) -> Iterator[list[str]]:
    """Sentences (token lists) of a plain-text public corpus, in file order
    (:func:`read_public_batches`, one sentence at a time as a Python list)."""
    for batch in read_public_batches(path, lowercase):
        yield from batch.to_list()


def read_public_batches(path: str | os.PathLike[str], lowercase: bool = True) -> Iterator[pl.Series]:
    """Sentences of a plain-text public corpus as polars ``list[str]`` series, one per batch of
    about :data:`BATCH_BYTES` / 2 bytes of lines, in file order (bulk work stays in polars: building
    Python lists costs more than tokenizing, see :func:`dpngram.text.tokenizer.tokenize_texts`).

    Each line holds one or more sentences (``.gz`` accepted); lines are tokenized exactly like
    private text (:func:`dpngram.text.tokenizer.sentence_tokens_expr`); lines without a token give
    no sentence. The corpus is public, so undecodable bytes are replaced (U+FFFD) rather than
    quarantined."""
    src = Path(path)
    if not src.is_file():
        raise IngestError(f"public corpus {src} does not exist or is not a file")
    with open_binary(src) as fh:
        while True:
            lines = read_lines(fh, src)
            if not lines:
                return
            texts = pl.Series("text", [line.decode("utf-8", errors="replace") for line in lines], pl.String)
            sentences = (
                texts.to_frame()
                .select(sentences=sentence_tokens_expr("text", lowercase))
                .get_column("sentences")
                .explode()
                .drop_nulls()
            )
            yield sentences.filter(sentences.list.len() > 0).rename("tokens")
