"""The compiled back-off scorer (dpngram.lm.backoff_scorer) against KenLM itself: every event of
random sentences, under Kneser-Ney models of orders 2-4 and under the mixed and adapted models the
language-model stages score, OOV words and unlisted contexts included.

Tolerance: KenLM stores log10 probabilities and backoffs as 32-bit floats read from the ARPA text
(written to 7 decimals), the scorer adds the tables' 64-bit values. An event sums at most N values
of magnitude < 100 (``<s>`` is -99 but is never predicted; real values are > -10), so the two agree
to N x (0.5e-7 + 10 x 2^-24) < 5e-6 for N <= 4."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import polars as pl
import pytest

from dpngram.lm.arpa_file import read_arpa, write_arpa
from dpngram.lm.backoff_scorer import BackoffScorer
from dpngram.lm.evaluate import load_model
from dpngram.lm.kneser_ney import kneser_ney
from dpngram.lm.mixture import adapt_to_unigrams, mix_models
from dpngram.lm.ngram_tables import BOS, EOS, ArpaModel, unigram_distribution

TOLERANCE = 5e-6
WORDS = [f"w{i}" for i in range(25)]


def corpus(seed: int, n: int) -> list[list[str]]:
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    return [rng.choices(WORDS, weights, k=rng.randint(1, 9)) for _ in range(n)]


def model_of(sentences: list[list[str]], order: int) -> ArpaModel:
    c: Counter[str] = Counter()
    for s in sentences:
        p = [BOS, *s, EOS]
        for i in range(len(p) - order + 1):
            c[" ".join(p[i : i + order])] += 1.0
    top = pl.DataFrame({"ngram": list(c), "count": list(c.values())})
    return kneser_ney(top, order, [*WORDS, "<unk>"])


def kenlm_scores(model: ArpaModel, path, sentences: list[list[str]]) -> np.ndarray:
    write_arpa(model, path)
    km = load_model(path)
    return np.array([x[0] for s in sentences for x in km.full_scores(" ".join(s), bos=True, eos=True)])


def scorer_scores(scorer: BackoffScorer, sentences: list[list[str]]) -> np.ndarray:
    flat = pl.Series([t for s in sentences for t in s], dtype=pl.String)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sentences])])
    return scorer.score(scorer.word_rows(flat), offsets)


def sample_sentences() -> list[list[str]]:
    # test words: unseen sequences, OOV words (also several in a row), one-word sentences
    out = corpus(99, 300)
    rng = random.Random(5)
    for s in out[::7]:
        s.insert(rng.randrange(len(s) + 1), "oov-" + str(rng.randrange(3)))
    out.append(["oov-a", "oov-b", "w0", "w1"])
    return out


@pytest.mark.parametrize("order", [2, 3, 4])
def test_kneser_ney_models_score_as_kenlm(tmp_path, order):
    model = model_of(corpus(order, 400), order)
    sentences = sample_sentences()
    want = kenlm_scores(model, tmp_path / "m.arpa", sentences)
    got = scorer_scores(BackoffScorer.from_model(model), sentences)
    assert got.shape == want.shape == (sum(len(s) + 1 for s in sentences),)
    assert np.max(np.abs(got - want)) < TOLERANCE
    # the test exercises the back-off path: many events are not listed at the top order
    assert len(np.unique(np.round(got, 4))) > 100


def test_mixed_and_adapted_models_score_as_kenlm(tmp_path):
    """The models the stages score: the public model adapted to the private unigrams, and the
    mixture merged into one back-off model (dpngram.lm.open_model)."""
    public = model_of(corpus(1, 500), 3)
    private = model_of(corpus(2, 80), 3)
    adapted = adapt_to_unigrams(public, unigram_distribution(private), 0.5)
    mixed = mix_models(adapted, private, 0.3)
    sentences = sample_sentences()
    for name, model in (("adapted", adapted), ("mixed", mixed)):
        want = kenlm_scores(model, tmp_path / f"{name}.arpa", sentences)
        got = scorer_scores(BackoffScorer.from_model(model), sentences)
        assert np.max(np.abs(got - want)) < TOLERANCE, name


def test_a_scorer_built_like_another_shares_its_tables_and_scores_its_own_model(tmp_path):
    """from_model(adapted, like=P's scorer): the adapted model shares P's structure, so the hash
    tables are P's (the same arrays) and the probabilities the adapted model's own, as KenLM scores
    it; a model with other n-grams ignores ``like``."""
    public = model_of(corpus(1, 500), 3)
    private = model_of(corpus(2, 80), 3)
    base = BackoffScorer.from_model(public)
    sentences = sample_sentences()
    for beta in (0.5, 1.0):
        adapted = adapt_to_unigrams(public, unigram_distribution(private), beta)
        shared = BackoffScorer.from_model(adapted, like=base)
        assert shared.table_keys is base.table_keys and shared.vocabulary is base.vocabulary
        want = kenlm_scores(adapted, tmp_path / f"a{beta}.arpa", sentences)
        assert np.max(np.abs(scorer_scores(shared, sentences) - want)) < TOLERANCE
        assert np.max(np.abs(scorer_scores(base, sentences) - want)) > 100 * TOLERANCE  # not P's
    mixed = mix_models(public, private, 0.3)  # a union of n-grams: its own tables
    own = BackoffScorer.from_model(mixed, like=base)
    assert own.table_keys is not base.table_keys
    want = kenlm_scores(mixed, tmp_path / "mixed.arpa", sentences)
    assert np.max(np.abs(scorer_scores(own, sentences) - want)) < TOLERANCE


def test_a_model_read_from_an_arpa_file_scores_as_kenlm(tmp_path):
    """A model without a derived structure (read from the file) derives its links from the strings."""
    model = model_of(corpus(3, 200), 3)
    sentences = sample_sentences()
    want = kenlm_scores(model, tmp_path / "m.arpa", sentences)
    _, read = read_arpa(tmp_path / "m.arpa")
    assert read.derived_structure() is None
    got = scorer_scores(BackoffScorer.from_model(read), sentences)
    assert np.max(np.abs(got - want)) < TOLERANCE


def test_hand_computed_backoff():
    """p(w | h) by the ARPA rule on a model small enough to do by hand: a listed bigram, a bigram
    backing off through its listed context, an OOV word, and </s>."""
    tables = {
        1: pl.DataFrame(
            {
                "ngram": ["</s>", "<s>", "<unk>", "a", "b"],
                "logprob": [-0.9, -99.0, -1.5, -0.5, -0.7],
                "backoff": [0.0, -0.3, 0.0, -0.2, -0.4],
            }
        ),
        2: pl.DataFrame({"ngram": ["<s> a", "a b"], "logprob": [-0.1, -0.25], "backoff": [None, None]}),
    }
    scorer = BackoffScorer.from_model(ArpaModel(tables))
    got = scorer_scores(scorer, [["a", "b", "zz", "a"]])
    want = [
        -0.1,  # <s> a: listed
        -0.25,  # a b: listed
        -0.4 + -1.5,  # b zz -> b <unk>: bo(b) + p(<unk>)
        0.0 + -0.5,  # <unk> a: bo(<unk>) = 0 + p(a)
        -0.2 + -0.9,  # a </s>: bo(a) + p(</s>)
    ]
    assert got.tolist() == pytest.approx(want, abs=1e-12)


def test_a_model_without_unk_is_refused():
    tables = {
        1: pl.DataFrame({"ngram": ["</s>", "<s>", "a"], "logprob": [-0.5, -99.0, -0.3], "backoff": [0.0] * 3})
    }
    with pytest.raises(ValueError, match="<unk>"):
        BackoffScorer.from_model(ArpaModel(tables))


@pytest.mark.parametrize("order, mixed", [(2, False), (3, False), (4, False), (3, True)])
def test_evaluate_model_matches_evaluate_file(tmp_path, order, mixed):
    """The model card's held-out comparison scores in-memory models (evaluate_model): the same
    metrics as KenLM on the ARPA file with NextWordPredictor's ranking (evaluate_file), top-k
    accuracies included (equal counts: both rank the same tables by the same rule)."""
    from dpngram.lm.evaluate import evaluate_file, evaluate_model

    model = model_of(corpus(4, 300), order)
    if mixed:
        model = mix_models(model, model_of(corpus(6, 60), order), 0.4)
    text = tmp_path / "text.txt"
    text.write_text("\n".join(" ".join(s) + " ." for s in sample_sentences()), encoding="utf-8")
    write_arpa(model, tmp_path / "m.arpa")
    want = evaluate_file(tmp_path / "m.arpa", text, arpa_model=model)
    got = evaluate_model(model, text)
    assert got["top1_accuracy"] is not None and got["tokens"] > 1000
    for key in ("sentences", "tokens", "oov_tokens", "top1_accuracy", "top3_accuracy", "prediction_events"):
        assert got[key] == want[key], key
    for key in ("perplexity", "perplexity_without_oov", "open_vocab_perplexity"):
        # a mean of per-event differences < TOLERANCE in log10
        assert got[key] == pytest.approx(want[key], rel=TOLERANCE * 2.31), key
