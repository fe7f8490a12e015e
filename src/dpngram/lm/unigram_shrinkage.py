"""Where the unresolved unigram mass goes: an empirical-Bayes estimate of each word's count from the
released noisy unigrams (post-processing; docs/lm.md, "The unresolved unigram mass").

The noisy-count model Q (:func:`dpngram.lm.open_model.noisy_count_model`) gives a word whose noisy
count ĉ(w) passes the threshold the mass (ĉ(w) − D)/T. What is left, γ₀, belongs to the words the
threshold cannot resolve. Until 2026-12-01 it was spread in the public model's shape P(w), which
throws away what their noisy counts say. Here each word's count is estimated instead as a posterior
mean under a model of the release:

    ĉ(w) = c(w) + N(0, σ²),    c(w) = e(w) · r(w),    e(w) = T · P(w),   T = Σ_w ĉ(w),

where r(w) is how much more (or less) the private users use w than public text predicts. r has a
prior π on a log grid (:data:`RATIO_GRID` points from :data:`RATIO_LOW` to :data:`RATIO_HIGH`, and
r = 0 for a word nobody uses), shared by all words, fitted (on a weighted sample of at most
:data:`FIT_TOP` + :data:`FIT_REST` of them) by EM started at π₀: log r ~ N(0, :data:`PRIOR_SCALE`²)
plus a small mass at r = 0, :data:`ITERATIONS` steps. EM moves π only where the noisy counts tell
grid points apart; the frequent words, whose counts stand well above σ, teach it how far the private
text departs from P, and the rare words, whose counts cannot, inherit that. (Tried and dropped,
docs/lm-history.md, "The unresolved unigram mass: measured": a prior per band of e(w) — a rare
band's likelihood is flat, its π stays at π₀, whose heavy tail (E[r] = e² under π₀) lifts every
rare word and bends the shape away from P even where the truth is P; EM from a uniform start — the
same; a Dirichlet pull toward π₀ — worse on held-out users.) The posterior mean E[c(w) | ĉ(w)] is
then the weight of w in the unresolved mass.

This is "g-modelling" in Efron's sense (a prior on the true values fitted from many noisy ones) with
a Gaussian likelihood of known σ: the noise is the release's own. No private data enters: inputs
are the released noisy unigrams, σ (released in report part ``lm_counts``) and P.

Measured: benchmarks/results/lm_unigram_shape.json and docs/lm-history.md, "The unresolved unigram
mass: measured".
Where the truth is exactly P and the signal is small, the shape stays within 0.01 nats (KL) of P's
(tests/test_lm_unigram_shrinkage.py).

Owns: the empirical-Bayes posterior counts of the unresolved unigrams, and Q's shape from them.
Imports: numpy, polars, threadpoolctl.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from threadpoolctl import threadpool_limits

#: The ratio grid r = c/e of the prior (log-spaced), plus r = 0.
RATIO_LOW, RATIO_HIGH, RATIO_GRID = 1e-3, 1e6, 60
#: EM steps of the prior's fit.
ITERATIONS = 500
#: The start of the prior's fit π₀: log r ~ N(0, PRIOR_SCALE²), and ZERO_MASS at r = 0.
PRIOR_SCALE, ZERO_MASS = 2.0, 0.05


def ratio_grid() -> np.ndarray:
    """The grid of r = c/e the prior lives on: 0, then :data:`RATIO_GRID` log-spaced points."""
    return np.concatenate([[0.0], np.geomspace(RATIO_LOW, RATIO_HIGH, RATIO_GRID)])


def prior_centre(ratios: np.ndarray) -> np.ndarray:
    """π₀ on ``ratios`` (:func:`ratio_grid`): ZERO_MASS at r = 0, the rest log-normal around r = 1."""
    logs = np.log(ratios[1:])
    body = np.exp(-0.5 * (logs / PRIOR_SCALE) ** 2)
    return np.concatenate([[ZERO_MASS], (1.0 - ZERO_MASS) * body / body.sum()])


def posterior_counts(noisy: np.ndarray, public: np.ndarray, sigma: float) -> np.ndarray | None:
    """E[c(w) | ĉ(w)] for every word (module docstring), or None when the released counts carry no
    usable total (T ≤ 3σ√|V|: the sum is noise) and the public shape should stay.

    ``noisy``: the words' noisy counts ĉ; ``public``: their public probabilities P(w) (summing to at
    most 1, positive); ``sigma``: the release's noise σ. With σ = 0 (no noise) the counts are exact
    and returned clipped at 0."""
    noisy = np.asarray(noisy, dtype=np.float64)
    public = np.asarray(public, dtype=np.float64)
    if noisy.shape != public.shape:
        raise ValueError(f"noisy and public differ in shape: {noisy.shape} against {public.shape}")
    if sigma < 0 or not np.isfinite(sigma):
        raise ValueError(f"sigma must be finite and >= 0 (got {sigma})")
    if sigma == 0:
        return np.maximum(noisy, 0.0)
    total = float(noisy.sum())
    if noisy.size == 0 or total <= 3.0 * sigma * np.sqrt(noisy.size):
        return None
    expected = total * public
    ratios = ratio_grid()
    prior = fit_prior(*_fit_sample(noisy, expected), ratios, sigma)
    out = np.empty_like(noisy)
    for start in range(0, noisy.size, CHUNK):  # a (words × grid) matrix of CHUNK rows at a time
        part = slice(start, start + CHUNK)
        like, means = _likelihood(noisy[part], expected[part], ratios, sigma)
        posterior = like * prior
        out[part] = (posterior * means).sum(axis=1) / posterior.sum(axis=1)
    return np.maximum(out, 0.0)


#: Words per block of the posterior pass (its matrices stay a few MB on any vocabulary).
CHUNK = 8_192


def fit_prior(
    noisy: np.ndarray, expected: np.ndarray, weight: np.ndarray, ratios: np.ndarray, sigma: float
) -> np.ndarray:
    """π on ``ratios``: :data:`ITERATIONS` EM steps from :func:`prior_centre`, each word counted
    ``weight`` times (float32).

    The steps' two matrix products run on one BLAS thread. They are small (at most 8,000 × 61), so
    a second thread gains nothing, and OpenBLAS's threads spin while they wait: with the two cores
    busy (another dataset's run, an Airflow worker's other task) a fit then took 4.6-5.0 s instead of
    0.1-0.2 s (2026-12-07, beside `make bench`; docs/lm.md, "What the two LM stages cost now")."""
    like, _ = _likelihood(noisy, expected, ratios, sigma)
    prior = prior_centre(ratios).astype(np.float32)
    share = (weight / weight.sum()).astype(np.float32)
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(ITERATIONS):
            prior = prior * (like.T @ (share / (like @ prior)))
    # EM can empty a grid point no fitted word supports; a word outside the fit whose likelihood
    # lies only there would get 0/0: a floor far below any supported point keeps it finite
    return np.maximum(prior, np.float32(1e-9) * prior.max())


#: The EM fits π on at most this many words: the FIT_TOP of largest e(w), where the counts can
#: tell ratios apart, each once, and an even sample of the rest by e(w), each standing for the words
#: it was drawn from. Larger vocabularies cost one more pass, not more EM steps (0.6 s → 0.1 s on
#: SOTU's 48,300 words, the same perplexity within 0.1%; docs/lm.md).
FIT_TOP, FIT_REST = 2_000, 6_000


def _fit_sample(noisy: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(noisy, expected, weight) of the words the prior is fitted on (:data:`FIT_TOP`,
    :data:`FIT_REST`); every word with weight 1 when there are few."""
    if noisy.size <= FIT_TOP + FIT_REST:
        return noisy, expected, np.ones(noisy.size)
    order = np.argsort(-expected, kind="stable")
    top, rest = order[:FIT_TOP], order[FIT_TOP:]
    picks = np.linspace(0, rest.size - 1, FIT_REST).round().astype(np.int64)
    chosen = np.concatenate([top, rest[picks]])
    weight = np.concatenate([np.ones(FIT_TOP), np.full(FIT_REST, rest.size / FIT_REST)])
    return noisy[chosen], expected[chosen], weight


