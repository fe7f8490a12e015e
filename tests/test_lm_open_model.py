"""The open-vocabulary model's post-processing (lm/open_model.py) on toy models small enough to
enumerate every (context, word) pair:

* ``model_probabilities`` follows ARPA backoff semantics (checked against an independent
  dictionary walk of the tables for every n-gram over the toy alphabet, listed or not);
* ``mix_models`` writes λ·Q + (1 − λ)·P as one ARPA model: exact on listed n-grams, every context
  sums to one, λ = 0 / λ = 1 reproduce P / Q everywhere, and KenLM compiles and agrees with it;
* ``noisy_count_model`` (Q) follows its documented formulas (unigram level, bigram level, closure)
  and is normalised;
* ``model_vocabulary`` keeps every DP word, caps the public words by count with deterministic
  ties, and never lists the markers.
"""

from __future__ import annotations

import itertools
import math
import random
import subprocess
from collections import Counter

import polars as pl
import pytest

from dpngram.core.errors import ArpaError
from dpngram.lm.arpa_file import check_model, write_arpa
from dpngram.lm.kenlm_bin import kenlm_binary
from dpngram.lm.kneser_ney import kneser_ney
from dpngram.lm.mixture import NgramUnion, adapt_to_unigrams, mix_models, model_probabilities, union_ngrams
from dpngram.lm.ngram_tables import BOS, EOS, UNK, ArpaModel
from dpngram.lm.open_model import MARKERS, model_vocabulary, noisy_count_model

ORDER = 3
VOCAB = ["a", "b", "c", "d", "e"]  # d and e never occur in the public text
PUBLIC_TEXT = [
    ["a", "b", "c"],
    ["a", "b"],
    ["b", "c", "a", "b"],
    ["c"],
    ["a", "a", "c", "b"],
    ["b", "a"],
    ["c", "c", "b", "a", "b"],
]
#: Words a model can predict (every unigram but <s>).
PREDICTED = [*VOCAB, EOS, UNK]
#: Tokens that may stand inside a context (not <s>, which only starts one; never </s>).
INNER = [*VOCAB, UNK]
THRESHOLD, DISCOUNT = 2.0, 0.5

# Hand-made noisy counts for Q. Order 1: listed (>= threshold) a, b, d, </s>; c below the threshold,
# e negative, <s> large (it must not enter the total T).
NOISY_1 = {"a": 9.0, "b": 6.5, "c": 1.2, "d": 4.0, "e": -1.5, EOS: 5.0, UNK: 0.3, BOS: 40.0}
NOISY_2 = {
    "<s> a": 5.0,
    "a b": 4.0,
    "b c": 1.0,  # below the threshold: not listed
    "d a": 3.0,  # Q lists it, P does not (d has no public count)
    "b </s>": 3.5,
    "c a": 2.5,  # c's own count 1.2 < 2.5: S(c) is the continuation sum
    "a d": 2.2,
    "<s> d": 2.5,
}
NOISY_3 = {
    "<s> a b": 3.0,  # context and suffix listed: kept
    "a b c": 5.0,  # suffix "b c" not listed: dropped (closure)
    "d a b": 2.5,  # kept
    "b c a": 3.0,  # context "b c" not listed: dropped (closure)
    "a d a": 2.1,  # kept
    "c a b": 1.5,  # below the threshold: dropped
    "<s> d a": 2.0,  # exactly at the threshold: kept (>=)
}
EXPECTED_Q_TRIGRAMS = {"<s> a b", "d a b", "a d a", "<s> d a"}


# ----------------------------------------------------------------------------------------------
# Helpers (independent of lm/open_model.py)
# ----------------------------------------------------------------------------------------------
def trigram_counts(sentences: list[list[str]]) -> pl.DataFrame:
    counts: Counter[str] = Counter()
    for sentence in sentences:
        padded = [BOS, *sentence, EOS]
        for i in range(len(padded) - 2):
            counts[" ".join(padded[i : i + 3])] += 1
    return pl.DataFrame({"ngram": list(counts), "count": [float(c) for c in counts.values()]})


def noisy_frame(*orders: dict[str, float]) -> pl.DataFrame:
    rows = [(n, g, c) for n, table in enumerate(orders, start=1) for g, c in table.items()]
    return pl.DataFrame(
        rows, schema={"n": pl.Int64, "ngram": pl.String, "noisy_count": pl.Float64}, orient="row"
    )


