"""Study (issue 25, BENCHMARK ONLY): where does the released model's gain over the adapted public
model P′ come from, and would the noisy-count model Q serve better in another form?

    python benchmarks/studies/lm_forms_study.py [--epsilons 4,1] [--work DIR]
                                                [--out benchmarks/results/lm_forms.json]

Per ε: ONE default release (``lm_bench.dp_run``, the product's ``stage_budget``, T = 5, δ = 1e-7) on
the LM benchmark's SOTU training users (sha256(user_id) % 10 != 0), scored on its held-out users'
open-vocabulary events (tokens and ``</s>``; an OOV token also pays the spelling model, the same for
every form). By post-processing of the released files only, per event:

* P′_β — P adapted to Q's unigrams at β ∈ {0, 0.25, 0.5} (β = 0: P), and Q, scored by KenLM;
* Q's count terms as ``dpngram.lm.open_model.noisy_count_model`` lists them: T_n(w|h) =
  (ĉ(hw) − D)₊/S(h) for an n-gram Q lists (0 otherwise), γ_n(h) the leftover mass of context h at
  order n (1 where Q lists none), T₁ and γ₀ at order 1; Q₁, P₁ the unigram distributions of Q, P.

Forms, each with **weights chosen on the evaluation text itself** (an ORACLE on a grid of step
0.05: the best a private selection could reach):

* ``M``: λ·Q + (1 − λ)·P′ (the product's form);
* ``counts over P′``: κ·(T₃ + γ₃·T₂ + γ₃γ₂·P′) + (1 − κ)·P′ (Q's counts where it lists a context,
  backing off to P′ at the full context instead of to Q's lower orders);
* ``counts over P′ with Q's unigrams``: κ·(T₃ + γ₃(T₂ + γ₂(T₁ + γ₀·P′))) + (1 − κ)·P′;
* ``Q's unigrams``: μ·Q₁ + (1 − μ)·P′;
* ``M + Q₁`` and ``M + P₁``: a second weight on a unigram distribution;
* ``exact unigrams``: μ·E₁ + (1 − μ)·P′, E₁ the training users' EXACT unigram distribution over
  V_LM (tokens and ``</s>``, no clipping, no noise: NON-private, benchmark-only ground truth): what
  a perfect estimate of the unigram level, the part of Q that carries M's gain, could give; and
  ``exact unigrams, words of ≥ k users``: E₁ for the words at least k training users use, the
  rest of the mass spread over the other words in P's proportions (which words a DP estimate
  could hope to resolve).

And what might resolve those words better:

* ``unigram estimator``: Q's unigram level estimated otherwise from the same released noisy
  unigrams — the mass (ĉ − d·σ)₊ of the words with ĉ ≥ t·σ, scaled by max(T, that mass) (T the sum
  of the noisy unigrams), the rest in P's shape, as ``noisy_count_model`` does for t = 3, d = 1; or
  no threshold with additive smoothing toward P — in Q (its n-gram terms over it) and as P′'s
  adaptation target (β ∈ {0.25, 0.5}), oracle λ;
* ``weighting (simulated)``: the unigram level alone from the counting users' own vectors (a
  seeded 85% of the training users, as the stage counts 85%) weighted otherwise — every order
  scaled to unit l2 norm together (the stage's), the unigrams alone, each word once per user, or
  square-root counts — plus Gaussian noise of the release's σ (two seeded draws), estimated with
  t = 3, d = 1 and mixed with P′ (oracle weight): a NON-private simulation of other mechanisms;
* ``clip``: further default releases with ``lm_count_clip`` C ∈ {4, 16, 64} (σ grows with C; the
  users below C are no longer scaled up), their released models scored as released.

Only aggregate perplexities, the oracle weights and released-row counts are written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

# benchmarks/ for the shared helpers (_common, lm_bench, lm/), then benchmarks/studies/ for the
# studies that reuse each other; neither folder is a package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import lm_bench  # noqa: E402  (benchmarks/ is not a package)
from lm_bench import DATA, RESULTS, Corpus, log  # noqa: E402
from lm_sources_study import event_logprobs  # noqa: E402

DELTA = 1e-7  # the product default
MAX_N = 5  # the product default T (the model's order stays lm_order = 3)
BETAS = (0.0, 0.25, 0.5)  # the product's adaptation grid
GRID = np.round(np.arange(0.0, 1.0 + 1e-9, 0.05), 2)
SIMULATION_SEED = 20261128
BOS, EOS, UNK = "<s>", "</s>", "<unk>"


def perplexity(prob: np.ndarray, spell: np.ndarray) -> float:
    return float(10 ** (-(np.log10(np.maximum(prob, 1e-300)) + spell).mean()))


def best(weights_to_prob: Any, spell: np.ndarray, two: bool = False) -> dict[str, Any]:
    """The oracle: the grid point(s) of the lowest perplexity (one weight, or two summing to ≤ 1)."""
    points = [(k, j) for k in GRID for j in GRID if k + j <= 1 + 1e-9] if two else [(k,) for k in GRID]
    value, point = min((perplexity(weights_to_prob(*p), spell), p) for p in points)
    return {"perplexity": value, "weights": [float(x) for x in point]}


def count_terms(
    rows: Any, vocabulary: set[str], threshold: float, discount: float
) -> tuple[dict[str, float], float, dict[str, float], dict[str, Any], dict[str, Any]]:
    """(T₁ by word, γ₀, order-2 and order-3 (listed counts, S, γ) by n-gram / context) from the
    released counts, as ``noisy_count_model`` lists them (closure: an n-gram's context and suffix
    listed one order below)."""
    import polars as pl

    c1 = dict(rows.filter(pl.col("n") == 1).select("ngram", "noisy_count").iter_rows())
    words = {w: c for w, c in c1.items() if w != BOS}
    listed1 = {w: max(c - discount, 0.0) for w, c in words.items() if c >= threshold}
    scale = max(sum(words.values()), sum(listed1.values()))
    t1 = {w: v / scale for w, v in listed1.items()} if scale > 0 else {}
    gamma0 = max(0.0, 1.0 - sum(t1.values()))

    def order(n: int, lower: dict[str, float]) -> dict[str, Any]:
        cand = rows.filter((pl.col("n") == n) & (pl.col("noisy_count") >= threshold))
        listed = {
            g: c
            for g, c in cand.select("ngram", "noisy_count").iter_rows()
            if g.rsplit(" ", 1)[0] in lower and g.split(" ", 1)[1] in lower
        }
        total: dict[str, float] = {}
        kept: dict[str, float] = {}
        for g, c in listed.items():
            h = g.rsplit(" ", 1)[0]
            total[h] = total.get(h, 0.0) + c
            kept[h] = kept.get(h, 0.0) + max(c - discount, 0.0)
        s = {h: max(lower.get(h, 0.0), t) for h, t in total.items()}
        gamma = {h: min(1.0, max(0.0, 1.0 - kept[h] / s[h])) if s[h] > 0 else 1.0 for h in s}
        return {"listed": listed, "S": s, "gamma": gamma}

    # order 1 lists every word of Q's vocabulary (P's unigrams), so closure at order 2 is on c1
    o2 = order(2, {w: c for w, c in c1.items() if w in vocabulary or w in (BOS, EOS, UNK)})
    o3 = order(3, o2["listed"])
    return t1, gamma0, o2, o3, {"released_rows": {n: int((rows["n"] == n).sum()) for n in (1, 2, 3)}}


def event_terms(
    sentences: list[list[str]],
    vocabulary: set[str],
    t1: dict[str, float],
    o2: dict[str, Any],
    o3: dict[str, Any],
    discount: float,
) -> dict[str, np.ndarray]:
    """T₁, T₂, T₃, γ₂, γ₃ of every event (the words mapped to V_LM; ``<s> <s>`` before a sentence)."""

    def term(o: dict[str, Any], h: str, w: str) -> float:
        g = f"{h} {w}"
        return max(o["listed"][g] - discount, 0.0) / o["S"][h] if g in o["listed"] and o["S"][h] > 0 else 0.0

    out: dict[str, list[float]] = {k: [] for k in ("T1", "T2", "T3", "G2", "G3")}
    for sentence in sentences:
        context = [BOS, BOS]
        for w in [t if t in vocabulary else UNK for t in sentence] + [EOS]:
            a, b = context[-2], context[-1]
            out["T1"].append(t1.get(w, 0.0))
            out["T2"].append(term(o2, b, w))
            out["G2"].append(o2["gamma"].get(b, 1.0))
            first = a == BOS and b == BOS  # the first event's context is <s> alone
            out["T3"].append(0.0 if first else term(o3, f"{a} {b}", w))
            out["G3"].append(1.0 if first else o3["gamma"].get(f"{a} {b}", 1.0))
            context.append(w)
    return {k: np.asarray(v) for k, v in out.items()}


#: The user counts of the ``exact unigrams, words of ≥ k users`` rows.
USER_CUTS = (20, 100, 500)


def exact_unigrams(train: Path, vocabulary: set[str]) -> tuple[dict[str, float], dict[str, int]]:
    """The training users' exact unigram distribution over V_LM (every token and one ``</s>`` per
    sentence; a token outside V_LM is ``<unk>``) and the number of users of each word:
    NON-private, benchmark-only."""
    import gzip
    from collections import Counter

    from dpngram.text.tokenizer import tokenize_texts

    tokens: Counter[str] = Counter()
    users: Counter[str] = Counter()
    with gzip.open(train, "rt", encoding="utf-8") as fh:
        documents = [json.loads(line)["text"] for line in fh]
    for document in tokenize_texts(documents):
        seen: set[str] = set()
        for sentence in document:
            mapped = [w if w in vocabulary else UNK for w in sentence] + [EOS]
            tokens.update(mapped)
            seen.update(mapped)
        users.update(seen)
    total = sum(tokens.values())
    return {w: c / total for w, c in tokens.items()}, dict(users)


def exact_for_users(
    exact: dict[str, float], users: dict[str, int], public: dict[str, float], cut: int
) -> dict[str, float]:
    """``exact`` for the words at least ``cut`` users use; the rest of the mass over the other
    words of ``public`` (P's unigrams) in P's proportions."""
    kept = {w: p for w, p in exact.items() if users.get(w, 0) >= cut}
    others = {w: p for w, p in public.items() if w not in kept and w != BOS}
    scale = (1.0 - sum(kept.values())) / sum(others.values())
    return {**{w: p * scale for w, p in others.items()}, **kept}


#: Other unigram estimators from the released noisy unigrams: (threshold t, discount d) in σ, and
#: (discount a, smoothing b) of the additive form without a threshold.
THRESHOLDED = ((3.0, 1.0), (2.0, 1.0), (2.0, 0.5), (1.0, 0.5), (0.5, 0.25))
SMOOTHED = ((1.0, 0.2), (0.0, 0.05))
#: The weightings of the simulated unigram release, and its noise draws.
WEIGHTINGS = (
    "all orders, unit norm (the stage's)",
    "unigrams, unit norm",
    "each word once",
    "square-root counts",
)
DRAWS = 2
#: The further clips of the ``clip`` rows (the main release has the default, 1).
CLIPS = (4.0, 16.0, 64.0)


def thresholded(noisy: np.ndarray, public: np.ndarray, sigma: float, t: float, d: float) -> np.ndarray:
    """A unigram distribution from noisy counts: the mass (ĉ − d·σ)₊ of the words with ĉ ≥ t·σ,
    scaled by max(Σ ĉ, that mass), the rest in ``public``'s shape (as ``noisy_count_model``)."""
    mass = np.where(noisy >= t * sigma, np.maximum(noisy - d * sigma, 0.0), 0.0)
    mass = mass / max(float(noisy.sum()), float(mass.sum()), 1e-300)
    return mass + max(0.0, 1.0 - float(mass.sum())) * public


def smoothed(noisy: np.ndarray, public: np.ndarray, sigma: float, a: float, b: float) -> np.ndarray:
    """(ĉ − a·σ)₊ + b·(Σ ĉ)·P(w), normalised: every word, no threshold."""
    mass = np.maximum(noisy - a * sigma, 0.0) + b * float(noisy.sum()) * public
    return mass / mass.sum()


def user_vectors(train: Path, vocabulary: set[str]) -> list[tuple[Any, float]]:
    """Each training user's unigram counts over V_LM (tokens and ``</s>``) and the l2 norm of their
    order-1..3 counts together (``<s>``-padded as the stage counts; every n-gram of the user, where
    the stage's norm is over its domain only: a slight over-estimate): NON-private."""
    import gzip
    from collections import Counter

    from dpngram.text.tokenizer import tokenize_texts

    with gzip.open(train, "rt", encoding="utf-8") as fh:
        documents = [json.loads(line)["text"] for line in fh]
    out = []
    for document in tokenize_texts(documents):
        grams: Counter[tuple[str, ...]] = Counter()
        for sentence in document:
            m = [BOS, BOS, *(w if w in vocabulary else UNK for w in sentence), EOS]
            for i in range(2, len(m)):
                grams[(m[i],)] += 1
                grams[(m[i - 1], m[i])] += 1
                grams[(m[i - 2], m[i - 1], m[i])] += 1
        unigrams = Counter({g[0]: c for g, c in grams.items() if len(g) == 1})
        out.append((unigrams, float(np.sqrt(sum(c * c for c in grams.values())))))
    return out


def weighted_unigrams(users: list[tuple[Any, float]], index: dict[str, int], weighting: str) -> np.ndarray:
    """The summed unigram vectors of ``users`` under ``weighting`` (:data:`WEIGHTINGS`), each
    user's vector of l2 norm at most 1 (so the same σ applies)."""
    total = np.zeros(len(index))
    for unigrams, norm in users:
        if weighting == WEIGHTINGS[0]:
            scale, values = 1.0 / norm, dict(unigrams)
        elif weighting == WEIGHTINGS[1]:
            scale, values = 1.0 / float(np.sqrt(sum(c * c for c in unigrams.values()))), dict(unigrams)
        elif weighting == WEIGHTINGS[2]:
            scale, values = 1.0 / float(np.sqrt(len(unigrams))), dict.fromkeys(unigrams, 1.0)
        else:
            scale = 1.0 / float(np.sqrt(sum(unigrams.values())))
            values = {w: float(np.sqrt(c)) for w, c in unigrams.items()}
        for w, v in values.items():
            total[index[w]] += v * scale
    return total


def study(
    eps: float, corpus: Corpus, prep: dict[str, Any], work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    import polars as pl

    from dpngram.config import DEFAULT_STAGE_BUDGET
    from dpngram.lm.arpa_file import write_arpa
    from dpngram.lm.build import ReleasedInputs, adapted_public, mixture_components
    from dpngram.release.layout import LM_COUNTS

    budget = dict(DEFAULT_STAGE_BUDGET)
    run_dir = work / f"run-eps{eps:g}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    run = lm_bench.dp_run(corpus, eps, prep["train"], run_dir, args, stage_budget=budget, max_n=MAX_N)
    root, part = run["root"], run["lm_counts"]
    config = lm_bench.bench_config(
        corpus, eps, prep["train"], run_dir, args, stage_budget=budget, max_n=MAX_N
    )
    vocabulary, public, private = mixture_components(ReleasedInputs(root), config, part)
    sentences = lm_bench.eval_sentences(prep["eval"])
    probs: dict[str, np.ndarray] = {}
    spell = np.zeros(0)
    for name, model in [*((f"P{b:g}", adapted_public(public, private, b)) for b in BETAS), ("Q", private)]:
        path = run_dir / "component.arpa"
        write_arpa(model, path)
        logs, spell = event_logprobs(path, sentences)
        probs[name] = np.power(10.0, logs)
        path.unlink()
    words = set(vocabulary)
    discount = float(config.lm.count_discount) * float(part["sigma"])
    t1, gamma0, o2, o3, info = count_terms(
        pl.read_parquet(root / LM_COUNTS), words, float(part["threshold"]), discount
    )
    ev = event_terms(sentences, words, t1, o2, o3, discount)
    uni_q = dict(private.tables[1].select("ngram", "logprob").iter_rows())
    uni_p = dict(public.tables[1].select("ngram", "logprob").iter_rows())
    mapped = [w if w in words else UNK for s in sentences for w in [*s, EOS]]
    q1 = np.power(10.0, np.array([uni_q[w] for w in mapped]))
    p1 = np.power(10.0, np.array([uni_p[w] for w in mapped]))
    exact, users = exact_unigrams(prep["train"], words)
    public_unigrams = {w: 10.0**lp for w, lp in uni_p.items()}
    e1 = np.array([exact.get(w, 0.0) for w in mapped])
    cut = {k: exact_for_users(exact, users, public_unigrams, k) for k in USER_CUTS}
    e1_cut = {k: np.array([u.get(w, 0.0) for w in mapped]) for k, u in cut.items()}
    assert q1.size == e1.size == spell.size == ev["T1"].size
    rows: dict[str, Any] = {"P (public-only)": {"perplexity": perplexity(probs["P0"], spell)}}
    q = probs["Q"]
    for b in BETAS:
        pb = probs[f"P{b:g}"]
        over = ev["T3"] + ev["G3"] * (ev["T2"] + ev["G2"] * pb)
        over_uni = ev["T3"] + ev["G3"] * (ev["T2"] + ev["G2"] * (ev["T1"] + gamma0 * pb))
        forms = {
            "P' alone": {"perplexity": perplexity(pb, spell)},
            "M": best(lambda k, pb=pb: k * q + (1 - k) * pb, spell),
            "counts over P'": best(lambda k, pb=pb, o=over: k * o + (1 - k) * pb, spell),
            "counts over P' with Q's unigrams": best(
                lambda k, pb=pb, o=over_uni: k * o + (1 - k) * pb, spell
            ),
            "Q's unigrams": best(lambda k, pb=pb: k * q1 + (1 - k) * pb, spell),
            "M + Q1": best(lambda k, j, pb=pb: k * q + j * q1 + (1 - k - j) * pb, spell, two=True),
            "M + P1": best(lambda k, j, pb=pb: k * q + j * p1 + (1 - k - j) * pb, spell, two=True),
            "exact unigrams (NON-private)": best(lambda k, pb=pb: k * e1 + (1 - k) * pb, spell),
            **{
                f"exact unigrams, words of >= {c} users (NON-private)": best(
                    lambda k, pb=pb, e=e: k * e + (1 - k) * pb, spell
                )
                for c, e in e1_cut.items()
            },
        }
        for name, row in forms.items():
            rows[f"{name}, beta {b:g}"] = row
            log(f"  ε={eps:g} β={b:g} {name}: {row['perplexity']:.1f} {row.get('weights', '')}")
    released_model = lm_bench.evaluate(root / "model" / "model.binary", prep["eval"])
    rows["clip 1 (the default): released model"] = {"perplexity": released_model["open_vocab_perplexity"]}
    rows.update(other_unigrams(public, part, ev, mapped, sentences, spell, run_dir, root))
    rows.update(simulated_weightings(prep["train"], words, public, mapped, probs["P0.25"], spell, part))
    rows.update(clipped_releases(corpus, eps, prep, work, args, budget))
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return {
        "epsilon": eps,
        "words_by_users": {str(c): sum(1 for n in users.values() if n >= c) for c in USER_CUTS},
        "released": {
            "beta": part.get("unigram_adaptation"),
            "lambda": part.get("mix_weight"),
            "sigma": part.get("sigma"),
            **info,
        },
        "events": int(spell.size),
        "rows": rows,
    }


def other_unigrams(
    public: Any,
    part: dict[str, Any],
    ev: dict[str, np.ndarray],
    mapped: list[str],
    sentences: list[list[str]],
    spell: np.ndarray,
    run_dir: Path,
    root: Path,
) -> dict[str, Any]:
    """The ``unigram estimator`` rows: Q over each estimate, P′ adapted to it, oracle λ, best β."""
    import polars as pl

    from dpngram.lm.arpa_file import write_arpa
    from dpngram.lm.mixture import adapt_to_unigrams

    table = public.tables[1].filter(pl.col("ngram") != BOS)
    words = table["ngram"].to_list()
    p1 = np.power(10.0, table["logprob"].to_numpy())
    from dpngram.release.layout import LM_COUNTS

    released = dict(
        pl.read_parquet(root / LM_COUNTS).filter(pl.col("n") == 1).select("ngram", "noisy_count").iter_rows()
    )
    noisy = np.array([released.get(w, 0.0) for w in words])
    sigma = float(part["sigma"])
    index = {w: i for i, w in enumerate(words)}
    events = np.array([index[w] for w in mapped])
    estimates = {
        f"threshold {t:g} sigma, discount {d:g} sigma": thresholded(noisy, p1, sigma, t, d)
        for t, d in THRESHOLDED
    }
    estimates.update(
        {
            f"no threshold, discount {a:g} sigma, smoothing {b:g}": smoothed(noisy, p1, sigma, a, b)
            for a, b in SMOOTHED
        }
    )
    rows: dict[str, Any] = {}
    for name, u in estimates.items():
        q = ev["T3"] + ev["G3"] * (ev["T2"] + ev["G2"] * u[events])
        target = pl.DataFrame({"ngram": words, "prob": u})
        found: dict[str, Any] = {"perplexity": float("inf")}
        for beta in (0.25, 0.5):
            path = run_dir / "estimate.arpa"
            write_arpa(adapt_to_unigrams(public, target, beta), path)
            logs, _ = event_logprobs(path, sentences)
            path.unlink()
            pb = np.power(10.0, logs)
            r = best(lambda k, pb=pb, q=q: k * q + (1 - k) * pb, spell)
            if r["perplexity"] < found["perplexity"]:
                found = {**r, "beta": beta}
        rows[f"unigram estimator: {name}"] = found
        log(f"  {name}: {found['perplexity']:.1f} β={found['beta']:g} {found['weights']}")
    return rows


def simulated_weightings(
    train: Path,
    words: set[str],
    public: Any,
    mapped: list[str],
    adapted: np.ndarray,
    spell: np.ndarray,
    part: dict[str, Any],
) -> dict[str, Any]:
    """The ``weighting (simulated)`` rows (NON-private simulation; mean over :data:`DRAWS`)."""
    import polars as pl

    table = public.tables[1].filter(pl.col("ngram") != BOS)
    index = {w: i for i, w in enumerate(table["ngram"].to_list())}
    p1 = np.power(10.0, table["logprob"].to_numpy())
    events = np.array([index[w] for w in mapped])
    users = user_vectors(train, words)
    counting = np.random.default_rng(SIMULATION_SEED).random(len(users)) < 0.85
    users = [u for u, keep in zip(users, counting, strict=True) if keep]
    sigma = float(part["sigma"])
    rows: dict[str, Any] = {}
    for weighting in WEIGHTINGS:
        summed = weighted_unigrams(users, index, weighting)
        values = []
        for draw in range(DRAWS):
            noise = np.random.default_rng(SIMULATION_SEED + 1 + draw).normal(0.0, sigma, summed.size)
            u = thresholded(summed + noise, p1, sigma, 3.0, 1.0)[events]
            values.append(best(lambda k, u=u: k * u + (1 - k) * adapted, spell)["perplexity"])
        rows[f"weighting (simulated, NON-private): {weighting}"] = {
            "perplexity": float(np.mean(values)),
            "draws": values,
        }
        log(f"  simulated {weighting}: {values}")
    return rows


def clipped_releases(
    corpus: Corpus,
    eps: float,
    prep: dict[str, Any],
    work: Path,
    args: argparse.Namespace,
    budget: dict[str, float],
) -> dict[str, Any]:
    """The ``clip`` rows: default releases with ``lm_count_clip`` C, scored as released."""
    rows: dict[str, Any] = {}
    for clip in CLIPS:
        run_dir = work / f"run-eps{eps:g}-clip{clip:g}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        run = lm_bench.dp_run(
            corpus,
            eps,
            prep["train"],
            run_dir,
            args,
            stage_budget=budget,
            max_n=MAX_N,
            options={"lm_count_clip": clip},
        )
        metrics = lm_bench.evaluate(run["root"] / "model" / "model.binary", prep["eval"])
        part = run["lm_counts"]
        rows[f"clip {clip:g}: released model"] = {
            "perplexity": metrics["open_vocab_perplexity"],
            "sigma": part["sigma"],
            "beta": part.get("unigram_adaptation"),
            "lambda": part["mix_weight"],
            "released_rows": part.get("released_by_order"),
        }
        log(f"  clip {clip:g}: {metrics['open_vocab_perplexity']:.1f}")
        shutil.rmtree(run_dir, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--epsilons", default="4,1")
    ap.add_argument("--work", default=str(lm_bench.CACHE / "lm_forms"))
    ap.add_argument("--out", default=str(RESULTS / "lm_forms.json"))
    ap.add_argument("--memory-limit", default="4GB")
    ap.add_argument("--keep", action="store_true", help="keep the releases")
    args = ap.parse_args()
    args.delta = DELTA
    corpus = Corpus("sotu", DATA / "sotu_users.jsonl.gz", DATA / "brown_public.txt.gz", 1, {"users": 12_807})
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    prep = lm_bench.split_users(corpus, work)
    out: dict[str, Any] = {
        "study": "lm_forms: where the model's gain comes from; other forms of Q (ORACLE weights)",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": lm_bench.git_commit(),
        "machine": lm_bench.machine(),
        "parameters": {"delta": DELTA, "max_n": MAX_N, "order": 3, "betas": BETAS, "grid_step": 0.05},
        "corpus": {
            "name": "sotu",
            "public": "brown",
            **{k: v for k, v in prep.items() if isinstance(v, int)},
        },
        "runs": [],
    }
    for eps in [float(e) for e in args.epsilons.split(",")]:
        log(f"sotu ε={eps:g}")
        out["runs"].append(study(eps, corpus, prep, work, args))
        Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("POLARS_MAX_THREADS", "2")
    main()
