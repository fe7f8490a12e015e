"""The tokenizer: text -> sentences of tokens, the same rules for every text the project reads.

Private input at ingest (DuckDB: :func:`tokenize_frame`; Spark: the same polars expression,
:func:`sentence_tokens_expr`, inside ``mapInArrow``), the public corpus, the known vocabulary and
evaluation text (:func:`tokenize_texts`) are all tokenized here, so their tokens match. The rules
(docs/tokenizer.md): Unicode NFKC, optional lower-casing, format and control characters removed,
typographic apostrophes/hyphens/double quotes made ASCII, the two-character quotes `` and '' made
'"', sentence splits at ``[.!?]+`` followed by whitespace
and at every line break, then :data:`TOKEN_PATTERN`. :data:`TOKENIZER_VERSION` changes whenever a
rule changes the tokens of some input; :func:`tokenizer_settings` is its public description.

Owns: the tokenization rules and their public description.
Imports: nothing from dpngram; polars.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import polars as pl

log = logging.getLogger(__name__)


# -- tokenizer ---------------------------------------------------------------------------------
#: Bumped whenever a rule below changes the tokens produced for some input.
TOKENIZER_VERSION = 2


_WORD_CHAR = r"\p{L}\p{M}\p{N}"


#: A token is a word (letters, marks and digits containing at least one letter, joined by single
#: internal apostrophes or hyphens), a number (digits with internal '.' or ','), or any other
#: non-space character together with the combining marks that follow it.
TOKEN_PATTERN = (
    rf"[{_WORD_CHAR}]*\p{{L}}[{_WORD_CHAR}]*(?:['\-][{_WORD_CHAR}]+)*"
    r"|\p{N}+(?:[.,]\p{N}+)*"
    r"|\S\p{M}*"
)


# Format characters (soft hyphen, zero-width joiner, BOM, ...) are deleted, except the
# zero-width space, which separates words like a space; non-whitespace control characters too.
_FORMAT_CHARS = r"[\p{Cf}&&[^\x{200B}]]"


_SPACE_LIKE = r"[\x{200B}[\p{Cc}&&[^\s]]]"


# Typographic apostrophes and hyphens -> ASCII, so "don’t" and "don't" are one token; typographic
# double quotes -> ASCII '"' too.
_CHAR_MAP = {
    "\u2019": "'",
    "\u2018": "'",
    "\u02bc": "'",
    "\u2010": "-",
    "\u2011": "-",
    "\u201c": '"',
    "\u201d": '"',
}

# Double quotes written as two characters -> '"' (version 2): the ``opening'' and closing pairs
# of Penn-Treebank-style corpora (Brown, the default public corpus, has 8,850 of each and no '"'),
# so a public corpus and user text agree on the quote token; two typographic apostrophes too.
_QUOTE_PAIRS = {"``": '"', "''": '"', "\u2018\u2018": '"', "\u2019\u2019": '"'}

# Both maps in one pass over the text: leftmost-first matching with the two-character pairs listed
# first, so a pair wins over its first character (a second pass cost about 9% of tokenization).
_REPLACEMENTS = {**_QUOTE_PAIRS, **_CHAR_MAP}


# A sentence ends at a run of . ! ? (plus closing quotes/brackets) followed by whitespace, and at
# every line break; both become "\n", the only separator left for the split.
_SENTENCE_BREAK = (
    r"([.!?]+[\"')\]}\x{00BB}\x{201D}]*)\s+"
    r"|\s*(?:\r\n|[\n\r\x{0B}\x{0C}\x{85}\x{2028}\x{2029}])\s*"
)


def nfkc_expr(expr: pl.Expr) -> pl.Expr:
    """Unicode NFKC of a string column, normalizing only the values with a non-ASCII character.

    Every ASCII character is its own NFKC form, so an ASCII-only text is unchanged and is passed
    through; polars' ``normalize`` would otherwise cost about a third of tokenization on mostly
    ASCII input (measured in docs/engines.md, "Scale"). ``len_bytes != len_chars`` exactly when a
    UTF-8 string holds a non-ASCII character. Null stays null."""
    non_ascii = expr.str.len_bytes() != expr.str.len_chars()
    return pl.coalesce(pl.when(non_ascii).then(expr).str.normalize("NFKC"), expr)


def sentence_tokens_expr(text: str | pl.Expr, lowercase: bool = True) -> pl.Expr:
    """Polars expression: text -> ``list[list[str]]`` (sentences of tokens; empty ones dropped).

    Steps (docs/tokenizer.md): Unicode NFKC; optional lower-casing (Unicode default case
    mapping); delete format characters; control characters and U+200B become spaces;
    typographic apostrophes/hyphens become ASCII; split sentences at ``[.!?]+`` (with closing
    quotes/brackets) followed by whitespace and at every line break; extract
    :data:`TOKEN_PATTERN` matches in each sentence. A null text gives null.
    """
    expr = pl.col(text) if isinstance(text, str) else text
    expr = nfkc_expr(expr)
    if lowercase:
        expr = expr.str.to_lowercase()
    expr = (
        expr.str.replace_all(_FORMAT_CHARS, "")
        .str.replace_all(_SPACE_LIKE, " ")
        .str.replace_many(list(_REPLACEMENTS), list(_REPLACEMENTS.values()), leftmost=True)
        .str.replace_all(_SENTENCE_BREAK, "${1}\n")
        .str.split("\n")
        .list.eval(pl.element().str.extract_all(TOKEN_PATTERN))
        .list.eval(pl.element().filter(pl.element().list.len() > 0))
    )
    return expr


def tokenize_texts(texts: Iterable[str] | pl.Series, lowercase: bool = True) -> list[list[list[str]]]:
    """Tokenize texts (e.g. held-out evaluation text): per text, per sentence, its tokens.

    Same rules as ingest (:func:`sentence_tokens_expr`). ``None`` entries give ``[]``. Building
    the nested Python lists costs most of the time (about 1M tokens/s here, against 3-5M/s for
    the polars result of :func:`tokenize_frame`); prefer the frame form for bulk work.
    """
    series = texts if isinstance(texts, pl.Series) else pl.Series("text", list(texts), dtype=pl.String)
    if series.dtype != pl.String:
        raise TypeError(f"tokenize_texts needs strings (got a series of {series.dtype})")
    out = series.rename("text").to_frame().select(sentences=sentence_tokens_expr("text", lowercase))
    return [s if s is not None else [] for s in out.get_column("sentences").to_list()]


def tokenize_frame(df: pl.DataFrame, lowercase: bool = True) -> pl.DataFrame:
    """Frame-level tokenizer used by ingest: ``(user_id, doc_id, text)`` ->
    ``(user_id, doc_id, sent_id, tokens)``, one row per non-empty sentence, ``sent_id`` 0-based
    within the document. Documents without any token produce no row."""
    return explode_sentences(
        df.select("user_id", "doc_id", sentences=sentence_tokens_expr("text", lowercase))
    )


def explode_sentences(frame: pl.DataFrame) -> pl.DataFrame:
    return (
        frame.with_columns(sent_id=pl.int_ranges(0, pl.col("sentences").list.len(), dtype=pl.Int32))
        .explode(["sentences", "sent_id"], keep_nulls=False)
        .select(
            pl.col("user_id").cast(pl.String),
            pl.col("doc_id").cast(pl.Int64),
            pl.col("sent_id").cast(pl.Int32),
            pl.col("sentences").alias("tokens"),
        )
    )


def tokenizer_settings(lowercase: bool) -> dict[str, Any]:
    """Public description of the tokenizer (for reports and the model card)."""
    return {
        "version": TOKENIZER_VERSION,
        "normalization": "NFKC",
        "lowercase": lowercase,
        "token_pattern": TOKEN_PATTERN,
        "sentence_break": _SENTENCE_BREAK,
        "spec": "docs/tokenizer.md",
    }
