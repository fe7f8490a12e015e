"""Evaluation (lm/evaluate.py) and `dpngram evaluate`: the numbers follow the stated definitions
(checked against KenLM's per-word scores and hand computation), the spelling model is normalised,
the fast top-k equals a brute-force scan of the vocabulary, a smaller vocabulary is not rewarded by
the open-vocabulary perplexity, errors are one line."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
from collections import Counter

import kenlm
import polars as pl
import pytest

from dpngram.cli import main
from dpngram.lm import evaluate as evaluate_module
from dpngram.lm.arpa_file import read_arpa, write_arpa
from dpngram.lm.evaluate import (
    SPELL_ALPHABET,
    SPELL_MEAN_LENGTH,
    NextWordPredictor,
    evaluate_file,
    load_model,
    score_sentences,
    spelling_log10prob,
)
from dpngram.lm.kenlm_bin import kenlm_binary
from dpngram.lm.kneser_ney import kneser_ney
from dpngram.lm.ngram_tables import BOS, EOS, UNK

CORPUS = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["the", "dog", "sat", "on", "the", "log"],
    ["a", "cat", "saw", "the", "dog"],
    ["the", "cat", "ate", "the", "food"],
    ["a", "dog", "ate", "the", "cat", "food"],
    ["on", "the", "mat", "sat", "a", "cat"],
    ["the", "dog", "saw", "a", "cat", "on", "a", "log"],
    ["cat", "food", "is", "food"],
]
#: Unigrams without any count (only the uniform share of the KN mass): ties in the ranking.
EXTRA_VOCAB = ["zoo", "yak", "xylophone"]


def compile_model(arpa, binary):
    subprocess.run(
        [str(kenlm_binary("build_binary")), str(arpa), str(binary)], check=True, capture_output=True
    )
    return binary


def build_kn(directory, sentences, order, vocabulary=()):
    c = Counter()
    for s in sentences:
        p = [BOS, *s, EOS]
        for i in range(len(p) - order + 1):
            c[" ".join(p[i : i + order])] += 1.0
    model = kneser_ney(pl.DataFrame({"ngram": list(c), "count": list(c.values())}), order, vocabulary)
    arpa = directory / f"order{order}.arpa"
    write_arpa(model, arpa)
    return arpa, compile_model(arpa, directory / f"order{order}.binary")


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lm-eval")
    c = Counter()
    for s in (["the", "cat", "sat"], ["the", "dog", "sat"], ["a", "cat"]):
        p = [BOS, *s, EOS]
        for i in range(len(p) - 2):
            c[" ".join(p[i : i + 3])] += 1.0
    model = kneser_ney(pl.DataFrame({"ngram": list(c), "count": list(c.values())}), 3, ["the", "cat"])
    write_arpa(model, tmp / "toy.arpa")
    return compile_model(tmp / "toy.arpa", tmp / "toy.binary")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """order -> (arpa, binary) of KN models on CORPUS, orders 2, 3 and 4."""
    out = {}
    for order in (2, 3, 4):
        tmp = tmp_path_factory.mktemp(f"lm-eval-{order}")
        out[order] = build_kn(tmp, CORPUS, order, EXTRA_VOCAB)
    return out


# ----------------------------------------------------------------------------------------------
# Perplexities
# ----------------------------------------------------------------------------------------------
def test_definitions_match_kenlm_word_scores(toy_model):
    model = load_model(toy_model)
    sentences = [["the", "cat", "sat"], ["a", "zebra", "sat"], ["zebra"]]
    result = score_sentences(model, sentences)
    words = [w for s in sentences for w in model.full_scores(" ".join(s))]
    total = sum(lp for lp, _, _ in words)
    in_vocab = [lp for lp, _, oov in words if not oov]
    assert result["tokens"] == 7 and result["oov_tokens"] == 2 and result["oov_rate"] == pytest.approx(2 / 7)
    assert result["perplexity"] == pytest.approx(10 ** (-total / 10))  # 7 tokens + 3 </s>
    assert result["perplexity_without_oov"] == pytest.approx(10 ** (-sum(in_vocab) / 8))
    assert result["perplexity_without_oov"] != result["perplexity"]


def test_open_vocab_is_kenlm_score_plus_spelling_cost_of_each_oov(toy_model):
    model = load_model(toy_model)
    sentences = [["the", "zebra", "sat"], ["a", "cat", "ökonom"], ["zebra", "zebra"], ["the"]]
    result = score_sentences(model, sentences)
    expected, events = 0.0, 0
    for s in sentences:
        for i, (lp, _, oov) in enumerate(model.full_scores(" ".join(s))):
            events += 1
            expected += lp
            if oov:  # "zebra": 5 characters, "ökonom": 6 code points
                n = len(s[i])
                expected += n * math.log10(1 / 30) + math.log10(1 / 7) + (n - 1) * math.log10(6 / 7)
    assert events == 13 and result["oov_tokens"] == 4
    assert result["open_vocab_log10_prob"] == pytest.approx(expected, rel=1e-12)
    assert result["open_vocab_perplexity"] == pytest.approx(10 ** (-expected / 13), rel=1e-12)
    # OOVs cost more than <unk> alone; without OOVs the two perplexities coincide.
    assert result["open_vocab_perplexity"] > result["perplexity"]
    clean = score_sentences(model, [["the", "cat", "sat"]])
    assert clean["open_vocab_perplexity"] == pytest.approx(clean["perplexity"], rel=1e-12)


def test_spelling_model_values_and_normalisation():
    assert (SPELL_ALPHABET, SPELL_MEAN_LENGTH) == (30, 7)
    cat = 3 * math.log10(1 / 30) + math.log10(1 / 7) + 2 * math.log10(6 / 7)
    assert spelling_log10prob("cat") == pytest.approx(cat, abs=1e-12)
    assert spelling_log10prob("x") == pytest.approx(math.log10(1 / 210), abs=1e-12)
    assert spelling_log10prob("é") == spelling_log10prob("x")  # one code point, one character
    assert spelling_log10prob("😀") == spelling_log10prob("x")
    with pytest.raises(ValueError):
        spelling_log10prob("")
    # Default model: the 30^n strings of length n share the mass (1/7)(6/7)^(n-1), so the mass up
    # to length L is 1 - (6/7)^L (a geometric series), which tends to 1.
    for top in (1, 5, 40, 300):
        mass = sum(10 ** (n * math.log10(30) + spelling_log10prob("a" * n)) for n in range(1, top + 1))
        assert mass == pytest.approx(1 - (6 / 7) ** top, rel=1e-9, abs=1e-12)
    # Brute force over every string of a 3-symbol alphabet (mean length 2): 1 - (1/2)^L.
    mass = sum(
        10 ** spelling_log10prob("".join(w), alphabet=3, mean_length=2)
        for n in range(1, 8)
        for w in itertools.product("abc", repeat=n)
    )
    assert mass == pytest.approx(1 - 0.5**7, rel=1e-12)


def _hand_arpa(path, unigrams, bigrams, bos_backoff=0.0):
    """An order-2 ARPA written by hand: ``unigrams`` word -> p (each with backoff 0 = log10 1),
    ``bigrams`` "u w" -> p."""
    lines = ["\\data\\", f"ngram 1={len(unigrams) + 1}", f"ngram 2={len(bigrams)}", "", "\\1-grams:"]
    lines.append(f"-99\t{BOS}\t{bos_backoff}")
    lines += [f"{math.log10(p):.9f}\t{w}\t0" for w, p in unigrams.items()]
    lines += ["", "\\2-grams:"] + [f"{math.log10(p):.9f}\t{g}" for g, p in bigrams.items()]
    path.write_text("\n".join([*lines, "", "\\end\\", ""]), encoding="utf-8")
    return path


def test_a_smaller_vocabulary_is_not_rewarded(tmp_path):
    """Models A and B are identical except that B has no word "zebra": its mass is B's <unk>.
    Perplexity with OOVs as <unk> prefers B (p(<unk>) = 0.4 > p(zebra) = 0.2); the open-vocabulary
    perplexity charges B the spelling of "zebra" and prefers A. For a one-letter word the spelling
    is cheap (1/210) and mapping it to <unk> really does give it more probability: then B wins."""
    start = {"<s> a": 0.3}  # = p(a): with <s>'s backoff 1 every p(.|<s>) is the unigram p
    a = _hand_arpa(tmp_path / "a.arpa", {EOS: 0.3, "a": 0.3, "zebra": 0.2, UNK: 0.2}, start)
    b = _hand_arpa(tmp_path / "b.arpa", {EOS: 0.3, "a": 0.3, UNK: 0.4}, start)
    sentence = [["a", "zebra"]]
    ra, rb = (score_sentences(load_model(m), sentence) for m in (a, b))
    spell = 10 ** spelling_log10prob("zebra")
    assert ra["perplexity"] == pytest.approx((0.3 * 0.2 * 0.3) ** (-1 / 3), rel=1e-5)
    assert rb["perplexity"] == pytest.approx((0.3 * 0.4 * 0.3) ** (-1 / 3), rel=1e-5)
    assert rb["perplexity"] < ra["perplexity"]  # the flaw of the closed-vocabulary number
    assert ra["open_vocab_perplexity"] == pytest.approx(ra["perplexity"], rel=1e-12)  # no OOV in A
    assert rb["open_vocab_perplexity"] == pytest.approx((0.3 * 0.4 * spell * 0.3) ** (-1 / 3), rel=1e-5)
    assert rb["open_vocab_perplexity"] > ra["open_vocab_perplexity"]

    a1 = _hand_arpa(tmp_path / "a1.arpa", {EOS: 0.3, "a": 0.3, "x": 0.001, UNK: 0.399}, start)
    b1 = _hand_arpa(tmp_path / "b1.arpa", {EOS: 0.3, "a": 0.3, UNK: 0.4}, start)
    ra1, rb1 = (score_sentences(load_model(m), [["a", "x"]]) for m in (a1, b1))
    assert 0.4 * (1 / 210) > 0.001
    assert rb1["open_vocab_perplexity"] == pytest.approx((0.3 * 0.4 / 210 * 0.3) ** (-1 / 3), rel=1e-5)
    assert ra1["open_vocab_perplexity"] == pytest.approx((0.3 * 0.001 * 0.3) ** (-1 / 3), rel=1e-5)
    assert rb1["open_vocab_perplexity"] < ra1["open_vocab_perplexity"]


def test_model_without_unk_mass_is_scored(tmp_path):
    """KenLM gives a model without <unk> log10 p(<unk>) = -100; the OOV still pays its spelling."""
    arpa = _hand_arpa(tmp_path / "nounk.arpa", {EOS: 0.5, "a": 0.5}, {"<s> a": 0.5})
    result = evaluate_file(arpa, _text(tmp_path, "a b\n"))
    assert result["oov_tokens"] == 1
    expected = math.log10(0.5) + (-100.0) + spelling_log10prob("b") + math.log10(0.5)
    assert result["open_vocab_log10_prob"] == pytest.approx(expected, abs=1e-5)
    assert math.isfinite(result["open_vocab_perplexity"])
    assert result["top1_accuracy"] == pytest.approx(0.5)  # "a" is the only rankable word; "b" misses


# ----------------------------------------------------------------------------------------------
# Top-k next-word prediction
# ----------------------------------------------------------------------------------------------
def _tables(arpa):
    return {n: {g: (lp, bo) for g, lp, bo in t.iter_rows()} for n, t in read_arpa(arpa)[1].tables.items()}


def _backoff_lp(tables, order, context, word):
    """log10 p(word | context) by the ARPA back-off rule, straight from the definition."""
    h = context[max(0, len(context) - (order - 1)) :] if order > 1 else []
    listed = tables[len(h) + 1].get(" ".join([*h, word]))
    if listed is not None:
        return listed[0]
    bo = tables[len(h)].get(" ".join(h), (0.0, 0.0))[1] or 0.0
    return bo + _backoff_lp(tables, order, h[1:], word)


def _kenlm_lp(model, context, word):
    state = kenlm.State()
    model.BeginSentenceWrite(state)
    for t in context[1:]:
        nxt = kenlm.State()
        model.BaseScore(state, t, nxt)
        state = nxt
    return model.BaseScore(state, word, kenlm.State())


def _contexts(vocab):
    """Every sentence prefix of CORPUS, plus contexts that back off: unseen histories, OOVs
    ("gnu"), a context longer than any order."""
    out = [[BOS, *s[:i]] for s in CORPUS for i in range(len(s) + 1)]
    out += [[BOS, "gnu"], [BOS, "the", "gnu"], [BOS, "gnu", "cat"], [BOS, "mat", "the"], [BOS, "zoo"]]
    out += [[BOS, "food", "food", "dog"], [BOS, "the", "cat", "sat", "on", "the", "log", "a"]]
    out += [[BOS, w] for w in sorted(vocab)] + [[BOS, "cat", w] for w in sorted(vocab)]
    return out


@pytest.mark.parametrize("order", [2, 3, 4])
def test_top_k_equals_brute_force_over_the_vocabulary(models, order):
    arpa, binary = models[order]
    tables = _tables(arpa)
    kmodel = kenlm.Model(str(binary))
    predictor = NextWordPredictor.from_arpa(arpa)
    vocab = sorted(set(tables[1]) - {BOS, EOS, UNK})
    assert predictor.vocabulary == set(vocab) and predictor.order == order
    unlisted_contexts = backed_off = 0
    for context in _contexts(vocab):
        mapped = [t if t in tables[1] else UNK for t in context]
        h = mapped[max(0, len(mapped) - (order - 1)) :]
        unlisted_contexts += " ".join(h) not in tables[len(h)]
        backed_off += sum(" ".join([*h, w]) not in tables[len(h) + 1] for w in vocab)
        lps = {w: _backoff_lp(tables, order, mapped, w) for w in vocab}
        for w, lp in lps.items():  # the definition is KenLM's: float32 storage, 7-decimal ARPA
            assert lp == pytest.approx(_kenlm_lp(kmodel, context, w), abs=1e-4)
            assert predictor.log10prob(context, w) == lp
        brute = sorted(lps.items(), key=lambda item: (-item[1], item[0]))
        for k in (1, 3, 5, len(vocab), len(vocab) + 2):
            assert predictor.top(context, k) == brute[:k], (context, k)
    # The scan covered back-off: words not listed after the context, and (order > 2) contexts
    # the model does not list at all.
    assert backed_off > 100 and (order == 2 or unlisted_contexts >= 5)
    assert predictor.log10prob([BOS], "gnu") is None and predictor.log10prob([BOS], EOS) is None


@pytest.mark.parametrize("order", [2, 3, 4])
def test_predictor_from_the_model_structure_equals_the_one_from_strings(models, order):
    """A model whose structure was derived (one written or mixed) gives the predictor its context
    rows; a model read from a file is indexed from its n-gram strings: the same rankings."""
    arpa, _ = models[order]
    read, derived = read_arpa(arpa)[1], read_arpa(arpa)[1]
    derived.structure()
    assert read.derived_structure() is None and derived.derived_structure() is not None
    a, b = NextWordPredictor(read), NextWordPredictor(derived)
    vocab = sorted(a.vocabulary)
    for context in _contexts(vocab):
        assert a.top(context, len(vocab) + 2) == b.top(context, len(vocab) + 2), context
        assert [a.log10prob(context, w) for w in vocab] == [b.log10prob(context, w) for w in vocab]


def test_accuracy_is_the_same_for_any_batch_of_events(models, monkeypatch):
    """score_sentences resolves the events' contexts PREDICTION_BATCH at a time: one event at a
    time, or all at once, gives the same sums (and the same as a fresh predictor's per-context
    top-k)."""
    arpa, binary = models[3]
    sentences = [*CORPUS, ["a", "gnu", "ate", "the", "food"], ["the", "cat", "sat", "on", "a", "mat"]]
    all_at_once = score_sentences(load_model(binary), sentences, NextWordPredictor.from_arpa(arpa))
    monkeypatch.setattr(evaluate_module, "PREDICTION_BATCH", 1)
    one_by_one = score_sentences(load_model(binary), sentences, NextWordPredictor.from_arpa(arpa))
    assert one_by_one == all_at_once and all_at_once["accuracy_note"] is None
    predictor, hits, events = NextWordPredictor.from_arpa(arpa), Counter(), 0
    for s in sentences:
        for i, word in enumerate(s):
            events += 1
            top = [w for w, _ in predictor.top([BOS, *s[:i]], 3)]
            hits[1] += word in top[:1]
            hits[3] += word in top[:3]
    assert all_at_once["top1_accuracy"] == hits[1] / events
    assert all_at_once["top3_accuracy"] == hits[3] / events


def test_ties_are_broken_by_the_word_string(tmp_path):
    """p(b|<s>) is listed, p(a|<s>) backs off to p(a): both exactly 0.3; "a" ranks first."""
    arpa = _hand_arpa(
        tmp_path / "tie.arpa", {EOS: 0.3, "a": 0.3, "b": 0.1, "c": 0.2, UNK: 0.1}, {"<s> b": 0.3}
    )
    predictor = NextWordPredictor.from_arpa(arpa)
    top = predictor.top([BOS], 3)
    assert [w for w, _ in top] == ["a", "b", "c"]
    assert top[0][1] == top[1][1] == pytest.approx(math.log10(0.3), abs=1e-8)
    assert [w for w, _ in predictor.top([BOS, "a"], 3)] == ["a", "c", "b"]


@pytest.mark.parametrize("order", [2, 3])
def test_accuracy_counts_every_token_and_oov_targets_miss(models, order):
    arpa, binary = models[order]
    tables = _tables(arpa)
    vocab = sorted(set(tables[1]) - {BOS, EOS, UNK})
    sentences = [["the", "cat", "sat"], ["a", "gnu", "ate", "the", "food"], ["gnu"], ["the", "dog", "saw"]]
    result = score_sentences(load_model(binary), sentences, NextWordPredictor.from_arpa(arpa))
    hits, events = Counter(), 0
    for s in sentences:
        for i, word in enumerate(s):
            events += 1
            context = [BOS] + [t if t in tables[1] else UNK for t in s[:i]]
            ranked = sorted(vocab, key=lambda w: (-_backoff_lp(tables, order, context, w), w))
            hits[1] += word in ranked[:1]
            hits[3] += word in ranked[:3]
    assert result["prediction_events"] == events == result["tokens"] == 12
    assert result["top1_accuracy"] == pytest.approx(hits[1] / 12, abs=1e-12)
    assert result["top3_accuracy"] == pytest.approx(hits[3] / 12, abs=1e-12)
    assert 0 < hits[1] <= hits[3] <= 10  # the two "gnu" targets are misses
    assert result["accuracy_note"] is None


def test_arpa_lookup_and_missing_or_mismatched_arpa(models, tmp_path):
    arpa, binary = models[3]
    text = _text(tmp_path, "The cat sat on the mat.\n")
    beside = evaluate_file(binary, text)  # X.arpa beside X.binary
    assert beside["arpa_path"] == str(arpa) and beside["top1_accuracy"] is not None
    assert evaluate_file(arpa, text) == pytest.approx(beside | {"arpa_path": str(arpa)})
    alone = tmp_path / "alone.binary"
    shutil.copy(binary, alone)
    result = evaluate_file(alone, text)
    assert result["top1_accuracy"] is None and result["top3_accuracy"] is None
    assert result["prediction_events"] is None and "alone.arpa not found" in result["accuracy_note"]
    assert result["perplexity"] == pytest.approx(beside["perplexity"])
    assert evaluate_file(alone, text, arpa_path=arpa)["top3_accuracy"] == beside["top3_accuracy"]
    other, _ = build_kn(tmp_path, CORPUS[:3], 3)  # a different model's ARPA: refused, with a note
    result = evaluate_file(alone, text, arpa_path=other)
    assert result["top1_accuracy"] is None and "does not match the model" in result["accuracy_note"]
    result = evaluate_file(alone, text, arpa_path=models[2][0])
    assert result["top1_accuracy"] is None and "order 2" in result["accuracy_note"]


def _text(directory, content):
    path = directory / "eval.txt"
    path.write_text(content, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------
def test_cli_evaluate(toy_model, tmp_path, capsys):
    text = _text(tmp_path, "The cat sat. A zebra sat.\n")
    assert main(["evaluate", "--model", str(toy_model), "--text", str(text), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == pytest.approx(evaluate_file(toy_model, text))
    assert out["tokens"] == 8 and out["sentences"] == 2  # the pipeline tokenizer keeps "." as a token
    assert out["oov_tokens"] >= 1 and out["perplexity"] > 1
    assert set(out) == {
        "sentences",
        "tokens",
        "oov_tokens",
        "oov_rate",
        "log10_prob",
        "perplexity",
        "perplexity_without_oov",
        "open_vocab_log10_prob",
        "open_vocab_perplexity",
        "top1_accuracy",
        "top3_accuracy",
        "prediction_events",
        "accuracy_note",
        "order",
        "arpa_path",
    }
    assert out["prediction_events"] == 8 and out["open_vocab_perplexity"] > out["perplexity"]
    assert main(["evaluate", "--model", str(toy_model), "--text", str(text)]) == 0
    printed = capsys.readouterr().out
    assert "OOV rate" in printed
    assert f"open-vocabulary perplexity  {out['open_vocab_perplexity']:.3f}" in printed
    assert f"top-1 next-word accuracy    {out['top1_accuracy']:.4f}" in printed
    assert f"top-3 next-word accuracy    {out['top3_accuracy']:.4f}" in printed
    assert "spelling" in printed and "8 predictions" in printed

    alone = tmp_path / "alone.binary"
    shutil.copy(toy_model, alone)
    assert main(["evaluate", "--model", str(alone), "--text", str(text)]) == 0
    assert "next-word accuracy          n/a: top-k accuracy needs the ARPA file" in capsys.readouterr().out
    assert main(["evaluate", "--model", str(alone), "--text", str(text), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["top1_accuracy"] is None


def test_cli_evaluate_errors_are_one_line(toy_model, tmp_path, capsys):
    text = _text(tmp_path, "The cat sat. A zebra sat.\n")
    assert main(["evaluate", "--model", str(tmp_path / "missing"), "--text", str(text)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    assert main(["evaluate", "--model", str(text), "--text", str(text)]) == 2  # not a model
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "not a readable KenLM" in err and "zebra" not in err
    args = ["evaluate", "--model", str(toy_model), "--text", str(text), "--arpa"]
    assert main([*args, str(tmp_path / "none.arpa")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "arpa:" in err and "does not exist" in err
    assert main([*args, str(text)]) == 2  # an ARPA that is not one
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"arpa: {text} is not a readable ARPA file (line 1" in err
    assert "zebra" not in err


# ----------------------------------------------------------------------------------------------
# A consumer's held-out scoring (score_heldout): checked against the training corpus
# ----------------------------------------------------------------------------------------------
VERDICT = {
    "released_perplexity": 117.4,
    "public_only_perplexity": 114.7,
    "interval": {
        "level": 0.95,
        "released_perplexity": [80.1, 175.2],
        "public_only_perplexity": [78.3, 171.1],
        "log_ratio": [-0.21, 0.26],
    },
    "log_ratio": 0.023,
    "epsilon": 1.79,
    "verdict": "cannot tell",
    "sigma": 59.1,
}


def _release_report(directory, lowercase=True, verdict=VERDICT):
    path = directory / "report.json"
    model = {"private_domain": verdict} if verdict else {}
    path.write_text(
        json.dumps({"parameters": {"lowercase": lowercase, "public": "withheld"}, "model": model})
    )
    return path


def test_training_overlap_counts_sentences_tokenized_like_the_model(tmp_path):
    from dpngram.lm.consumer import training_overlap

    corpus = tmp_path / "public.txt.gz"
    import gzip

    with gzip.open(corpus, "wt", encoding="utf-8") as fh:
        fh.writelines(f"Sentence number {i} of the public corpus.\n" for i in range(50_000))
    text = tmp_path / "eval.txt"
    # line 1: two sentences, one in the corpus up to case and spacing; line 2: unseen; line 3: seen
    text.write_text(
        "SENTENCE  number 7 of the PUBLIC corpus. A sentence nobody wrote before.\n"
        "Another unseen line\nSentence number 49999 of the public corpus.\n"
    )
    assert training_overlap(text, corpus) == {"sentences": 4, "in_training_corpus": 2, "fraction": 0.5}
    # without lower-casing (a model built with lowercase=False), case matters
    assert training_overlap(text, corpus, lowercase=False)["in_training_corpus"] == 1
    unseen = _text(tmp_path, "nothing here is in it\n")
    assert training_overlap(unseen, corpus)["in_training_corpus"] == 0


def test_score_heldout_records_what_it_scored_on_beside_the_verdict(toy_model, tmp_path):
    import hashlib

    from dpngram.lm.consumer import score_heldout

    corpus = tmp_path / "public.txt"
    corpus.write_text("the cat sat\nthe dog sat\n")
    text = _text(tmp_path, "a cat sat\nthe yak sat\n")
    report = _release_report(tmp_path)
    record = score_heldout(toy_model, text, corpus, report)
    expected = evaluate_file(toy_model, text)
    assert record["text"] == {
        "path": str(text),
        "sha256": hashlib.sha256(text.read_bytes()).hexdigest(),
        "sentences": 2,
        "tokens": 6,
    }
    assert record["overlap"] == {
        "sentences": 2,
        "in_training_corpus": 0,
        "fraction": 0.0,
        "max_fraction": 0.01,
    }
    assert record["perplexity"] == pytest.approx(expected["perplexity"])
    assert record["oov_rate"] == pytest.approx(expected["oov_rate"]) and record["oov_rate"] > 0
    verdict = record["release_verdict"]
    assert {
        k: verdict[k] for k in ("released_perplexity", "public_only_perplexity", "epsilon", "verdict")
    } == {
        "released_perplexity": 117.4,
        "public_only_perplexity": 114.7,
        "epsilon": 1.79,
        "verdict": "cannot tell",
    }
    assert verdict["interval"] == VERDICT["interval"] and "sigma" not in verdict
    assert (
        verdict["line"].startswith("on held-out users of this dataset") and "cannot tell" in verdict["line"]
    )
    assert "a ratio of 1.02 (0.81–1.30, 95%)" in verdict["line"]  # exp of the paired estimate
    # a report written before the paired estimate was recorded still gets its line
    older = {k: v for k, v in VERDICT.items() if k != "log_ratio"}
    older["interval"] = {k: v for k, v in VERDICT["interval"].items() if k != "log_ratio"}
    line = score_heldout(toy_model, text, corpus, _release_report(tmp_path, verdict=older))[
        "release_verdict"
    ]["line"]
    assert "(released: 80–175, 95%)" in line and "cannot tell" in line
    assert (
        score_heldout(toy_model, text, corpus, _release_report(tmp_path, verdict=None))["release_verdict"]
        is None
    )


def test_score_heldout_refuses_text_the_model_was_trained_on(toy_model, tmp_path):
    from dpngram.core.errors import ConfigError
    from dpngram.lm.consumer import TrainingOverlapError, score_heldout

    corpus = tmp_path / "public.txt"
    corpus.write_text("".join(f"the cat sat number {i}\n" for i in range(300)))
    report = _release_report(tmp_path)
    # 2 of 101 sentences (2%) were in the training corpus: above the 1% threshold
    text = _text(tmp_path, "the cat sat number 5\nThe cat sat number 6\n" + "a dog sat\n" * 99)
    with pytest.raises(TrainingOverlapError) as err:
        score_heldout(toy_model, text, corpus, report)
    assert "\n" not in str(err.value) and "2 of its 101 sentences" in str(err.value)
    assert err.value.record["overlap"]["in_training_corpus"] == 2  # recorded either way
    assert "perplexity" not in err.value.record
    # 1 of 101 (0.99%) passes, and is recorded
    text = _text(tmp_path, "the cat sat number 5\n" + "a dog sat\n" * 100)
    assert score_heldout(toy_model, text, corpus, report)["overlap"]["in_training_corpus"] == 1
    # the public corpus itself is always refused
    with pytest.raises(TrainingOverlapError):
        score_heldout(toy_model, corpus, corpus, report)
    # an unknown training corpus: the check cannot be made, so nothing is scored
    with pytest.raises(ConfigError, match="training corpus"):
        score_heldout(toy_model, text, None, report)
