"""DP-noisy n-gram counts for the language model, and the mixture weight (step ``lm_counts``).

Keys-only k-gram sets cannot tell a model how often anything occurs. Step ``lm_counts``
(:mod:`dpngram.stages.lm_counts`, built on the functions here) releases noisy
counts that can, over a domain fixed before it looks at the private data (docs/lm.md, "Noisy
n-gram counts"; derivation and privacy argument in docs/lm_privacy.md):

1. the model vocabulary V_LM = released DP vocabulary ∪ the public corpus's words (capped by
   public count, :func:`dpngram.lm.open_model.model_vocabulary`); private tokens outside it are ``<unk>``;
2. domain D: every word of V_LM plus ``<s>``, ``</s>``, ``<unk>`` (order 1), and for orders 2..N the
   ``lm_count_domain`` most frequent public n-grams ∪ the DPNE-released k-grams of that order —
   public data and DP outputs only;
3. users are split by a keyed hash of their id: ``lm_holdout`` of them are *selection* users, the
   rest *counting* users;
4. per counting user u, the count vector x_u over D (all orders together) is scaled by
   min(1, C/‖x_u‖₂) (C = ``lm_count_clip``) and summed: l2-sensitivity C under adding or removing
   one user. Gaussian noise calibrated by :mod:`dpngram.core.accounting` (analytic Gaussian, snapped to
   a power-of-two grid as in docs/noise.md) is added to every coordinate of D;
5. released: every order-1 coordinate, and the order-≥2 coordinates whose noisy value is at least
   ``lm_count_threshold``·σ (dropping the rest is post-processing);
6. with ``lm_mix_weight='auto'``, the weight λ of the mixture λ·Q + (1 − λ)·P (Q: the model of the
   noisy counts, P: the public model; :mod:`dpngram.lm.open_model`) is chosen by report-noisy-max over
   :data:`WEIGHT_GRID`: each selection user's score for λ is the mean natural log-probability of
   their tokens under the mixture, clipped to [−B, 0]; the sums get Laplace noise of scale 2B/ε.
   λ = 0 (the public model) is always a candidate, so a release whose counts carry no signal picks
   it (with high probability), and the model falls back to the public one.

Privacy: steps 4 and 6 touch disjoint sets of users, fixed by a data-independent keyed hash:
adding or removing one user changes only one of them. Step 4 is (ε, δ)-DP (Gaussian), step 6 is
ε-DP for every fixed output of step 4 (report-noisy-max, sensitivity B), so the stage is (ε, δ)-DP
with the stage's whole share (parallel composition); the ledger records the Gaussian event.

Owns: the count domain, the noisy count release, the selection users' scores and the
report-noisy-max weight selection.
Imports: dpngram.mechanisms.bayes, dpngram.lm.open_model, dpngram.lm.evaluate, dpngram.release.layout,
dpngram.engines, dpngram.core; numpy, polars, pyarrow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.release.layout import KGRAMS

STAGE = "lm_counts"


#: Candidate mixture weights λ (0: the public model alone).
WEIGHT_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


#: Candidate strengths β of the public model's adaptation to Q's unigrams (0: no adaptation).
ADAPTATION_GRID = (0.0, 0.25, 0.5)


#: B: a selection user's score (mean natural log-probability per event) is clipped to [−B, 0].
SCORE_CLIP_NATS = 20.0


VOCABULARY_TABLE = "lm_vocabulary"


DOMAIN_TABLE = "lm_domain"


WEIGHTED_TABLE = "lm_weighted"


WORK_TABLES = (VOCABULARY_TABLE, DOMAIN_TABLE, WEIGHTED_TABLE)


COUNTS_SCHEMA = pa.schema([("n", pa.int8()), ("ngram", pa.string()), ("noisy_count", pa.float64())])


@dataclass
class CountDomain:
    """The public domain D: ``frame`` (gid 1..|D|, n, ngram), the model vocabulary and the public
    model P (both post-processing of public data and DP outputs)."""

    frame: pl.DataFrame
    vocabulary: list[str]
    public_model: Any

    @property
    def size(self) -> int:
        return self.frame.height


def released_kgrams(root: Path, n: int) -> list[str]:
    path = root / KGRAMS
    if not path.is_file():
        return []
    return pl.read_parquet(path, columns=["k", "ngram"]).filter(pl.col("k") == n)["ngram"].to_list()


def build_domain(
    dp_vocabulary: list[str],
    public_path: str | None,
    *,
    order: int,
    public_cap: int,
    domain_cap: int,
    kgrams: dict[int, list[str]],
    lowercase: bool = True,
) -> CountDomain:
    """V_LM, the public model P and the counting domain D (module docstring, steps 1-2)."""
    from dpngram.lm.open_model import MARKERS, open_public_model

    vocabulary, counts, model = open_public_model(
        dp_vocabulary, public_path, order=order, public_cap=public_cap, lowercase=lowercase
    )
    parts = [pl.DataFrame({"n": 1, "ngram": sorted({*vocabulary, *MARKERS})})]
    for n in range(2, order + 1):
        top = counts[n].sort(["count", "ngram"], descending=[True, False]).head(domain_cap).select("ngram")
        released = pl.DataFrame({"ngram": kgrams.get(n, [])}, schema={"ngram": pl.String})
        grams = pl.concat([top, released]).unique().sort("ngram")
        parts.append(grams.select(pl.lit(n).alias("n"), "ngram"))
    frame = pl.concat([p.with_columns(pl.col("n").cast(pl.Int64)) for p in parts]).with_row_index(
        "gid", offset=1
    )
    return CountDomain(frame, vocabulary, model)


def noisy_release(
    weighted: np.ndarray, *, epsilon: float, delta: float, clip: float, noise: NoiseSource
) -> tuple[np.ndarray, Any]:
    """The Gaussian mechanism on the summed, bounded count vector (l2-sensitivity ``clip``): the
    vector snapped to a power-of-two grid plus rounded-Gaussian noise on that grid, σ from the
    analytic Gaussian for the snapped sensitivity (docs/noise.md; the same calibration as the
    Bayesian stage). Returns (noisy vector, calibration)."""
    from dpngram.mechanisms.bayes import calibrate, release_logits

    calibration = calibrate(epsilon, delta, clip, max(1, weighted.size))
    return release_logits(weighted, calibration, noise), calibration


def user_scores(public_logprob10: np.ndarray, private_logprob10: np.ndarray, grid=WEIGHT_GRID) -> np.ndarray:
    """One selection user's score per candidate λ: the mean natural log-probability of their events
    under λ·Q + (1 − λ)·P, clipped to [−B, 0] (B = :data:`SCORE_CLIP_NATS`)."""
    p = np.power(10.0, np.asarray(public_logprob10, dtype=np.float64))
    q = np.power(10.0, np.asarray(private_logprob10, dtype=np.float64))
    lam = np.asarray(grid, dtype=np.float64)[:, None]
    mix = np.maximum(lam * q[None, :] + (1.0 - lam) * p[None, :], 1e-300)
    return np.clip(np.log(mix).mean(axis=1), -SCORE_CLIP_NATS, 0.0)


def select_weight(
    scores: np.ndarray, epsilon: float, noise: NoiseSource, grid=WEIGHT_GRID
) -> tuple[float, int]:
    """Report-noisy-max: argmax of the summed scores + Laplace(2B/ε) noise each. Each user adds a
    vector in [−B, 0]^|grid|, so one user changes every score by at most B: ε-DP (Dwork & Roth,
    Claim 3.9, with the general 2B/ε scale). Returns (λ, index)."""
    scale = 2.0 * SCORE_CLIP_NATS / epsilon
    grid_step = 2.0 ** math.floor(math.log2(scale / 1024.0))
    noisy = np.asarray(scores, dtype=np.float64) + noise.laplace_on_grid(scale, len(grid), grid_step)
    best = int(np.argmax(noisy))
    return float(grid[best]), best


def candidate_grid(mix_weight: float | str, adaptation: float | str) -> list[tuple[float, float]]:
    """The (β, λ) candidates of the selection: every grid value of a parameter set to 'auto', the
    configured value otherwise. (0, 0) — the public model — is a candidate whenever both are auto."""
    betas = ADAPTATION_GRID if adaptation == "auto" else (float(adaptation),)
    lams = WEIGHT_GRID if mix_weight == "auto" else (float(mix_weight),)
    return [(b, lam) for b in betas for lam in lams]


def score_selection_users(
    wh: Engine,
    schema: str,
    *,
    salt: int,
    holdout_per_mille: int,
    public_arpas: list[Path],
    private_arpa: Path,
    weights: tuple[float, ...] = WEIGHT_GRID,
) -> tuple[np.ndarray, int]:
    """Summed :func:`user_scores` over the selection users (streamed; PRIVATE sums, in-process only):
    for each public model variant in ``public_arpas`` (one per adaptation strength β), the scores of
    every λ in ``weights``, concatenated in that order. Also returns the number of selection users
    (PRIVATE: never reported)."""
    from dpngram.lm.evaluate import load_model  # quiet: KenLM's loader writes to stderr otherwise

    publics = [load_model(p) for p in public_arpas]
    qm = load_model(private_arpa)
    total = np.zeros(len(publics) * len(weights), dtype=np.float64)
    users = 0
    current: Any = None
    p_bufs: list[list[float]] = [[] for _ in publics]
    q_buf: list[float] = []

    def flush() -> None:
        nonlocal total, users
        if q_buf:
            q = np.array(q_buf)
            total += np.concatenate([user_scores(np.array(pb), q, weights) for pb in p_bufs])
            users += 1
        for pb in p_bufs:
            pb.clear()
        q_buf.clear()

    sql = load_sql("lm_counts/selection_sentences", schema=schema)
    params = {"salt": int(salt), "holdout_per_mille": int(holdout_per_mille)}
    for batch in wh.fetch_batches(sql, params, batch_rows=50_000):
        ids = batch.column(0).to_pylist()
        toks = batch.column(1).to_pylist()
        for uid, sentence in zip(ids, toks, strict=True):
            if uid != current:
                flush()
                current = uid
            if not sentence:
                continue
            text = " ".join(sentence)
            for pm, pb in zip(publics, p_bufs, strict=True):
                pb.extend(s[0] for s in pm.full_scores(text, bos=True, eos=True))
            q_buf.extend(s[0] for s in qm.full_scores(text, bos=True, eos=True))
    flush()
    return total, users