class Backoff:
    """ARPA semantics by a plain dictionary walk: p(w | h) = 10^logprob(hw) if hw is listed, else
    b(h) · p(w | h[1:]) with b(h) = 10^backoff(h) when h is listed (1 otherwise); an unlisted
    unigram has probability 0."""

    def __init__(self, model: ArpaModel) -> None:
        self.order = model.order
        self.logprob: dict[str, float] = {}
        self.backoff: dict[str, float] = {}
        for table in model.tables.values():
            for gram, lp, bo in table.select("ngram", "logprob", "backoff").iter_rows():
                self.logprob[gram] = lp
                if bo is not None:
                    self.backoff[gram] = bo

    def prob(self, context: tuple[str, ...], word: str) -> float:
        context = context[-(self.order - 1) :] if self.order > 1 else ()
        gram = " ".join((*context, word))
        if gram in self.logprob:
            return 0.0 if word == BOS else 10.0 ** self.logprob[gram]
        if not context:
            return 0.0
        weight = 10.0 ** self.backoff.get(" ".join(context), 0.0)
        return weight * self.prob(context[1:], word)


def contexts(order: int) -> list[tuple[str, ...]]:
    """Every context of length 0..order-1 a sentence can produce (<s> only first)."""
    out: list[tuple[str, ...]] = [()]
    for length in range(1, order):
        for first in (BOS, *INNER):
            out.extend((first, *rest) for rest in itertools.product(INNER, repeat=length - 1))
    return out


def all_ngrams(order: int) -> dict[int, pl.DataFrame]:
    """Every n-gram (context, predicted word) for n = 1..order, plus <s> at order 1: closed under
    suffixes, as model_probabilities requires."""
    grams: dict[int, list[str]] = {1: [BOS, *PREDICTED]}
    for n in range(2, order + 1):
        grams[n] = [" ".join((*h, w)) for h in contexts(n) if len(h) == n - 1 for w in PREDICTED]
    return {n: pl.DataFrame({"ngram": g}) for n, g in grams.items()}


def as_dict(frame: pl.DataFrame) -> dict[str, float]:
    return dict(frame.select("ngram", "prob").iter_rows())


@pytest.fixture(scope="module")
def public() -> ArpaModel:
    model = kneser_ney(trigram_counts(PUBLIC_TEXT), ORDER, VOCAB)
    check_model(model)
    return model


@pytest.fixture(scope="module")
def private(public) -> ArpaModel:
    model = noisy_count_model(
        noisy_frame(NOISY_1, NOISY_2, NOISY_3), public, ORDER, threshold=THRESHOLD, discount=DISCOUNT
    )
    check_model(model)
    return model


# ----------------------------------------------------------------------------------------------
# model_probabilities
# ----------------------------------------------------------------------------------------------
def test_model_probabilities_follow_arpa_backoff_for_every_ngram(public, private):
    # Both sides evaluate the same float64 log10 tables; they differ only in the order of the
    # multiplications (at most 3 factors), i.e. a few ulps: rel 1e-12 is far above that.
    grams = all_ngrams(ORDER)
    for model in (public, private):
        ref = Backoff(model)
        got = model_probabilities(model, grams)
        assert set(got) == set(range(1, ORDER + 1))
        for n in range(1, ORDER + 1):
            values = as_dict(got[n])
            assert set(values) == set(grams[n]["ngram"].to_list())
            for gram, p in values.items():
                *h, w = gram.split(" ")
                assert p == pytest.approx(ref.prob(tuple(h), w), rel=1e-12, abs=1e-300), gram


