"""The opt-in pruned public model (``lm_public_prune``, issue 52 item 4; docs/lm.md, "A pruned public
model"): Kneser-Ney with the top order's rare n-grams left out stays a normalised model, leaves out
exactly those n-grams, changes nothing but the top order and its contexts' backoffs, equals KenLM's
``lmplz --prune``, and reaches the run's model through the configuration (and its cache keys)."""

from __future__ import annotations

import subprocess
from collections import Counter

import numpy as np
import polars as pl
import pytest
from test_lm_arpa import SENTENCES, VOCAB, counts, frame, lookup

from dpngram.config import RunConfig
from dpngram.core.errors import ArpaError, ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.lm.arpa_file import check_model, read_arpa
from dpngram.lm.kenlm_bin import kenlm_binary
from dpngram.lm.kneser_ney import kneser_ney_model, kneser_ney_terms
from dpngram.lm.ngram_tables import BOS, EOS, UNK
from dpngram.lm.open_model import open_public_model
from dpngram.release import layout
from dpngram.release.context import read_parts
from dpngram.stages import lm as lm_stage
from dpngram.stages import lm_counts as lm_counts_stage
from dpngram.text.sample import write_sample

#: Trigram counts from 1 to 4, so each cut below keeps some and prunes others.
CORPUS = [*SENTENCES, *SENTENCES[:3], ["a", "b", "c"]]


def _model(sentences, order, vocabulary, prune=0.0, scale=1.0):
    return kneser_ney_model(
        kneser_ney_terms(frame(counts(sentences, order, scale)), order, vocabulary, prune=prune)
    )


@pytest.mark.parametrize("prune", [1.0, 2.0])
@pytest.mark.parametrize("order", [2, 3])
def test_a_pruned_model_leaves_out_exactly_the_rare_top_order_and_still_sums_to_one(order, prune):
    full, pruned = _model(CORPUS, order, VOCAB), _model(CORPUS, order, VOCAB, prune)
    check_model(pruned)
    top = counts(CORPUS, order)
    kept = {g for g, c in top.items() if c > prune}
    assert 0 < len(kept) < len(top)  # the case prunes some n-grams and keeps others
    assert set(pruned.tables[order]["ngram"].to_list()) == kept
    # below the top order the tables are the full model's, except the backoff of a context that
    # lost a continuation (it receives that continuation's whole count)
    for n in range(1, order):
        assert pruned.tables[n]["ngram"].to_list() == full.tables[n]["ngram"].to_list()
        assert pruned.tables[n]["logprob"].to_list() == full.tables[n]["logprob"].to_list()
    lost = {" ".join(g.split(" ")[:-1]) for g in set(top) - kept}
    both = full.tables[order - 1].join(pruned.tables[order - 1], on="ngram", suffix="_pruned")
    changed = set(both.filter(pl.col("backoff") != pl.col("backoff_pruned"))["ngram"].to_list())
    assert changed == lost
    assert (
        both.filter(pl.col("ngram").is_in(list(lost)))["backoff_pruned"]
        > both.filter(pl.col("ngram").is_in(list(lost)))["backoff"]
    ).all()
    # every context's distribution still sums to 1 under ARPA backoff semantics
    tables, logp = lookup(pruned)
    predicted = [w for w in tables[1] if w != BOS]
    contexts = {()} | {tuple(g.split(" ")) for n in range(1, order) for g in tables[n]}
    for h in contexts:
        if EOS in h or len(h) >= order:
            continue
        assert sum(10 ** logp(h, w) for w in predicted) == pytest.approx(1.0, abs=1e-9), h


def test_prune_zero_is_the_full_model_and_a_bad_prune_is_refused():
    top = frame(counts(CORPUS, 3, 1.0))
    default, zero = kneser_ney_terms(top, 3, VOCAB), kneser_ney_terms(top, 3, VOCAB, prune=0.0)
    assert all(zero[n].equals(default[n]) for n in (1, 2, 3))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ArpaError, match="prune"):
            kneser_ney_terms(top, 3, VOCAB, prune=bad)


