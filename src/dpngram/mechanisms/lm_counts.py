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
   :data:`WEIGHT_GRID`: each selection user's score for a candidate is the mean natural
   log-probability of their tokens under it, less the user's mean over all candidates, clipped to
   [−C, C] and shifted by −C (:func:`centred_contributions`); the sums get Laplace noise of scale
   2C/ε (the scores are monotone: one user moves every score down, by at most 2C;
   :func:`select_weight`).
   λ = 0 (the public model) is always a candidate, so a release whose counts carry no signal picks
   it (with high probability), and the model falls back to the public one.

Privacy: steps 4 and 6 touch disjoint sets of users, fixed by a data-independent keyed hash:
adding or removing one user changes only one of them. Step 4 is (ε, δ)-DP (Gaussian), step 6 is
ε-DP for every fixed output of step 4 (report-noisy-max, sensitivity 2C), so the stage is (ε, δ)-DP
with the stage's whole share (parallel composition); the ledger records the Gaussian event.

Owns: the count domain, the noisy count release, the selection users' scores and the
report-noisy-max weight selection.
Imports: dpngram.mechanisms.bayes, dpngram.mechanisms.heldout_scoring, dpngram.lm.open_model,
dpngram.lm.backoff_scorer (types), dpngram.release.layout,
dpngram.engines, dpngram.core; numpy, numba, polars, pyarrow.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa
from numba import njit

from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.mechanisms.heldout_scoring import held_out_user_sums
from dpngram.release.layout import KGRAMS

if TYPE_CHECKING:
    from dpngram.lm.backoff_scorer import BackoffScorer

STAGE = "lm_counts"


#: Candidate mixture weights λ (0: the public model alone).
WEIGHT_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


#: Candidate strengths β of the public model's adaptation to Q's unigrams (0: no adaptation).
ADAPTATION_GRID = (0.0, 0.25, 0.5)


#: C: a selection user's mean natural log-probability per event under a candidate, less their mean
#: over all candidates, is clipped to [−C, C] (then shifted by −C: :func:`centred_contributions`).
#: Measured (2026-11-28, SOTU's and the generated corpus's held-out users): it binds for 0.05–0.5% of
#: users; the score's range was [−20, 0] nats before, ten times the noise.
SCORE_DEVIATION_CLIP_NATS = 1.0


#: The range of one selection user's contribution to every score, [−2C, 0]: the selection's
#: sensitivity (monotone: adding a user moves every score down by at most this, none up).
SCORE_RANGE_NATS = 2.0 * SCORE_DEVIATION_CLIP_NATS


VOCABULARY_TABLE = "lm_vocabulary"


DOMAIN_TABLE = "lm_domain"


WEIGHTED_TABLE = "lm_weighted"


WORK_TABLES = (VOCABULARY_TABLE, DOMAIN_TABLE, WEIGHTED_TABLE)


#: Word ids of the counting tables for the sentence markers and <unk>; V_LM's words follow from 4.
MARKER_IDS = {"<s>": 1, "</s>": 2, "<unk>": 3}


#: Bits per word id in an n-gram's counting key: key = a·2^42 + b·2^21 + c for the word ids
#: (a, b, c), left-aligned, 0 where the n-gram has fewer than three words (ids start at 1, so the
#: key also tells the order). 63 bits: a signed BIGINT on both engines.
WORD_ID_BITS = 21


#: The largest model vocabulary the keys hold (ids 4 .. 2^21 − 1).
MAX_COUNTING_VOCABULARY = (1 << WORD_ID_BITS) - 1 - len(MARKER_IDS)


#: The SQL parameters of sql/lm_counts/weighted.sql for the markers and the key layout.
COUNTING_PARAMS = {
    "bos_id": MARKER_IDS["<s>"],
    "eos_id": MARKER_IDS["</s>"],
    "unk_id": MARKER_IDS["<unk>"],
    "word_shift": 1 << WORD_ID_BITS,
}


