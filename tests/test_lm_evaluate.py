"""Perplexity evaluation (lm/evaluate.py) and `dpngram evaluate`: the numbers follow the stated
definitions (checked against KenLM's per-word scores), OOVs are counted, errors are one line."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import polars as pl
import pytest

from lm.arpa import BOS, EOS, kneser_ney, write_arpa
from lm.evaluate import evaluate_file, load_model, score_sentences
from lm.kenlm_bin import kenlm_binary
from pipeline.cli import main


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
    subprocess.run(
        [str(kenlm_binary("build_binary")), str(tmp / "toy.arpa"), str(tmp / "toy.binary")],
        check=True,
        capture_output=True,
    )
    return tmp / "toy.binary"


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


def test_cli_evaluate(toy_model, tmp_path, capsys):
    text = tmp_path / "eval.txt"
    text.write_text("The cat sat. A zebra sat.\n", encoding="utf-8")
    assert main(["evaluate", "--model", str(toy_model), "--text", str(text), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == pytest.approx(evaluate_file(toy_model, text))
    assert out["tokens"] == 8 and out["sentences"] == 2  # the pipeline tokenizer keeps "." as a token
    assert out["oov_tokens"] >= 1 and out["perplexity"] > 1
    assert main(["evaluate", "--model", str(toy_model), "--text", str(text)]) == 0
    assert "OOV rate" in capsys.readouterr().out
    assert main(["evaluate", "--model", str(tmp_path / "missing"), "--text", str(text)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    assert main(["evaluate", "--model", str(text), "--text", str(text)]) == 2  # not a model
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "not a readable KenLM" in err and "zebra" not in err
