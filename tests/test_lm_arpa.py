"""Kneser-Ney (lm/kneser_ney.py) and the ARPA file (lm/arpa_file.py): Kneser-Ney on expected
counts gives normalised conditional distributions, the ARPA validity rules are enforced, and
KenLM's build_binary accepts the file."""

from __future__ import annotations

import hashlib
import itertools
import math
import subprocess
from collections import Counter

import polars as pl
import pytest

from dpngram.core.errors import ArpaError
from dpngram.lm.arpa_file import check_model, read_arpa, write_arpa
from dpngram.lm.kenlm_bin import kenlm_binary
from dpngram.lm.kneser_ney import kneser_ney, raw_marginals
from dpngram.lm.ngram_tables import BOS, EOS, UNK, ArpaModel
from dpngram.lm.open_model import ngrams_of_sentences

SENTENCES = [["a", "b", "c"], ["a", "b"], ["b", "c", "a", "b"], ["c"], ["a", "a", "a", "c", "b"]]
VOCAB = ["a", "b", "c", "d"]


def counts(sentences, n, weight=1.0):
    c = Counter()
    for s in sentences:
        p = [BOS, *s, EOS]
        for i in range(len(p) - n + 1):
            c[" ".join(p[i : i + n])] += weight
    return c


def frame(c: Counter) -> pl.DataFrame:
    return pl.DataFrame({"ngram": list(c), "count": [float(v) for v in c.values()]})


def lookup(model: ArpaModel):
    tables = {
        n: dict(zip(t["ngram"], zip(t["logprob"], t["backoff"], strict=True), strict=True))
        for n, t in model.tables.items()
    }

    def logp(context: tuple[str, ...], word: str) -> float:
        """ARPA backoff semantics: log10 p(word | context)."""
        for start in range(len(context) + 1):
            h = context[start:]
            n = len(h) + 1
            if n > model.order:
                continue
            key = " ".join((*h, word))
            if key in tables[n]:
                return tables[n][key][0] + sum(
                    (tables[len(context[s:])].get(" ".join(context[s:]), (0.0, 0.0))[1] or 0.0)
                    for s in range(0, start)
                    if len(context[s:]) < model.order
                )
        raise AssertionError(word)

    return tables, logp


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5, 6])
def test_sentence_ngrams_match_the_counting_reference_at_every_order(order):
    """The padded n-grams of sentences as polars counts them equal the Python reference at every
    order KenLM builds, sentences shorter than the order included: the one-token sentence ["c"]
    has no 5-gram. (The polars list length is unsigned: before the count was made signed, order 5
    wrapped that sentence's number of starts to about 2^32 and asked for 34 GB.)"""
    got = ngrams_of_sentences(pl.Series(SENTENCES, dtype=pl.List(pl.String)), order, None)
    expected = counts(SENTENCES, max(order, 2)) if order > 1 else counts(SENTENCES, 1)
    if order == 1:  # every predicted token: no <s>
        expected = Counter({k: v for k, v in expected.items() if k != BOS})
    assert dict(zip(got["ngram"], got["count"], strict=True)) == dict(expected)
    assert any(len(s) + 3 - order < 0 for s in SENTENCES) == (order >= 5)  # the short case is covered


def test_raw_marginals_recover_lower_order_counts_exactly():
    tri = counts(SENTENCES, 3)
    raw = raw_marginals(frame(tri), 3)
    assert dict(zip(raw[2]["ngram"], raw[2]["count"], strict=True)) == pytest.approx(
        dict(counts(SENTENCES, 2))
    )
    uni = {k: v for k, v in counts(SENTENCES, 1).items() if k != BOS}
    got = {k: v for k, v in zip(raw[1]["ngram"], raw[1]["count"], strict=True) if v > 0}
    assert got == pytest.approx(uni)


@pytest.mark.parametrize("scale", [0.01, 1.0, 37.5])
@pytest.mark.parametrize("order", [1, 2, 3])
def test_every_context_sums_to_one(order, scale):
    model = kneser_ney(frame(counts(SENTENCES, order, scale)), order, VOCAB)
    check_model(model)
    tables, logp = lookup(model)
    predicted = [w for w in tables[1] if w != BOS]
    assert set(predicted) == {*VOCAB, EOS, UNK}
    contexts = {()} | {tuple(g.split(" ")) for n in range(1, order) for g in tables[n]}
    contexts |= {("d", "a"), ("c", "c")}  # unseen contexts back off
    for h in contexts:
        if EOS in h or len(h) >= order:
            continue
        total = sum(10 ** logp(h, w) for w in predicted)
        assert total == pytest.approx(1.0, abs=1e-9), h