def counting_ids(vocabulary: list[str]) -> tuple[list[str], dict[str, int]]:
    """The model vocabulary's words (markers left out) and the counting id of every word and marker:
    :data:`MARKER_IDS`, then the words from 4 in the given order. Raises ConfigError past
    :data:`MAX_COUNTING_VOCABULARY` words."""
    words = [w for w in vocabulary if w not in MARKER_IDS]
    if len(words) > MAX_COUNTING_VOCABULARY:
        raise ConfigError(
            f"lm_counts: the model vocabulary has {len(words):,} words, more than the "
            f"{MAX_COUNTING_VOCABULARY:,} its counting keys hold: lower lm_public_vocab_size"
        )
    return words, {**{w: i for i, w in enumerate(words, start=len(MARKER_IDS) + 1)}, **MARKER_IDS}


def _pack(word_ids: list[np.ndarray], order: np.ndarray | int) -> np.ndarray:
    """Counting keys from each position's word id (positions 0-2; -1 or 0: no known word there),
    -1 where a position below the n-gram's ``order`` has no known word."""
    key = np.zeros(len(word_ids[0]), dtype=np.int64)
    known = np.ones(key.size, dtype=bool)
    for position, mapped in enumerate(word_ids):
        used = np.asarray(order) > position
        known &= ~used | (mapped > 0)
        key += np.where(used, mapped, 0) << (WORD_ID_BITS * (2 - position))
    return np.where(known, key, -1)


def string_keys(ngrams: pl.Series, order: np.ndarray | int, ids: dict[str, int]) -> np.ndarray:
    """The counting key of each n-gram string (order ``order``: per row, or one for all) from the
    word ids ``ids`` (:func:`counting_ids`); -1 for an n-gram with a word outside them."""
    parts = ngrams.rename("ngram").to_frame().select(w=pl.col("ngram").str.split_exact(" ", 2)).unnest("w")
    old, new = pl.Series(list(ids), dtype=pl.String), pl.Series(list(ids.values()), dtype=pl.Int64)
    mapped = [
        parts[column].fill_null("").replace_strict(old, new, default=-1, return_dtype=pl.Int64).to_numpy()
        for column in ("field_0", "field_1", "field_2")
    ]
    return _pack(mapped, order)


def counting_tables(
    vocabulary: list[str], domain: pl.DataFrame, keys: np.ndarray | None = None
) -> tuple[pa.Table, pa.Table]:
    """The two public tables ``sql/lm_counts/weighted.sql`` joins: the model vocabulary
    ``(token, tid)`` (ids from 4, in the given order; the markers are never vocabulary words) and
    the domain ``(gid, k)`` from ``domain`` (``gid``, ``n``, ``ngram``), k the n-gram's counting
    key (:data:`WORD_ID_BITS`; ``keys``: those of ``domain``'s rows when the caller has them,
    :attr:`CountDomain.keys`). An n-gram with a word outside V_LM and the markers is left out:
    the SQL reads such a text token as ``<unk>``, so it is never counted (its sum stays 0).
    Raises ConfigError past :data:`MAX_COUNTING_VOCABULARY` words."""
    words, ids = counting_ids(vocabulary)
    first = len(MARKER_IDS) + 1
    vocab = pa.table(
        {"token": pa.array(words, pa.string()), "tid": pa.array(range(first, first + len(words)), pa.int32())}
    )
    if keys is None:
        keys = string_keys(domain["ngram"], domain["n"].to_numpy(), ids)
    known = keys > 0
    gids = domain["gid"].to_numpy()[known].astype(np.int64)
    return vocab, pa.table({"gid": pa.array(gids), "k": pa.array(keys[known])})


COUNTS_SCHEMA = pa.schema([("n", pa.int8()), ("ngram", pa.string()), ("noisy_count", pa.float64())])