# ----------------------------------------------------------------------------------------------
# mix_models
# ----------------------------------------------------------------------------------------------
def listed(model: ArpaModel, n: int) -> set[str]:
    return set(model.tables[n]["ngram"].to_list())


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_mixture_is_exact_on_every_listed_ngram(public, private, weight):
    """(a) 10^logprob of every listed n-gram of the mixture = λ q + (1 − λ) p.

    Tolerance: the mixture table stores log10 of the float64 mixture; 10^(log10 x) returns x with
    relative error ≤ (ln(10)·|log10 x| + 1)·2^-52 ≈ 1e-15 for the toy's |log10 x| < 4 (smallest
    probability ~5e-4), so rel 1e-12 is safe and still far below any modelling error."""
    mixed = mix_models(public, private, weight)
    check_model(mixed)
    assert mixed.order == ORDER
    union = {n: pl.DataFrame({"ngram": sorted(listed(public, n) | listed(private, n))}) for n in mixed.tables}
    for n in mixed.tables:
        assert listed(mixed, n) == listed(public, n) | listed(private, n)
    p = model_probabilities(public, union)
    q = model_probabilities(private, union)
    for n in range(1, ORDER + 1):
        pn, qn = as_dict(p[n]), as_dict(q[n])
        for gram, lp in mixed.tables[n].select("ngram", "logprob").iter_rows():
            if gram == BOS:
                continue
            expected = weight * qn[gram] + (1.0 - weight) * pn[gram]
            assert 10.0**lp == pytest.approx(expected, rel=1e-12), (weight, gram)


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_every_context_of_the_mixture_sums_to_one(public, private, weight):
    """(b) Σ_w p_mix(w | h) = 1 for every context h over the whole vocabulary (listed or backed
    off). Each of the 7 terms is a product of ≤ 3 factors read from float64 log10 values (relative
    error ~1e-15 each) and the backoff weights are ratios (1 − Σ)/(1 − Σ') of float64 sums of ≤ 7
    terms whose values here are ≥ 5e-3, so each weight is off by ≤ 2·7·2^-52/5e-3 ≈ 6e-13 relative
    and |Σ − 1| ≲ 1e-12; 1e-9 leaves margin, while dropping or double-counting any term would move
    the sum by ≥ 5e-4 (the smallest probability)."""
    ref = Backoff(mix_models(public, private, weight))
    for h in contexts(ORDER):
        total = sum(ref.prob(h, w) for w in PREDICTED)
        assert total == pytest.approx(1.0, abs=1e-9), (weight, h)
        assert ref.prob(h, BOS) == 0.0


def test_order_weights_mix_that_order_and_every_context_still_sums_to_one(public, private):
    """``order_weights`` (a study's option): the unigrams mix with their own λ, the other orders
    with ``weight``; the backoff weights renormalise, so (b)'s bound holds unchanged."""
    weight, unigram_weight = 0.3, 0.8
    mixed = mix_models(public, private, weight, {1: unigram_weight})
    check_model(mixed)
    union = {n: pl.DataFrame({"ngram": sorted(listed(public, n) | listed(private, n))}) for n in mixed.tables}
    p, q = model_probabilities(public, union), model_probabilities(private, union)
    for n in range(1, ORDER + 1):
        lam = unigram_weight if n == 1 else weight
        pn, qn = as_dict(p[n]), as_dict(q[n])
        for gram, lp in mixed.tables[n].select("ngram", "logprob").iter_rows():
            if gram != BOS:
                assert 10.0**lp == pytest.approx(lam * qn[gram] + (1.0 - lam) * pn[gram], rel=1e-12)
    ref = Backoff(mixed)
    for h in contexts(ORDER):
        assert sum(ref.prob(h, w) for w in PREDICTED) == pytest.approx(1.0, abs=1e-9), h
    with pytest.raises(ArpaError, match="order 1"):
        mix_models(public, private, weight, {1: 1.5})


@pytest.mark.parametrize("weight,which", [(0.0, "public"), (1.0, "private")])
def test_weight_zero_and_one_reproduce_the_components_everywhere(public, private, weight, which):
    """(c) λ = 0 gives P and λ = 1 gives Q for every (h, w), listed or backed off. The backoff
    weight of a context is then γ(h)·(1 − Σ')/(1 − Σ') of the component: equal up to the float64
    rounding of those sums (≤ 1e-13 relative here, see above): rel 1e-9."""
    component = public if which == "public" else private
    mixed, ref = Backoff(mix_models(public, private, weight)), Backoff(component)
    for h in contexts(ORDER):
        for w in PREDICTED:
            assert mixed.prob(h, w) == pytest.approx(ref.prob(h, w), rel=1e-9), (h, w)