def test_written_arpa_is_valid_for_kenlm_and_scores_match(tmp_path):
    import kenlm

    model = kneser_ney(frame(counts(SENTENCES, 3, 2.0)), 3, VOCAB)
    arpa = tmp_path / "m.arpa"
    digest = hashlib.sha256()
    declared = write_arpa(model, arpa, digest=digest)
    # the digest is of exactly the bytes on disk (step lm checks the file against it)
    assert digest.hexdigest() == hashlib.sha256(arpa.read_bytes()).hexdigest()
    read_declared, back = read_arpa(arpa)
    assert read_declared == declared == {n: t.height for n, t in back.tables.items()}
    # the file holds the tables written: same n-grams in the same rows, values to the 7 decimals
    # written (step lm validates the tables it wrote, not a parse of the file)
    for n, table in model.tables.items():
        assert back.tables[n]["ngram"].to_list() == table["ngram"].to_list()
        columns = ("logprob",) if n == model.order else ("logprob", "backoff")
        for column in columns:
            assert max(abs(table[column].to_numpy() - back.tables[n][column].to_numpy())) <= 5e-8
    assert back.tables[3]["backoff"].null_count() == back.tables[3].height
    assert all((t["logprob"] <= 0).all() for t in back.tables.values())
    binary = tmp_path / "m.binary"
    subprocess.run(
        [str(kenlm_binary("build_binary")), str(arpa), str(binary)], check=True, capture_output=True
    )
    k = kenlm.Model(str(binary))
    _, logp = lookup(model)
    for sentence in (["a", "b", "c"], ["d", "a", "zzz"], ["c", "c", "c"]):
        ours = 0.0
        hist = (BOS,)
        for w in [*sentence, EOS]:
            word = w if w in VOCAB or w == EOS else UNK
            ours += logp(hist[-2:], word)
            hist = (*hist, word)
        assert k.score(" ".join(sentence), bos=True, eos=True) == pytest.approx(ours, abs=1e-4)
    # conditional distributions of the compiled model sum to 1 (float32 storage: 1e-5)
    for context in ([], ["a"], ["a", "b"], ["d", "c"]):
        state = kenlm.State()
        k.BeginSentenceWrite(state)
        for w in context:
            nxt = kenlm.State()
            k.BaseScore(state, w, nxt)
            state = nxt
        total = sum(10 ** k.BaseScore(state, w, kenlm.State()) for w in [*VOCAB, EOS, UNK])
        assert total == pytest.approx(1.0, abs=1e-5)


def test_rule_violations_are_refused(tmp_path):
    good = kneser_ney(frame(counts(SENTENCES, 3)), 3, VOCAB)

    def broken(n, fn):
        tables = dict(good.tables)
        tables[n] = fn(tables[n])
        return ArpaModel(tables)

    trigrams = good.tables[3]["ngram"].to_list()
    contexts = {" ".join(g.split()[:2]) for g in trigrams}
    only_suffix = sorted({" ".join(g.split()[1:]) for g in trigrams} - contexts)[0]
    cases = {
        "context": broken(2, lambda t: t.filter(pl.col("ngram") != "a b")),
        "1 n-gram suffix": broken(2, lambda t: t.filter(pl.col("ngram") != only_suffix)),
        "top order has no backoff": broken(3, lambda t: t.with_columns(backoff=pl.lit(-0.1))),
        "<= 0": broken(
            1,
            lambda t: t.with_columns(
                logprob=pl.when(pl.col("ngram") == "a").then(0.5).otherwise(pl.col("logprob"))
            ),
        ),
        "<unk> is missing": broken(1, lambda t: t.filter(pl.col("ngram") != UNK)),
        "duplicate": broken(3, lambda t: pl.concat([t, t.head(1)])),
        # sorted, so the strictly-sorted shortcut does not hold and the count finds the duplicate
        "duplicate n-grams": broken(2, lambda t: pl.concat([t, t.tail(1)]).sort("ngram")),
    }
    for message, model in cases.items():
        with pytest.raises(ArpaError, match=message):
            write_arpa(model, tmp_path / "bad.arpa")
        # the membership-only closure test (the model.arpa suite's) refuses the same models
        with pytest.raises(ArpaError, match=message):
            check_model(ArpaModel(dict(model.tables)), links=False)
    check_model(ArpaModel(dict(good.tables)), links=False)
    assert not (tmp_path / "bad.arpa").exists()
    with pytest.raises(ArpaError, match="exactly 3 tokens"):
        kneser_ney(pl.DataFrame({"ngram": ["a b"], "count": [1.0]}), 3)
    with pytest.raises(ArpaError, match=">= 0"):
        kneser_ney(pl.DataFrame({"ngram": ["a b c"], "count": [-1.0]}), 3)


def test_fractional_counts_closure_adds_missing_contexts():
    # a lone trigram whose prefix never occurs as a suffix: the closure must add "x y" and "x"
    model = kneser_ney(pl.DataFrame({"ngram": ["x y z", "<s> a b"], "count": [0.3, 5.0]}), 3, ["q"])
    check_model(model)
    assert "x y" in model.tables[2]["ngram"].to_list()
    assert {"q", "x", "y", "z"} <= set(model.tables[1]["ngram"].to_list())
    assert not any(math.isnan(v) for t in model.tables.values() for v in t["logprob"])
    assert list(itertools.chain(model.tables)) == [1, 2, 3]