@dataclass
class CountDomain:
    """The public domain D: ``frame`` (gid 1..|D|, n, ngram), the model vocabulary and the public
    model P (both post-processing of public data and DP outputs); ``keys``: each row's counting key
    (-1: a word outside V_LM; :func:`counting_tables`), None to derive them from the strings."""

    frame: pl.DataFrame
    vocabulary: list[str]
    public_model: Any
    keys: np.ndarray | None = None

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
    cache_dir: Path | None = None,
) -> CountDomain:
    """V_LM, the public model P and the counting domain D (module docstring, steps 1-2), with the
    rows' counting keys. Order 1 is sorted; each higher order holds the public picks, sorted, then
    the released k-grams that are not among them, sorted. ``cache_dir``: the public-model cache
    (:mod:`dpngram.lm.public_cache`)."""
    from dpngram.lm.open_model import MARKERS, public_model_and_frequent
    from dpngram.lm.public_cache import CODE_WORDS

    vocabulary, model, frequent, public_words = public_model_and_frequent(
        dp_vocabulary,
        public_path,
        order=order,
        public_cap=public_cap,
        frequent_cap=domain_cap,
        lowercase=lowercase,
        cache_dir=cache_dir,
    )
    _, ids = counting_ids(vocabulary)
    unigrams = sorted({*vocabulary, *MARKERS})
    parts = [pl.DataFrame({"n": 1, "ngram": unigrams})]
    keys = [np.array([ids[w] for w in unigrams], dtype=np.int64) << (2 * WORD_ID_BITS)]
    # a public word's code (public_cache.word_codes) -> its counting id (-1 stays unknown: index -1)
    remap = np.array(
        [0, *(ids[w] for w in CODE_WORDS[1:]), *(ids[w] for w in public_words), -1], dtype=np.int64
    )
    for n in range(2, order + 1):
        top = frequent[n]
        top_keys = _pack([remap[top[f"c{i}"].to_numpy()] for i in range(n)], n)
        released = pl.DataFrame({"ngram": kgrams.get(n, [])}, schema={"ngram": pl.String}).unique()
        released_keys = string_keys(released["ngram"], n, ids)
        # (a k-gram with a word outside V_LM is never a public pick: their words are V_LM's)
        picked = pl.Series(released_keys).is_in(pl.Series(top_keys).implode()).to_numpy()
        extra = (released_keys < 0) | ~picked
        released = released.with_columns(k=released_keys).filter(pl.Series(extra)).sort("ngram")
        parts.append(
            pl.concat([top.select("ngram"), released.select("ngram")]).select(pl.lit(n).alias("n"), "ngram")
        )
        keys += [top_keys, released["k"].to_numpy()]
    frame = pl.concat([p.with_columns(pl.col("n").cast(pl.Int64)) for p in parts]).with_row_index(
        "gid", offset=1
    )
    return CountDomain(frame, vocabulary, model, np.concatenate(keys))


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


def user_mean_logprobs(
    public_logprob10: np.ndarray, private_logprob10: np.ndarray, grid=WEIGHT_GRID
) -> np.ndarray:
    """One selection user's mean natural log-probability of their events under λ·Q + (1 − λ)·P,
    per candidate λ (not yet a score: :func:`centred_contributions`)."""
    p = np.power(10.0, np.asarray(public_logprob10, dtype=np.float64))
    q = np.power(10.0, np.asarray(private_logprob10, dtype=np.float64))
    lam = np.asarray(grid, dtype=np.float64)[:, None]
    mix = np.maximum(lam * q[None, :] + (1.0 - lam) * p[None, :], 1e-300)
    return np.log(mix).mean(axis=1)


def centred_contributions(mean_logprobs: np.ndarray) -> np.ndarray:
    """Selection users' contributions to the candidates' scores from their mean log-probabilities
    (candidates along axis 0, users along axis 1 if any): each user's deviation from their own mean
    over the candidates, clipped to [−C, C], minus C — a vector in [−2C, 0] (C =
    :data:`SCORE_DEVIATION_CLIP_NATS`). Unclipped, the argmax of the summed scores is the candidate
    of the highest summed mean log-probability (the user's own mean is the same for every
    candidate); the clip bounds what one user moves (docs/lm_privacy.md, section 4)."""
    values = np.asarray(mean_logprobs, dtype=np.float64)
    deviation = values - values.mean(axis=0, keepdims=True)
    c = SCORE_DEVIATION_CLIP_NATS
    return np.clip(deviation, -c, c) - c