def _likelihood(
    noisy: np.ndarray, expected: np.ndarray, ratios: np.ndarray, sigma: float
) -> tuple[np.ndarray, np.ndarray]:
    """(each grid point's likelihood per word, scaled per word, float32; the grid's means e·r). The
    scale cancels in EM and in the posterior mean; float32 halves the time of EM's two products a
    step, and the mean needs no more precision."""
    means = expected[:, None] * ratios[None, :]
    log_like = -0.5 * ((noisy[:, None] - means) / sigma) ** 2
    return np.exp(log_like - log_like.max(axis=1, keepdims=True)).astype(np.float32), means


def unresolved_shape(
    words: pl.DataFrame, base1: pl.DataFrame, threshold: float, sigma: float
) -> pl.DataFrame:
    """(ngram, shape): Q's spread of the unresolved unigram mass. ``words``: the order-1 noisy
    counts (ngram, noisy_count); ``base1``: P's unigrams (ngram, base). The words of P's vocabulary
    below the threshold, weighted by their empirical-Bayes posterior counts
    (:func:`posterior_counts`) and summing to 1; P's unigram distribution when that gives no
    usable weights. A word of P without a noisy count counts as ĉ = 0."""
    both = base1.join(words.select("ngram", "noisy_count"), on="ngram", how="left").with_columns(
        pl.col("noisy_count").fill_null(0.0)
    )
    noisy = both["noisy_count"].to_numpy()
    public = both["base"].to_numpy()
    counts = posterior_counts(noisy, public, sigma)
    if counts is not None:
        counts = np.where(noisy >= threshold, 0.0, counts)
    if counts is None or not np.isfinite(counts).all() or counts.sum() <= 0:
        return base1.select("ngram", shape=pl.col("base"))
    return pl.DataFrame({"ngram": both["ngram"], "shape": counts / counts.sum()})