def _zipf_sentences(seed: int, n_sentences: int, n_words: int, exponent: float) -> list[list[str]]:
    """Random sentences of Zipf-distributed words."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_words + 1) ** exponent
    weights /= weights.sum()
    lengths = rng.integers(3, 16, n_sentences)
    return [[f"w{i}" for i in rng.choice(n_words, size=k, p=weights)] for k in lengths]


@pytest.mark.parametrize("prune", [0, 1, 2])
def test_the_pruned_model_equals_lmplz_prune(tmp_path, prune):
    """KenLM's lmplz (built by make setup) estimates interpolated modified Kneser-Ney and, with
    ``--prune 0 0 K``, leaves out the trigrams seen at most K times in the same way: every n-gram
    listed by one is listed by the other, with the same log10 probability and backoff to the
    precision lmplz prints (about 1e-7; the tolerance 1e-5 leaves float32 rounding in lmplz). The
    corpus has every count-of-count the discounts need, and none of its discounts reaches the
    clamps of :func:`dpngram.lm.kneser_ney.modified_discounts` (lmplz has none)."""
    sentences = _zipf_sentences(20261206, 3000, 1000, 1.5)
    text = tmp_path / "corpus.txt"
    text.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    vocabulary = sorted({w for s in sentences for w in s})
    ours = _model(sentences, 3, vocabulary, float(prune))
    command = [str(kenlm_binary("lmplz")), "-o", "3", "-S", "200M", "-T", str(tmp_path)]
    if prune:
        command += ["--prune", "0", "0", str(prune)]
    arpa = tmp_path / "lmplz.arpa"
    with text.open("rb") as stdin, arpa.open("wb") as stdout:
        subprocess.run(command, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, check=True)
    _, theirs = read_arpa(arpa)
    rare = sum(1 for c in Counter(counts(sentences, 3)).values() if c <= prune)
    assert (rare > 1000) == (prune > 0)  # the pruned cases leave out many trigrams
    for n in (1, 2, 3):
        mine = ours.tables[n].filter(pl.col("ngram") != BOS)
        kenlm_rows = theirs.tables[n].filter(pl.col("ngram") != BOS)
        assert sorted(mine["ngram"].to_list()) == sorted(kenlm_rows["ngram"].to_list()), n
        both = mine.join(kenlm_rows, on="ngram", suffix="_kenlm")
        assert (both["logprob"] - both["logprob_kenlm"]).abs().max() < 1e-5, n
        if n < 3:
            assert (both["backoff"] - both["backoff_kenlm"]).abs().max() < 1e-5, n
    assert UNK in ours.tables[1]["ngram"].to_list()


def test_the_public_model_is_pruned_on_its_own_counts_and_cached_apart(tmp_path):
    """``open_public_model(public_prune=K)`` lists exactly the top-order n-grams whose count over the
    model vocabulary exceeds K (the full model: every counted one), the same from its cache as
    computed, and a pruned and an unpruned model never share a cache entry."""
    files = write_sample(tmp_path / "sample", n_users=20, seed=3, vocab_size=300, public_sentences=2000)
    cache = tmp_path / "cache"

    def opened(prune):
        return open_public_model(
            ["zzz-dp-only"],
            str(files["public"]),
            order=3,
            public_cap=200,
            cache_dir=cache,
            public_prune=prune,
        )

    for prune in (0, 1, 0, 1):  # each computed once, then read from the cache
        vocabulary, mapped, model = opened(prune)
        top = mapped[3]
        listed = set(model.tables[3]["ngram"].to_list())
        assert listed == set(top.filter(pl.col("count") > prune)["ngram"].to_list())
        assert "zzz-dp-only" in vocabulary and "zzz-dp-only" in model.tables[1]["ngram"].to_list()
    assert len(list((cache / "models").iterdir())) == 2
    full, pruned = opened(0)[2], opened(1)[2]
    assert pruned.tables[3].height < full.tables[3].height / 2  # most public trigrams are singletons
    assert pruned.tables[2].equals(full.tables[2].select(pruned.tables[2].columns)) is False  # backoffs


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same seeded release through DPNE, then lm_counts and lm, without and with the pruning."""
    from test_lm_stage import _through_dpne

    runs = {}
    for prune in (0, 1):
        tmp = tmp_path_factory.mktemp(f"prune-{prune}")
        files = write_sample(tmp / "sample", n_users=300, seed=5, vocab_size=300, public_sentences=3000)
        ctx = _through_dpne(tmp, files, lm_public_prune=prune, noise=NoiseSource.seeded_for_tests(5))
        lm_counts_stage.run_lm_counts(ctx, noise=NoiseSource.seeded_for_tests(6))
        lm_stage.run_lm(ctx)
        runs[prune] = ctx
    return runs


def test_a_pruned_run_releases_the_same_counts_and_a_smaller_valid_model(two_runs):
    """The pruning is post-processing of the public corpus: the noisy counts released (the DP
    output) are the unpruned run's, bit for bit, under the same noise; the model has fewer trigrams,
    passes its checks, and its report and card say it was pruned."""
    full, pruned = two_runs[0], two_runs[1]
    counts_of = {k: pl.read_parquet(ctx.release.root / layout.LM_COUNTS) for k, ctx in two_runs.items()}
    assert counts_of[1].equals(counts_of[0])
    declared = {k: read_arpa(ctx.release.root / layout.MODEL_ARPA)[0] for k, ctx in two_runs.items()}
    assert declared[1][3] < declared[0][3] and declared[1][1] == declared[0][1]
    parts = {k: read_parts(ctx)["lm"] for k, ctx in two_runs.items()}
    assert parts[1]["validation"]["success"] is True
    assert "pruned" in parts[1]["smoothing"] and "pruned" not in parts[0]["smoothing"]
    card = (pruned.release.root / layout.MODEL_CARD).read_text(encoding="utf-8")
    assert "lm_public_prune" in card
    assert full.config.lm.public_prune == 0 and pruned.config.lm.public_prune == 1


def test_the_option_is_a_flag_and_a_bounded_parameter():
    from dpngram.cli.parser import build_parser

    args = build_parser().parse_args(["run", "--input", "x", "--out", "o", "--lm-public-prune", "2"])
    assert args.lm_public_prune == 2
    assert RunConfig.build(input="x", out="o", lm_public_prune=2).lm.public_prune == 2
    assert RunConfig.build(input="x", out="o").lm.public_prune == 0
    with pytest.raises(ConfigError, match="lm_public_prune"):
        RunConfig.build(input="x", out="o", lm_public_prune=-1)