def selection_noise(epsilon: float) -> tuple[float, float]:
    """(Laplace scale b, grid g) of :func:`select_weight` at pure ε, R = :data:`SCORE_RANGE_NATS`:
    g = 2^⌊log2(R/(1024ε))⌋ and b = ⌈R/g⌉·g/ε, which is exactly R/ε whenever g divides R (R = 2:
    every ε ≥ 2^-10) and never less (docs/lm_privacy.md, section 4)."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0 (got {epsilon})")
    grid = 2.0 ** math.floor(math.log2(SCORE_RANGE_NATS / (1024.0 * epsilon)))
    return math.ceil(SCORE_RANGE_NATS / grid) * grid / epsilon, grid


def select_weight(
    scores: np.ndarray, epsilon: float, noise: NoiseSource, grid=WEIGHT_GRID
) -> tuple[float, int]:
    """Report-noisy-max: argmax of the summed scores + grid·DiscreteLaplace(b/g) noise each
    (:func:`selection_noise`, b ≈ R/ε, R = :data:`SCORE_RANGE_NATS`). Each user adds a vector in
    [−R, 0]^|grid| (:func:`centred_contributions`): adding a user moves every score down by at most
    R, never up (monotone scores), so the one-sided argument of Dwork & Roth, Claim 3.9, holds with
    sensitivity R: for the output i and the others' noise fixed, i still wins on the smaller
    dataset when its noise is ⌈R/g⌉·g higher, and on the larger one when its noise is that much
    higher than the threshold of the smaller; on the noise grid that costs a factor exactly
    e^{⌈R/g⌉·g/b} = e^ε. ε-DP. Returns (λ, index)."""
    scale, grid_step = selection_noise(epsilon)
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
    publics: list[BackoffScorer],
    private: BackoffScorer,
    weights: tuple[float, ...] = WEIGHT_GRID,
    pool: Executor | None = None,
) -> tuple[np.ndarray, int]:
    """Summed :func:`selection_user_vector` over the selection users (streamed; PRIVATE sums, kept in the
    run's process): for each public model variant in ``publics`` (one per adaptation strength β),
    the scores of every λ in ``weights``, concatenated in that order. Also returns the number of
    selection users (PRIVATE: never reported). Scored by
    :func:`dpngram.mechanisms.heldout_scoring.held_out_user_sums` (``pool``: its idle worker)."""
    sql = load_sql("lm_counts/selection_sentences", schema=schema)
    params = {"salt": int(salt), "holdout_per_mille": int(holdout_per_mille)}
    return held_out_user_sums(
        wh,
        sql,
        params,
        [*publics, private],
        partial(selection_batch_sum, weights=tuple(weights)),
        len(publics) * len(weights),
        pool,
    )


def selection_user_vector(
    publics: list[np.ndarray], private: np.ndarray, weights: tuple[float, ...]
) -> np.ndarray:
    """One selection user's contribution to every candidate's score: :func:`user_mean_logprobs` for
    every public variant, concatenated, through :func:`centred_contributions` (centred on the mean
    over all of them)."""
    return centred_contributions(np.concatenate([user_mean_logprobs(p, private, weights) for p in publics]))


def _user_sums(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Per user u, the sum of ``values[..., bounds[u]:bounds[u + 1]]`` (every user has an event)."""
    return np.add.reduceat(values, bounds[:-1], axis=-1)


def selection_batch_sum(
    publics: list[np.ndarray], private: np.ndarray, bounds: np.ndarray, weights: tuple[float, ...]
) -> np.ndarray:
    """Σ over the users of a batch of :func:`selection_user_vector`, on the batch's event arrays
    (user u's events: ``[bounds[u], bounds[u + 1])``) without a Python call per user: the users'
    mean log-probabilities come from one compiled pass per public variant
    (:func:`_mixture_user_means`), then go through :func:`centred_contributions`."""
    q = np.ascontiguousarray(private, dtype=np.float64)
    lam = np.asarray(weights, dtype=np.float64)
    user_bounds = np.ascontiguousarray(bounds, dtype=np.int64)
    means = np.empty((len(publics) * lam.size, user_bounds.size - 1), dtype=np.float64)
    for i, public in enumerate(publics):
        _mixture_user_means(
            np.ascontiguousarray(public, dtype=np.float64), q, user_bounds, lam, means[i * lam.size :]
        )
    return centred_contributions(means).sum(axis=1)


@njit(cache=True, nogil=True)
def _mixture_user_means(
    public: np.ndarray, private: np.ndarray, bounds: np.ndarray, lams: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled; tested through selection_batch_sum
    """out[j, u] = user u's mean over their events of ln(λ_j·q + (1 − λ_j)·p) (p, q from the log10
    probabilities; the mixture floored at 1e-300 as :func:`user_mean_logprobs` does). One pass over
    the events with no (candidates × events) temporaries: 7× the numpy version's speed, and the
    sums agree with it to rounding (tests/test_lm_heldout_scoring.py)."""
    sums = np.zeros(lams.size, dtype=np.float64)
    for u in range(bounds.size - 1):
        sums[:] = 0.0
        for e in range(bounds[u], bounds[u + 1]):
            p = 10.0 ** public[e]
            q = 10.0 ** private[e]
            for j in range(lams.size):
                sums[j] += math.log(max(lams[j] * q + (1.0 - lams[j]) * p, 1e-300))
        for j in range(lams.size):
            out[j, u] = sums[j] / (bounds[u + 1] - bounds[u])


def score_verdict_users(
    wh: Engine,
    schema: str,
    *,
    salt: int,
    holdout_per_mille: int,
    verdict_per_mille: int,
    public: BackoffScorer,
    released: BackoffScorer,
    pool: Executor | None = None,
) -> VerdictSums:
    """The verdict users' clipped sums (:func:`verdict_user_vector`; PRIVATE: kept in the run's
    process, only :func:`release_verdict` of them leaves): each user's mean natural log-loss
    under the released model (``released``: the mixture merged into one backoff model, as step
    ``lm`` writes it) and under the public-only model P (``public``). ``pool``: as for
    :func:`score_selection_users`."""
    sql = load_sql("lm_counts/verdict_sentences", schema=schema)
    params = {
        "salt": int(salt),
        "holdout_per_mille": int(holdout_per_mille),
        "verdict_per_mille": int(verdict_per_mille),
    }
    total, _ = held_out_user_sums(wh, sql, params, [public, released], verdict_batch_sum, 4, pool)
    return VerdictSums(
        released_loss=float(total[0]),
        public_loss=float(total[1]),
        difference=float(total[2]),
        users=int(round(total[3] / VERDICT_LOSS_CLIP)),
    )


def verdict_user_contribution(public: np.ndarray, released: np.ndarray) -> np.ndarray:
    """One verdict user's :func:`verdict_user_vector` from their events' log10 probabilities under
    P and under the released model."""
    log10 = math.log(10.0)
    return verdict_user_vector(np.asarray(released) * log10, np.asarray(public) * log10)


def verdict_batch_sum(publics: list[np.ndarray], released: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Σ over the users of a batch of :func:`verdict_user_contribution` (``publics``: [P's log10
    probabilities]), on the batch's event arrays (user u's events: ``[bounds[u], bounds[u + 1])``)
    without a Python call per user: the same clipping, user by user, as :func:`verdict_user_vector`."""
    (public,) = publics
    events = np.diff(bounds).astype(np.float64)
    log10 = math.log(10.0)
    with np.errstate(over="ignore", invalid="ignore"):
        rel_loss = -_user_sums(np.asarray(released, dtype=np.float64) * log10, bounds) / events
        pub_loss = -_user_sums(np.asarray(public, dtype=np.float64) * log10, bounds) / events
        raw_diff = rel_loss - pub_loss
    rel = np.clip(np.nan_to_num(rel_loss, nan=0.0, posinf=VERDICT_LOSS_CLIP), 0.0, VERDICT_LOSS_CLIP)
    pub = np.clip(np.nan_to_num(pub_loss, nan=0.0, posinf=VERDICT_LOSS_CLIP), 0.0, VERDICT_LOSS_CLIP)
    diff = np.clip(
        np.nan_to_num(raw_diff, nan=0.0, posinf=VERDICT_DIFF_CLIP, neginf=-VERDICT_DIFF_CLIP),
        -VERDICT_DIFF_CLIP,
        VERDICT_DIFF_CLIP,
    )
    return np.array([rel.sum(), pub.sum(), diff.sum(), VERDICT_LOSS_CLIP * events.size], dtype=np.float64)


# ----------------------------------------------------------------------------------------------
# The private-domain verdict (docs/lm_privacy.md, "The private-domain verdict")
# ----------------------------------------------------------------------------------------------

#: B_v: a verdict user's per-token log-loss (nats) is clipped to [0, B_v] (perplexity up to e^12).
VERDICT_LOSS_CLIP = 12.0

#: C_v: a verdict user's log-loss difference (released − public-only, nats) is clipped to [−C_v, C_v].
VERDICT_DIFF_CLIP = 2.0

#: Two-sided level of the released intervals (each is a Bonferroni box over the sum and the count).
VERDICT_LEVEL = 0.95


@dataclass(frozen=True)
class VerdictSums:
    """The verdict users' clipped sums (PRIVATE until noised): released loss, public-only loss,
    difference, and the number of users."""

    released_loss: float = 0.0
    public_loss: float = 0.0
    difference: float = 0.0
    users: int = 0


def verdict_user_vector(released_logprob: np.ndarray, public_logprob: np.ndarray) -> np.ndarray:
    """One verdict user's contribution (L_rel, L_pub, D, κ): their mean per-token log-loss (natural
    log) under the released and the public-only model, each clipped to [0, B_v], the clipped
    difference in [−C_v, C_v], and the constant κ = B_v that counts them. l2 norm at most
    √(2 B_v² + C_v² + B_v²): :func:`verdict_sensitivity`, for any input: a user with no event
    has loss 0, an infinite (or overflowing) loss counts as B_v, and an undefined difference
    (both losses infinite) as 0, so no coordinate is ever NaN."""
    rel_loss, pub_loss = _mean_loss(released_logprob), _mean_loss(public_logprob)
    rel = float(np.clip(np.nan_to_num(rel_loss, nan=0.0, posinf=VERDICT_LOSS_CLIP), 0.0, VERDICT_LOSS_CLIP))
    pub = float(np.clip(np.nan_to_num(pub_loss, nan=0.0, posinf=VERDICT_LOSS_CLIP), 0.0, VERDICT_LOSS_CLIP))
    raw_diff = np.nan_to_num(
        rel_loss - pub_loss, nan=0.0, posinf=VERDICT_DIFF_CLIP, neginf=-VERDICT_DIFF_CLIP
    )
    diff = float(np.clip(raw_diff, -VERDICT_DIFF_CLIP, VERDICT_DIFF_CLIP))
    return np.array([rel, pub, diff, VERDICT_LOSS_CLIP], dtype=np.float64)


def _mean_loss(logprob: np.ndarray) -> float:
    """−mean of natural log-probabilities (0 for no event; may be +inf)."""
    values = np.asarray(logprob, dtype=np.float64)
    if values.size == 0:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return float(-np.mean(values))


def verdict_sensitivity() -> float:
    """l2-sensitivity of the summed verdict vector under adding or removing one verdict user."""
    return math.sqrt(3.0 * VERDICT_LOSS_CLIP**2 + VERDICT_DIFF_CLIP**2)


def _ratio_interval(total: float, count: float, pad: float, lo: float, hi: float) -> list[float]:
    """[min, max] of (total ± pad) / (count ± pad/κ) clipped to [lo, hi]; the whole range when the
    count's lower end is not positive (the data cannot tell)."""
    c_lo = count - pad / VERDICT_LOSS_CLIP
    c_hi = count + pad / VERDICT_LOSS_CLIP
    if c_lo <= 0:
        return [lo, hi]
    corners = [(total + s * pad) / c for s in (-1.0, 1.0) for c in (c_lo, c_hi)]
    return [float(min(max(min(corners), lo), hi)), float(max(min(max(corners), hi), lo))]


def release_verdict(sums: VerdictSums, *, epsilon: float, delta: float, noise: NoiseSource) -> dict[str, Any]:
    """The Gaussian mechanism on the summed verdict vector (sensitivity :func:`verdict_sensitivity`,
    calibrated and snapped like the counts: :func:`noisy_release`), and what follows from it by
    post-processing: the estimated mean log-losses, their perplexities, and intervals at
    :data:`VERDICT_LEVEL` (a Bonferroni box: each of the sum and the count within z = Φ⁻¹(1 − α/4)
    noise standard deviations; clipping is part of the estimand, see docs). ``verdict`` is
    'released model better', 'public-only model better' or 'cannot tell' from the difference's
    interval."""
    from scipy import stats

    vector = np.array(
        [sums.released_loss, sums.public_loss, sums.difference, VERDICT_LOSS_CLIP * sums.users],
        dtype=np.float64,
    )
    noisy, calibration = noisy_release(
        vector, epsilon=epsilon, delta=delta, clip=verdict_sensitivity(), noise=noise
    )
    sigma = float(calibration.sigma)
    z = float(stats.norm.isf((1.0 - VERDICT_LEVEL) / 4.0))
    # z noise standard deviations, plus one grid step for the snapping of the sum and of the noise
    # to the lattice (each off by at most half a step: docs/noise.md).
    pad = z * sigma + float(calibration.grid)
    count = float(noisy[3]) / VERDICT_LOSS_CLIP
    usable = count - pad / VERDICT_LOSS_CLIP > 0
    rel = float(np.clip(noisy[0] / count, 0.0, VERDICT_LOSS_CLIP)) if usable else None
    pub = float(np.clip(noisy[1] / count, 0.0, VERDICT_LOSS_CLIP)) if usable else None
    diff = float(np.clip(noisy[2] / count, -VERDICT_DIFF_CLIP, VERDICT_DIFF_CLIP)) if usable else None
    rel_iv = _ratio_interval(float(noisy[0]), count, pad, 0.0, VERDICT_LOSS_CLIP)
    pub_iv = _ratio_interval(float(noisy[1]), count, pad, 0.0, VERDICT_LOSS_CLIP)
    diff_iv = _ratio_interval(float(noisy[2]), count, pad, -VERDICT_DIFF_CLIP, VERDICT_DIFF_CLIP)
    if usable and diff_iv[1] < 0:
        verdict = "released model better"
    elif usable and diff_iv[0] > 0:
        verdict = "public-only model better"
    else:
        verdict = "cannot tell"
    return {
        "released_perplexity": math.exp(rel) if rel is not None else None,
        "public_only_perplexity": math.exp(pub) if pub is not None else None,
        "interval": {
            "level": VERDICT_LEVEL,
            "released_perplexity": [math.exp(v) for v in rel_iv],
            "public_only_perplexity": [math.exp(v) for v in pub_iv],
            "log_ratio": diff_iv,
        },
        "log_ratio": diff,
        "verdict": verdict,
        "epsilon": epsilon,
        "delta": delta,
        "sigma": sigma,
        "grid": float(calibration.grid),
        "sensitivity": calibration.snapped_sensitivity,
        "loss_clip_nats": VERDICT_LOSS_CLIP,
        "difference_clip_nats": VERDICT_DIFF_CLIP,
    }