def _rows(model: ArpaModel) -> dict[int, list[tuple]]:
    return {n: t.rows() for n, t in model.tables.items()}


def test_the_columnwise_reader_equals_the_line_reader_and_falls_back_on_odd_files(tmp_path):
    """read_arpa parses a regular file column-wise (polars): the same declared counts and tables, row
    for row, as the line-by-line reader, on a file from write_arpa and one from KenLM's lmplz-style
    layout (blank lines, CRLF, a 2-field line at a lower order). Odd files take the line reader,
    so its one-line errors stay."""
    from dpngram.lm.arpa_file import _read_arpa_lines, _read_regular_arpa

    arpa = tmp_path / "m.arpa"
    write_arpa(kneser_ney(frame(counts(SENTENCES, 3, 2.0)), 3, VOCAB), arpa)
    assert _read_regular_arpa(arpa) is not None  # the fast path is the one taken
    fast, slow = read_arpa(arpa), _read_arpa_lines(arpa)
    assert fast[0] == slow[0] and _rows(fast[1]) == _rows(slow[1])

    kenlm_like = tmp_path / "k.arpa"
    kenlm_like.write_bytes(
        b"\r\n\\data\\\r\nngram 1=3\r\nngram 2=1\r\n\r\n\\1-grams:\r\n-1.5\t<unk>\t0\r\n"
        b"-99\t<s>\t-0.25\r\n-0.5\t</s>\r\n\r\n\\2-grams:\r\n-0.1\t<s> </s>\r\n\r\n\\end\\\r\n"
    )
    fast, slow = read_arpa(kenlm_like), _read_arpa_lines(kenlm_like)
    assert _read_regular_arpa(kenlm_like) is not None
    assert fast[0] == slow[0] == {1: 3, 2: 1} and _rows(fast[1]) == _rows(slow[1])
    assert _rows(fast[1])[1][2] == ("</s>", -0.5, None)

    odd = {
        "text before": "junk\n\\data\\\nngram 1=1\n\\1-grams:\n-1\t<unk>\n\\end\\\n",
        "four fields": "\\data\\\nngram 1=1\n\\1-grams:\n-1\t<unk>\t0\t9\n\\end\\\n",
        "not numeric": "\\data\\\nngram 1=1\n\\1-grams:\nx\t<unk>\n\\end\\\n",
        "bad header": "\\data\\\nngram 1=1\n\\one-grams:\n-1\t<unk>\n\\end\\\n",
    }
    for name, text in odd.items():
        path = tmp_path / f"{name}.arpa"
        path.write_text(text, encoding="utf-8")
        assert _read_regular_arpa(path) is None, name
        with pytest.raises(ArpaError, match=r"^line \d+: "):
            read_arpa(path)

    # the byte the column-wise reader splits lines on, inside a token: the line reader reads it
    odd_byte = tmp_path / "odd-byte.arpa"
    odd_byte.write_text("\\data\\\nngram 1=1\n\\1-grams:\n-1\ta\x01b\n\\end\\\n", encoding="utf-8")
    assert _read_regular_arpa(odd_byte) is None
    assert read_arpa(odd_byte)[1].tables[1]["ngram"].to_list() == ["a\x01b"]


def test_binary_build_runs_beside_the_caller_and_reports_failures(tmp_path):
    """build_binary in its own process (dpngram.lm.build.BinaryBuild): the result appears only after
    wait(), renamed into place; a failing build raises with KenLM's last line and leaves no partial
    file; cancel() leaves nothing."""
    import kenlm

    from dpngram.lm.build import BinaryBuild

    model = kneser_ney(frame(counts(SENTENCES, 3, 2.0)), 3, VOCAB)
    arpa = write_arpa(model, tmp_path / "m.arpa") and tmp_path / "m.arpa"
    binary = tmp_path / "m.binary"
    build = BinaryBuild(arpa, binary)
    assert not binary.exists()  # not in place before wait(), whatever the subprocess has done
    build.wait()
    assert binary.is_file() and not build.tmp.exists()
    assert kenlm.Model(str(binary)).order == 3
    build.wait()  # a second wait is a no-op

    broken = tmp_path / "broken.arpa"
    broken.write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1.0\t<s>\n\\end\\\n", encoding="utf-8")
    failing = BinaryBuild(broken, tmp_path / "broken.binary")
    with pytest.raises(RuntimeError, match=r"build_binary failed \(exit [1-9]"):
        failing.wait()
    assert not (tmp_path / "broken.binary").exists() and not failing.tmp.exists()

    cancelled = BinaryBuild(arpa, tmp_path / "cancelled.binary")
    cancelled.cancel()
    cancelled.wait()  # nothing left to wait for
    assert not (tmp_path / "cancelled.binary").exists() and not cancelled.tmp.exists()