def test_mixture_arpa_compiles_and_kenlm_agrees(public, private, tmp_path):
    """(d) The written ARPA passes check_model, build_binary compiles it, and KenLM's conditional
    distributions equal the tables' and sum to one.

    Tolerance: write_arpa rounds every log10 value to 7 decimals (error ≤ 5e-8) and KenLM stores
    float32 (relative 2^-24 of the value); a backed-off score adds ≤ 3 stored values (logprob and
    two backoffs), so |Δ log10 p| ≤ 3·(5e-8 + 2^-24·m) with m the largest |value| in the tables;
    the sum over the vocabulary is then off by ≤ ln(10)·that (each term's relative error, and
    Σ p = 1)."""
    import kenlm

    mixed = mix_models(public, private, 0.3)
    check_model(mixed)
    arpa, binary = tmp_path / "mix.arpa", tmp_path / "mix.binary"
    write_arpa(mixed, arpa)
    subprocess.run(
        [str(kenlm_binary("build_binary")), str(arpa), str(binary)], check=True, capture_output=True
    )
    km = kenlm.Model(str(binary))
    assert km.order == ORDER

    largest = max(
        float(t.filter(pl.col("ngram") != BOS).select(pl.col("logprob").abs().max()).item())
        for t in mixed.tables.values()
    )
    largest = max(largest, *(float(t["backoff"].abs().max() or 0.0) for t in mixed.tables.values()))
    log_tol = 3 * (5e-8 + 2.0**-24 * largest)
    ref = Backoff(mixed)
    for h in contexts(ORDER):
        state = kenlm.State()
        if h and h[0] == BOS:
            km.BeginSentenceWrite(state)
            rest = h[1:]
        else:
            km.NullContextWrite(state)
            rest = h
        for token in rest:
            nxt = kenlm.State()
            km.BaseScore(state, token, nxt)
            state = nxt
        total = 0.0
        for w in PREDICTED:
            score = km.BaseScore(state, w, kenlm.State())
            assert score == pytest.approx(math.log10(ref.prob(h, w)), abs=log_tol), (h, w)
            total += 10.0**score
        assert total == pytest.approx(1.0, abs=math.log(10) * log_tol + 1e-12), h


# ----------------------------------------------------------------------------------------------
# noisy_count_model
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("level", [1.0, -1.0])
def test_without_listed_ngrams_q_is_the_public_unigram_model(public, level):
    """No count reaches the threshold (total T > 0 or < 0): Q's unigram level is P's unigram
    level (γ₀ = 1) and Q has nothing above order 1. One log10/10^ round trip: abs 1e-12 on log10."""
    below = {w: level for w in [*PREDICTED, BOS]}
    bigrams = {"a b": level, "<s> a": level}
    trigrams = {"<s> a b": level}
    q = noisy_count_model(
        noisy_frame(below, bigrams, trigrams), public, ORDER, threshold=THRESHOLD, discount=DISCOUNT
    )
    check_model(q)
    assert q.tables[2].height == 0 and q.tables[3].height == 0
    p_uni = dict(public.tables[1].select("ngram", "logprob").iter_rows())
    q_uni = dict(q.tables[1].select("ngram", "logprob").iter_rows())
    assert set(q_uni) == set(p_uni)
    for w in PREDICTED:
        assert q_uni[w] == pytest.approx(p_uni[w], abs=1e-12), w
    assert q_uni[BOS] == p_uni[BOS]  # <s> keeps the never-predicted marker value
    ref = Backoff(q)
    for h in contexts(ORDER):
        assert sum(ref.prob(h, w) for w in PREDICTED) == pytest.approx(1.0, abs=1e-12)


def test_noisy_count_model_unigram_formula(public, private):
    """Q(w) = (ĉ(w) − D)₊/T + γ₀ P(w), T = Σ order-1 counts without <s>, γ₀ = 1 − Σ_listed (ĉ − D)/T;
    an unlisted word (below the threshold, or negative) gets γ₀ P(w). Values are a handful of
    float64 operations, then one log10 round trip: rel 1e-12."""
    total = sum(c for w, c in NOISY_1.items() if w != BOS)
    assert total < NOISY_1[BOS]  # a T that included <s> would be off by more than a factor 2
    kept = {w: c - DISCOUNT for w, c in NOISY_1.items() if w != BOS and c >= THRESHOLD}
    assert set(kept) == {"a", "b", "d", EOS}
    gamma0 = 1.0 - sum(kept.values()) / total
    assert 0 < gamma0 < 1
    p_uni = Backoff(public)
    q_uni = Backoff(private)
    for w in PREDICTED:
        expected = kept.get(w, 0.0) / total + gamma0 * p_uni.prob((), w)
        assert q_uni.prob((), w) == pytest.approx(expected, rel=1e-12), w
    assert sum(q_uni.prob((), w) for w in PREDICTED) == pytest.approx(1.0, abs=1e-12)


