"""Seconds of the empirical-Bayes fit of Q's unresolved unigram mass (``lm/unigram_shrinkage.py``:
``posterior_counts``) with the BLAS thread count numpy gives it by default against one BLAS thread
(what ``fit_prior`` uses since 2026-12-07), alternating, on a busy machine.

    .venv/bin/python benchmarks/studies/lm_blas_threads_study.py [--calls 12] [--words 48000]

The question: stage ``lm_counts`` took 4.8 s on one warm run and 7.8 s on the next (SOTU's 2k-user
sample, beside `make bench`); 4.6 s of that was this fit, against 0.5 s before. The fit's EM does
500 small matrix products (at most 8,000 words × 61 grid points); OpenBLAS's worker threads spin
while they wait, and with the two cores taken by other work a product waits for a core. The input
is synthetic (a Dirichlet public distribution over ``--words`` words, Poisson counts of 200,000
tokens, Gaussian noise σ = 30: the size of Brown's vocabulary), so no corpus is needed. The old fit
is the same code without the thread limit. Both run in this process, alternating, so they share the
machine's load, which the JSON records (it is the point: on an idle machine both take about 0.1 s).
Writes ``benchmarks/results/lm_blas_threads.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import git_commit, load_average, machine, now, write_result  # noqa: E402

from dpngram.lm import unigram_shrinkage  # noqa: E402

SIGMA = 30.0
TOKENS = 200_000


def default_threads_fit(noisy, expected, weight, ratios, sigma):
    """``fit_prior`` as it was until 2026-12-07: the same EM with numpy's default BLAS threads."""
    like, _ = unigram_shrinkage._likelihood(noisy, expected, ratios, sigma)
    prior = unigram_shrinkage.prior_centre(ratios).astype(np.float32)
    share = (weight / weight.sum()).astype(np.float32)
    for _ in range(unigram_shrinkage.ITERATIONS):
        prior = prior * (like.T @ (share / (like @ prior)))
    return np.maximum(prior, np.float32(1e-9) * prior.max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=12, help="calls of each fit, alternating")
    parser.add_argument("--words", type=int, default=48_000, help="vocabulary size of the input")
    args = parser.parse_args()

    rng = np.random.default_rng(20261207)
    public = rng.dirichlet(np.full(args.words, 0.1))
    noisy = rng.poisson(public * TOKENS).astype(np.float64) + rng.normal(0.0, SIGMA, args.words)
    fits = {
        "default BLAS threads (before)": default_threads_fit,
        "one BLAS thread (now)": unigram_shrinkage.fit_prior,
    }
    seconds: dict[str, list[float]] = {name: [] for name in fits}
    results: dict[str, np.ndarray] = {}
    load_before = load_average()
    product_fit = unigram_shrinkage.fit_prior
    try:
        for _ in range(args.calls):
            for name, fit in fits.items():
                unigram_shrinkage.fit_prior = fit
                started = time.perf_counter()
                results[name] = unigram_shrinkage.posterior_counts(noisy, public, SIGMA)
                seconds[name].append(round(time.perf_counter() - started, 3))
    finally:
        unigram_shrinkage.fit_prior = product_fit
    before, after = results.values()
    rows = {
        name: {"median": statistics.median(s), "max": max(s), "min": min(s), "calls": s}
        for name, s in seconds.items()
    }
    for name, row in rows.items():
        print(f"{name:<32} median {row['median']:.3f} s  max {row['max']:.3f} s")
    write_result(
        "lm_blas_threads.json",
        {
            "benchmark": "lm_blas_threads_study",
            "date": now(),
            "git_commit": git_commit(),
            "machine": machine(),
            "parameters": {"words": args.words, "tokens": TOKENS, "sigma": SIGMA, "calls": args.calls},
            "load_average_before": load_before,
            "load_average_after": load_average(),
            "seconds": rows,
            "largest_relative_difference_of_the_posterior_counts": float(
                np.max(np.abs(before - after) / np.maximum(np.abs(before), 1e-12))
            ),
        },
    )


if __name__ == "__main__":
    main()
