"""Tokenizer rules (docs/tokenizer.md): normalisation, case, words, numbers, punctuation,
sentence splitting, and that every entry point (held-out text, ingest, public corpus) agrees."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from dpngram.config import RunConfig
from dpngram.engines.duckdb import Warehouse
from dpngram.engines.ingest import ingest_file
from dpngram.text.public import read_public_corpus
from dpngram.text.tokenizer import tokenize_frame, tokenize_texts


def sents(text: str, lowercase: bool = True) -> list[list[str]]:
    (out,) = tokenize_texts([text], lowercase=lowercase)
    return out


def toks(text: str, lowercase: bool = True) -> list[str]:
    return [t for s in sents(text, lowercase) for t in s]


# -- normalisation and case ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\ufb01ne \ufb02ow", ["fine", "flow"]),  # ligatures fi, fl
        ("\uff21\uff22\uff23\uff11\uff12\uff13", ["abc123"]),  # fullwidth letters and digits
        ("x\u00b2", ["x2"]),  # superscript two
        ("cafe\u0301", ["caf\u00e9"]),  # combining acute composes
        ("\u2460", ["1"]),  # circled digit one
    ],
)
def test_nfkc_normalisation(text: str, expected: list[str]) -> None:
    assert toks(text) == expected


def test_lowercase_is_configurable() -> None:
    assert toks("Hello WORLD") == ["hello", "world"]
    assert toks("Hello WORLD", lowercase=False) == ["Hello", "WORLD"]
    assert toks("\u00c9COLE", lowercase=True) == ["\u00e9cole"]


def test_format_and_control_characters() -> None:
    assert toks("co\u00adop") == ["coop"]  # soft hyphen deleted
    assert toks("\ufeffstart") == ["start"]  # byte-order mark deleted
    assert toks("a\u200bb") == ["a", "b"]  # zero-width space separates
    assert toks("a\x00b\x07c") == ["a", "b", "c"]  # control characters separate
    assert toks("\u200d\u2060") == []  # only format characters: no token


# -- words ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("don't stop", ["don't", "stop"]),
        ("don\u2019t", ["don't"]),  # typographic apostrophe -> ASCII
        ("rock'n'roll", ["rock'n'roll"]),
        ("students' books", ["students", "'", "books"]),  # trailing apostrophe is punctuation
        ("'tis", ["'", "tis"]),
        ("state-of-the-art", ["state-of-the-art"]),
        ("well\u2010known", ["well-known"]),  # Unicode hyphen -> ASCII
        ("a--b", ["a", "-", "-", "b"]),  # only single internal hyphens join
        ("-x- y", ["-", "x", "-", "y"]),
        ("mp3 3rd covid-19", ["mp3", "3rd", "covid-19"]),  # words may hold digits
        ("na\u00efve", ["na\u00efve"]),
        ("\u0928\u092e\u0938\u094d\u0924\u0947", ["\u0928\u092e\u0938\u094d\u0924\u0947"]),  # marks inside
        ("\u65e5\u672c\u8a9e", ["\u65e5\u672c\u8a9e"]),  # no CJK segmentation: one letter run
    ],
)
def test_words(text: str, expected: list[str]) -> None:
    assert toks(text) == expected


# -- double quotes -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"no" he said', ['"', "no", '"', "he", "said"]),
        ("``no'' he said", ['"', "no", '"', "he", "said"]),  # Penn-Treebank pairs (Brown)
        ("\u201cno\u201d he said", ['"', "no", '"', "he", "said"]),  # typographic quotes
        ("\u2018\u2018no\u2019\u2019", ['"', "no", '"']),  # two typographic apostrophes each
        ("x = ''", ["x", "=", '"']),
        ("it's 'one' word", ["it's", "'", "one", "'", "word"]),  # single quotes stay
    ],
)
def test_every_way_of_writing_a_double_quote_is_one_token(text: str, expected: list[str]) -> None:
    """A public corpus in Penn-Treebank style and user text must agree on the quote token, or the
    public model never predicts the '"' of user text (it was the most frequent out-of-vocabulary
    token of every benchmark corpus against Brown: benchmarks/results/lm_oov.json)."""
    assert toks(text) == expected


def test_a_quote_still_closes_a_sentence() -> None:
    assert tokenize_texts(["He said ``stop.'' Then he left."])[0] == [
        ["he", "said", '"', "stop", ".", '"'],
        ["then", "he", "left", "."],
    ]


# -- numbers -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.5", ["3.5"]),
        ("1,000", ["1,000"]),
        ("1,000.50", ["1,000.50"]),
        ("pi is 3.14.", ["pi", "is", "3.14", "."]),
        ("2024-01-05", ["2024", "-", "01", "-", "05"]),
        ("3. 5", ["3", ".", "5"]),  # not a number: the dot ends a sentence
        ("1,", ["1", ","]),
        ("$5", ["$", "5"]),
    ],
)
def test_numbers(text: str, expected: list[str]) -> None:
    assert toks(text) == expected


# -- punctuation ---------------------------------------------------------------------------------
def test_each_other_symbol_is_its_own_token() -> None:
    assert toks("Hello, world!") == ["hello", ",", "world", "!"]
    assert toks("(a)[b]{c}") == ["(", "a", ")", "[", "b", "]", "{", "c", "}"]
    assert toks("wait...") == ["wait", ".", ".", "."]
    assert toks("a&b@c#") == ["a", "&", "b", "@", "c", "#"]
    assert toks("\u2764\ufe0f\U0001f600") == ["\u2764\ufe0f", "\U0001f600"]  # symbol + its variation selector


# -- sentences -----------------------------------------------------------------------------------
def test_sentence_splitting() -> None:
    assert sents("One. Two! Three? Four") == [["one", "."], ["two", "!"], ["three", "?"], ["four"]]
    assert sents("Wait... what?!  Yes") == [["wait", ".", ".", "."], ["what", "?", "!"], ["yes"]]
    assert sents('He said "hi." Then left.') == [["he", "said", '"', "hi", ".", '"'], ["then", "left", "."]]
    assert sents("(Really?) Yes.") == [["(", "really", "?", ")"], ["yes", "."]]
    assert sents("v3.5 is out.Really") == [["v3", ".", "5", "is", "out", ".", "really"]]  # no space: no split


@pytest.mark.parametrize("brk", ["\n", "\r\n", "\r", "\u2028", "\u2029", "\x0b", "\x0c", "\x85", "\n\n \n"])
def test_every_line_break_ends_a_sentence(brk: str) -> None:
    assert sents(f"first line{brk}second line") == [["first", "line"], ["second", "line"]]


def test_empty_inputs() -> None:
    assert tokenize_texts([]) == []
    assert tokenize_texts(["", "   ", "\n\n", "\t"]) == [[], [], [], []]
    assert tokenize_texts(pl.Series(["a", None], dtype=pl.String)) == [[["a"]], []]
    assert sents(". . .") == [["."], ["."], ["."]]


def test_series_and_iterable_inputs_agree_and_are_deterministic() -> None:
    texts = ["Hello there. General Kenobi!", "ﬁne\nline two", "3.5 and 1,000 don't"]
    first = tokenize_texts(texts)
    assert first == tokenize_texts(pl.Series(texts)) == tokenize_texts(iter(texts))
    assert first == tokenize_texts(texts)


def test_tokenize_texts_rejects_non_string_series() -> None:
    with pytest.raises(TypeError, match="needs strings"):
        tokenize_texts(pl.Series([1, 2]))


def test_tokenize_frame_numbers_sentences_and_drops_empty_documents() -> None:
    df = pl.DataFrame(
        {"user_id": ["u", "u", "v"], "doc_id": [1, 2, 3], "text": ["A b. C d! E", "\u200d", "x"]}
    )
    out = tokenize_frame(df)
    assert out.columns == ["user_id", "doc_id", "sent_id", "tokens"]
    assert out.sort("doc_id", "sent_id").rows() == [
        ("u", 1, 0, ["a", "b", "."]),
        ("u", 1, 1, ["c", "d", "!"]),
        ("u", 1, 2, ["e"]),
        ("v", 3, 0, ["x"]),
    ]


# -- one implementation, three entry points -----------------------------------------------------
TRICKY = [
    'Hello, World! Don\u2019t stop.\nNew line: 3.5% of 1,000 people (aged 18-25) said "no." OK?',
    "\ufb01ne \uff21\uff22 caf\u00e9 na\u00efve \u2014 state-of-the-art\u2026 really?!",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u65e5\u672c\u8a9e \u2764\ufe0f a\u200bb co\u00adop",
    "Trailing dots...",
    "x",
]


def test_ingest_stores_exactly_what_tokenize_texts_returns(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(json.dumps({"user_id": f"u{i}", "text": t}) + "\n" for i, t in enumerate(TRICKY)),
        encoding="utf-8",
    )
    expected = tokenize_texts(TRICKY)
    for lowercase in (True, False):
        config = RunConfig.build(input=str(path), out=str(tmp_path / "out"), lowercase=lowercase)
        with Warehouse(":memory:") as wh:
            wh.con.execute("CREATE SCHEMA s")
            ingest_file(wh, "s", config)
            rows = wh.con.execute(
                "SELECT doc_id, tokens FROM s.sentences ORDER BY doc_id, sent_id"
            ).fetchall()
        stored: dict[int, list[list[str]]] = {}
        for doc_id, tokens in rows:
            stored.setdefault(doc_id, []).append(tokens)
        want = expected if lowercase else tokenize_texts(TRICKY, lowercase=False)
        assert [stored[i + 1] for i in range(len(TRICKY))] == want


def test_public_corpus_is_tokenized_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "public.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(TRICKY) + "\n\n")
    got = list(read_public_corpus(path))
    assert got == [s for doc in tokenize_texts(TRICKY) for s in doc]
    assert list(read_public_corpus(path, lowercase=False))[0][0] == "Hello"


def test_public_corpus_replaces_undecodable_bytes(tmp_path: Path) -> None:
    path = tmp_path / "public.txt"
    path.write_bytes(b"ok line\nbad \xff byte\n")
    assert list(read_public_corpus(path)) == [["ok", "line"], ["bad", "\ufffd", "byte"]]


def test_nfkc_only_of_non_ascii_texts_equals_nfkc_of_all() -> None:
    """The ASCII pass-through (tokenizer.nfkc_expr) changes nothing: ASCII is NFKC-stable."""
    from dpngram.text.tokenizer import nfkc_expr

    texts = ["plain ascii", "\ufb01ne \u00bd", "\uff21\uff42c", None, "", "e\u0301", "x\u00a0y", "\u2126 ok"]
    texts += [chr(c) for c in range(128)]  # every ASCII character alone
    frame = pl.DataFrame({"t": texts}, schema={"t": pl.String})
    got = frame.select(nfkc_expr(pl.col("t"))).to_series()
    assert got.to_list() == frame.select(pl.col("t").str.normalize("NFKC")).to_series().to_list()
    assert got[1] == "fine 1\u20442"  # the non-ASCII ones really are normalized