def test_noisy_count_model_bigram_formula_and_closure(public, private):
    """Q(w|h) = (ĉ(hw) − D)₊/S(h) + γ(h) Q(w) with S(h) = max(ĉ(h), Σ_listed ĉ(hw)) and
    γ(h) = 1 − Σ_listed (ĉ(hw) − D)₊/S(h); trigrams whose context or suffix is not listed one order
    below are dropped. Same rounding as above: rel 1e-12."""
    listed2 = {g: c for g, c in NOISY_2.items() if c >= THRESHOLD}
    assert listed(private, 2) == set(listed2)
    assert listed(private, 3) == EXPECTED_Q_TRIGRAMS
    q = Backoff(private)
    for h in {g.split(" ")[0] for g in listed2}:
        follow = {g.split(" ")[1]: c for g, c in listed2.items() if g.split(" ")[0] == h}
        s = max(NOISY_1[h], sum(follow.values()))
        gamma = 1.0 - sum(c - DISCOUNT for c in follow.values()) / s
        for w in PREDICTED:
            expected = (
                (follow[w] - DISCOUNT) / s + gamma * q.prob((), w) if w in follow else gamma * q.prob((), w)
            )
            assert q.prob((h,), w) == pytest.approx(expected, rel=1e-12), (h, w)
    assert NOISY_1["c"] < NOISY_2["c a"]  # the S(h) = continuation-sum branch is exercised


def test_noisy_count_model_every_context_sums_to_one(private):
    """Interpolated absolute discounting normalises every context (rounding as in the mixture
    test: abs 1e-9)."""
    ref = Backoff(private)
    for h in contexts(ORDER):
        assert sum(ref.prob(h, w) for w in PREDICTED) == pytest.approx(1.0, abs=1e-9), h


# ----------------------------------------------------------------------------------------------
# model_vocabulary
# ----------------------------------------------------------------------------------------------
def capped_public(words: Counter[str], cap: int) -> set[str]:
    """The cap public words by the documented rule, stated differently: w is kept iff fewer than
    ``cap`` non-marker words rank above it (a larger count, or the same count and a smaller word)."""
    candidates = [w for w in words if w not in MARKERS]
    return {w for w in candidates if sum(1 for v in candidates if (words[v], w) > (words[w], v)) < cap}


def test_model_vocabulary_keeps_dp_words_and_caps_public_words():
    dp = ["zeta", "alpha", BOS, "", UNK, "alpha", "rare"]
    public = Counter({"the": 10, "of": 7, "and": 7, "a": 7, "zeta": 1, EOS: 100, UNK: 50, "x": 1, "rare": 0})
    for cap in range(0, 10):
        got = model_vocabulary(dp, public, cap)
        assert got == sorted(got) and len(got) == len(set(got))
        assert not set(got) & set(MARKERS) and "" not in got
        assert set(got) == {"zeta", "alpha", "rare"} | capped_public(public, cap), cap
        # deterministic: the Counter's insertion order does not matter
        items = list(public.items())
        random.Random(cap).shuffle(items)
        assert model_vocabulary(reversed(dp), Counter(dict(items)), cap) == got
        # the public unigram frame as open_public_model passes it: the same choice
        frame = pl.DataFrame({"ngram": [w for w, _ in items], "count": [float(c) for _, c in items]})
        assert model_vocabulary(dp, frame, cap) == got
    # the three-word cap takes "the", then two of the count-7 words by word order: "a", "and"
    assert model_vocabulary([], public, 3) == ["a", "and", "the"]
    assert model_vocabulary(dp, None, 5) == ["alpha", "rare", "zeta"]
    assert model_vocabulary(dp, public, 0) == ["alpha", "rare", "zeta"]
    # ties by code point order, as Python's str comparison ("Z" < "a" < "é" < "日")
    accents = Counter({"é": 2, "a": 2, "Z": 2, "日": 2})
    assert [model_vocabulary([], accents, k) for k in (1, 2, 3)] == [["Z"], ["Z", "a"], ["Z", "a", "é"]]


def test_unigram_adaptation_is_exact_mdi_in_backoff_form():
    """adapt_to_unigrams: for every context (listed or backing off), p'(w|h) = α(w)p(w|h)/Z(h) with
    α(w) = (t(w)/p(w))^β computed by brute force over the vocabulary; each context sums to 1.
    Tolerance: float64 sums over < 10 words (1e-12)."""
    from collections import Counter

    from dpngram.lm.mixture import adapt_to_unigrams

    c: Counter[str] = Counter()
    for s in (["a", "b", "c"], ["a", "c"], ["b", "b", "a"], ["c", "a", "b", "c"]):
        p = ["<s>", *s, "</s>"]
        for i in range(len(p) - 2):
            c[" ".join(p[i : i + 3])] += 1.0
    base = kneser_ney(pl.DataFrame({"ngram": list(c), "count": list(c.values())}), 3, ["a", "b", "c", "d"])
    words = [w for w in base.tables[1]["ngram"].to_list() if w != "<s>"]
    target = pl.DataFrame(
        {"ngram": words, "prob": [0.4 if w == "d" else 0.6 / (len(words) - 1) for w in words]}
    )
    p1 = {r["ngram"]: 10 ** r["logprob"] for r in base.tables[1].iter_rows(named=True)}
    t = dict(zip(target["ngram"], target["prob"], strict=True))
    bigrams = pl.DataFrame({"ngram": [f"{a} {b}" for a in ["<s>", *words] for b in words]})
    for beta in (0.5, 1.0):
        adapted = adapt_to_unigrams(base, target, beta)
        for h in (("<s>", "a"), ("a", "b"), ("d", "d"), ("b", "a"), ("c", "</s>")):
            grams = {
                1: pl.DataFrame({"ngram": words}),
                2: bigrams,
                3: pl.DataFrame({"ngram": [f"{h[0]} {h[1]} {w}" for w in words]}),
            }
            before = dict(model_probabilities(base, grams)[3].iter_rows())
            after = dict(model_probabilities(adapted, grams)[3].iter_rows())
            scaled = {g: (t[g.split()[-1]] / p1[g.split()[-1]]) ** beta * p for g, p in before.items()}
            z = sum(scaled.values())
            assert sum(after.values()) == pytest.approx(1.0, abs=1e-12)
            for g, p in after.items():
                assert p == pytest.approx(scaled[g] / z, abs=1e-12), (beta, g)
    # β = 0 changes nothing
    same = adapt_to_unigrams(base, target, 0.0)
    for n in (1, 2, 3):
        assert same.tables[n]["logprob"].to_list() == pytest.approx(
            base.tables[n]["logprob"].to_list(), abs=1e-12
        )


def test_public_counts_stream_in_batches_and_merge_to_the_exact_counts(tmp_path, monkeypatch):
    """The public corpus is counted batch by batch (polars series, never Python lists) and the
    batch counts are merged lazily: with a merge after every few rows the result must equal a
    direct count of every n-gram (brute force in Python), for each part of the held-out split."""
    from dpngram.lm import open_model
    from dpngram.lm.open_model import HELDOUT_EVERY
    from dpngram.text import public as public_text
    from dpngram.text import records

    rng = random.Random(11)
    words = [f"w{i}" for i in range(40)] + ["Rare", "ünïcode"]
    lines = []
    for _ in range(700):
        sentences = [
            " ".join(rng.choices(words, k=rng.randint(1, 9))) + " ." for _ in range(rng.randint(1, 3))
        ]
        lines.append(" ".join(sentences) if rng.random() > 0.05 else "   ")
    corpus = tmp_path / "public.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(records, "BATCH_BYTES", 2_000)  # many batches
    monkeypatch.setattr(open_model, "MERGE_MIN_ROWS", 50)  # many merges
    monkeypatch.setattr(open_model, "PUBLIC_BATCH_SENTENCES", 7)  # reader batches cut into chunks
    everything = list(open_model.public_sentences(corpus, True, "all"))
    assert sum(1 for _ in public_text.read_public_batches(corpus)) > 5
    vocabulary = set(rng.sample(sorted({t for s in everything for t in s}), 25))
    for part in ("all", "train", "heldout"):
        chosen = [
            s
            for i, s in enumerate(everything)
            if part == "all" or (part == "heldout") == (i % HELDOUT_EVERY == HELDOUT_EVERY - 1)
        ]
        assert list(open_model.public_sentences(corpus, True, part)) == chosen
        assert open_model.public_word_counts(corpus, True, part) == Counter(t for s in chosen for t in s)
        counts = open_model.public_counts(corpus, 3, vocabulary, True, part)
        for n in (1, 2, 3):
            expected: Counter[str] = Counter()
            for s in chosen:
                padded = [BOS] + [t if t in vocabulary else UNK for t in s] + [EOS]
                grams = [" ".join(padded[i : i + n]) for i in range(len(padded) - n + 1)]
                expected.update(g for g in grams if g != BOS)
            got = dict(zip(counts[n]["ngram"].to_list(), counts[n]["count"].to_list(), strict=True))
            assert got == dict(expected), (part, n)


def test_a_union_computed_ahead_serves_every_adapted_public_model_and_nothing_else(public, private):
    """Stage lm_counts computes P ∪ Q once, before it knows the β it will mix: the mixture of any
    adaptation of P (P's rows, P's structure object) through it equals the one computed alone; a
    union of other models is not used (NgramUnion.serves)."""
    ahead = NgramUnion.of(public, private)
    words = [w for w in public.tables[1]["ngram"].to_list() if w != BOS]
    target = pl.DataFrame(
        {"ngram": words, "prob": [(1.0 + i) / sum(range(1, len(words) + 1)) for i in range(len(words))]}
    )
    for adapted in (public, adapt_to_unigrams(public, target, 0.5)):
        assert ahead.serves(adapted, private)
        a, b = mix_models(adapted, private, 0.3, union=ahead), mix_models(adapted, private, 0.3)
        assert all(a.tables[n].equals(b.tables[n]) for n in range(1, ORDER + 1))
    other = kneser_ney(trigram_counts([["b", "a", "c"], ["c", "c", "a", "b"], ["d", "e"]]), ORDER, VOCAB)
    assert not ahead.serves(public, other) and not ahead.serves(ArpaModel(dict(public.tables)), private)
    a, b = mix_models(public, other, 0.3, union=ahead), mix_models(public, other, 0.3)
    assert all(a.tables[n].equals(b.tables[n]) for n in range(1, ORDER + 1))
    assert any(a.tables[n].height != mix_models(public, private, 0.3).tables[n].height for n in (2, 3))


def test_mixture_through_the_public_structure_equals_the_one_from_strings(public, private):
    """mix_models merges Q's extra n-grams into P's derived structure (``union_ngrams``); a P whose
    structure is not derived goes through the n-gram strings: the same union, structure and mixture."""
    other = kneser_ney(trigram_counts([["b", "a", "c"], ["c", "c", "a", "b"], ["d", "e"]]), ORDER, VOCAB)
    fresh = ArpaModel(dict(public.tables))
    assert public.derived_structure() is not None and fresh.derived_structure() is None
    for q in (private, other):
        fast, rows = union_ngrams(public, q)
        slow, no_rows = union_ngrams(fresh, q)
        assert rows is not None and no_rows is None
        for n in range(1, ORDER + 1):
            assert fast.tables[n].equals(slow.tables[n])
            assert fast.tables[n]["ngram"].gather(rows[n]).equals(public.tables[n]["ngram"])
        for n in range(2, ORDER + 1):
            a, b = fast.structure()[n], slow.structure()[n]
            assert all((getattr(a, f) == getattr(b, f)).all() for f in ("context", "suffix", "word"))
        a, b = mix_models(public, q, 0.3), mix_models(fresh, q, 0.3)
        assert all(a.tables[n].equals(b.tables[n]) for n in range(1, ORDER + 1))
    # the toy's extra n-grams: Q lists some that P does not, so the merge path is exercised
    assert any(fast.tables[n].height > public.tables[n].height for n in range(2, ORDER + 1))
