"""Bayesian trigram distribution with a public prior (BayesianDP), its Laplace baselines, tuning.

Paper: Ramadan, Withers & Orr, "N-grams Bayesian Differential Privacy" (``../shared/papers/
bayesian_ngram_dp_ramadan.md``): eq. (1)-(5), Algorithm 1 (BayesianDP), Corollary 1, §3.2 and
§4.2 (baselines). The sensitivity derivation is in ``docs/bayes_sensitivity.md``; every deviation
from the paper is listed there and in ``docs/bayes.md``.

Mechanism (Algorithm 1), heavy work in SQL (``sql/bayes/*.sql``), vectors over V in numpy:

1. trigrams of every sentence with one ``<s>`` before and one ``</s>`` after it (the KenLM
   convention); tokens outside the run's DP vocabulary (``released/vocabulary.parquet``, a DP
   output) become ``<unk>`` in the private AND the public text;
2. V = public trigrams plus the trigrams DPNE released in this run, capped at
   ``bayes_vocab_size`` by public count (public data + DP outputs only); private trigrams outside
   V are dropped;
3. per user: count per trigram clamped to C, at most W distinct trigrams (salted-hash subset);
   for the run's private sentences straight from them with integer trigram keys and integer user
   ids, for public tuning from an occurrence table: the same rule, one SQL fragment
   (``sql/bayes/_bounded_counts.sql``), in :mod:`dpngram.mechanisms.bayes_user_counts`;
4. c (sum of bounded counts), N (users per trigram); x̂ = log(1 + c) − z (eq. 2) where the centring
   constant z = min(mean log(1 + c), L) is clipped at the public ``bayes_log_clip`` L;
   μ_p (eq. 1); w = min(1, S N / C) (eq. 5); μ_ps = ρ w⊙x̂ + (1 − ρ) μ_p;
5. h = μ_ps + Gaussian noise (on a power-of-two grid, ``docs/noise.md``), θ = softmax(h) (eq. 4).

Privacy: the noise is calibrated with the analytic Gaussian
(:func:`dpngram.core.accounting.gaussian_sigma`) to a DATA-INDEPENDENT bound on ‖Δμ_ps‖₂
(:func:`sensitivity_bound`) that uses only C, W, S, ρ, |V| and L. The paper's brute-force
sensitivity (max over the users present) and its Claim 1 (which uses the private N and x̂) depend
on the private data; calibrating to them is not (ε, δ)-DP. The brute-force variant is kept only
behind ``bayes_calibration='brute-force-NOT-DP'``, for comparison, and the report then says the
release has no DP guarantee.

Hyperparameters S, ρ are by default chosen on public data alone (:func:`tune_on_public`, zero
privacy cost): the public corpus is split into a prior fold and a pseudo-private fold of
pseudo-users, and the (S, ρ) with the smallest expected KL after noise is kept.

Why one module (over 600 lines): the mechanism, its Laplace baselines and the public-data
tuning of S and rho share the trigram space and the sensitivity bound; the baselines exist only to
be compared with the mechanism they sit next to.

Owns: BayesianDP (prior, posterior mean, sensitivity bound, calibration, release), the Laplace
baselines, public tuning of (S, ρ), the trigram space. The per-user bounded counts are
:mod:`dpngram.mechanisms.bayes_user_counts`.
Imports: dpngram.engines, dpngram.text, dpngram.core, dpngram.mechanisms.bayes_user_counts;
numpy, pyarrow.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpngram.core.accounting import GAUSSIAN_DELTA_MARGIN, PrivacyEvent, gaussian_sigma, laplace_scale
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource, simulation_rng
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.mechanisms.bayes_user_counts import (
    SPACE,
    SPACE_WORDS,
    UID_SENTENCES,
    USER_COUNTS,
    USERS,
    VOCABULARY_TABLE,
    aggregate_counts,
    bounded_user_counts,
    private_count_sums,
    private_user_counts,
)

BASELINE_METHODS = ("laplace", "laplace-public")


#: σ is calibrated at δ·(1 − margin): the stage's events then compose to strictly less than its
#: share's δ, which the joint calibration's shape relies on (docs/accounting.md). (It was first a
#: safety margin for the discrete Gaussian; the rounded Gaussian needs none, docs/noise.md.)
DELTA_MARGIN = GAUSSIAN_DELTA_MARGIN  # one constant, shared with the joint calibration's shape


#: The snapped vector differs by at most one grid step per coordinate; the grid is chosen so that
#: this costs at most this fraction of the sensitivity (g sqrt(|V|) <= SNAP_FRACTION * Delta_2).
SNAP_FRACTION = 1e-3


#: Public tuning grids (§3.2; S in [1e-3, 1e4] in §4.3, narrowed to where w is not all ones).
S_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)


RHO_GRID = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.97)


TUNING_PRIOR_SHARE = 0.7  # first 70% of the public corpus is the prior, the rest pseudo-private


TUNING_USER_SENTENCES = 5  # sentences per pseudo-user in the pseudo-private fold


TUNING_DRAWS = 2  # simulated noise draws per grid point


MAX_DECAY_STEPS = 10_000_000  # C / S larger than this is refused (the bound scans m <= C/S)


PUBLIC_BATCH_SENTENCES = 200_000


GUARANTEE_DP = (
    "user-level ({eps:.4g}, {delta:.3g})-differential privacy for this stage: adding or removing all "
    "text of any one user changes the probability of any released trigram distribution by at most a "
    "factor e^{eps:.4g}, except with probability {delta:.3g}; noise calibrated to a data-independent "
    "sensitivity bound (docs/bayes_sensitivity.md)"
)


GUARANTEE_PURE = (
    "user-level {eps:.4g}-differential privacy (pure) for this stage: adding or removing all text of any "
    "one user changes the probability of any released trigram distribution by at most a factor e^{eps:.4g}"
)


GUARANTEE_NOT_DP = (
    "NO differential-privacy guarantee: noise calibrated with the paper's brute-force sensitivity, "
    "computed from the private data itself (bayes_calibration='brute-force-NOT-DP'); for comparison only"
)


# ----------------------------------------------------------------------------------------------
# Mechanism math (pure numpy over V)
# ----------------------------------------------------------------------------------------------
def prior_mean(public: np.ndarray) -> np.ndarray:
    """μ_p = log(α + 1) − mean(log(α + 1)) (eq. 1)."""
    logs = np.log1p(np.asarray(public, dtype=np.float64))
    return logs - logs.mean() if logs.size else logs


def decay_weights(users: np.ndarray, S: float, C: int) -> np.ndarray:
    """w = min(1, S N / C) (eq. 5)."""
    return np.minimum(1.0, S * np.asarray(users, dtype=np.float64) / C)


def centred_log_counts(total_count: np.ndarray, log_clip: float) -> tuple[np.ndarray, float]:
    """x̂ = log(1 + c) − z with z = min(mean log(1 + c), L) (eq. 2 with a public clip L on the
    centring constant; identical to eq. 2 whenever the mean is at most L). Returns (x̂, z)."""
    logs = np.log1p(np.asarray(total_count, dtype=np.float64))
    centre = min(float(logs.mean()), log_clip) if logs.size else 0.0
    return logs - centre, centre


def posterior_mean(
    total_count: np.ndarray,
    users: np.ndarray,
    public: np.ndarray,
    *,
    S: float,
    rho: float,
    C: int,
    log_clip: float,
) -> np.ndarray:
    """μ_ps = ρ w⊙x̂ + (1 − ρ) μ_p (Corollary 1 / Algorithm 1)."""
    x_hat, _ = centred_log_counts(total_count, log_clip)
    return rho * decay_weights(users, S, C) * x_hat + (1.0 - rho) * prior_mean(public)


def sensitivity_bound(*, C: int, W: int, S: float, rho: float, vocab_size: int, log_clip: float) -> float:
    """Data-independent bound on ‖μ_ps(D) − μ_ps(D₋ₙ)‖₂ over ALL datasets and users
    (docs/bayes_sensitivity.md, Theorem B):

    with w(m) = min(1, S m / C), D(m) = log(1 + C/(1 + m)), X(m) = max(log(1 + C(m + 1)), L),
    t(k) = min(L, k log(1 + C) / |V|), k* = min(W, |V|):
    b(m) = w(m) max(D(m), t(k*)) + (w(m + 1) − w(m)) X(m), and
    Δ₂ = ρ sqrt(k* max_m b(m)² + max_{k ≤ k*} (|V| − k) t(k)²).
    m (the number of OTHER users holding a trigram) ranges over 0..ceil(C/S); beyond, b decreases.
    """
    _check_positive(C=C, W=W, S=S, vocab_size=vocab_size, log_clip=log_clip)
    if not 0 < rho <= 1:
        raise ConfigError(f"bayes_rho: must be in (0, 1] (got {rho})")
    if C / S > MAX_DECAY_STEPS:
        raise ConfigError(f"bayes_S: C/S must be at most {MAX_DECAY_STEPS:g} (got C={C}, S={S:g})")
    k_star = min(W, vocab_size)
    log1c = math.log1p(C)
    ks = np.arange(1, k_star + 1, dtype=np.float64)
    t_k = np.minimum(log_clip, ks * log1c / vocab_size)
    off_set = float(np.max((vocab_size - ks) * t_k * t_k))
    t_star = float(t_k[-1])
    m = np.arange(0, math.ceil(C / S) + 2, dtype=np.float64)
    w_m = np.minimum(1.0, S * m / C)
    w_next = np.minimum(1.0, S * (m + 1) / C)
    d_m = np.log1p(C / (1.0 + m))
    x_m = np.maximum(np.log1p(C * (m + 1.0)), log_clip)
    b = w_m * np.maximum(d_m, t_star) + (w_next - w_m) * x_m
    return float(rho * math.sqrt(k_star * float(np.max(b)) ** 2 + off_set))


def noise_grid(sensitivity: float, epsilon: float, vocab_size: int) -> float:
    """Largest power-of-two grid g with g ≤ Δ/(16 ceil(max(1, ε))) and g sqrt(|V|) ≤ SNAP_FRACTION Δ
    (snapping all |V| coordinates costs at most that much sensitivity). The first bound dates from
    the discrete Gaussian, whose privacy profile approached the continuous one only on fine grids;
    with rounded-Gaussian noise the accounting is exact on any grid, and the bound only keeps the
    rounding's extra variance (g²/12 per coordinate) negligible (docs/noise.md)."""
    limit = min(
        sensitivity / (16 * math.ceil(max(1.0, epsilon))), SNAP_FRACTION * sensitivity / math.sqrt(vocab_size)
    )
    return 2.0 ** math.floor(math.log2(limit))


@dataclass(frozen=True)
class GaussianCalibration:
    """Public noise parameters of one release of h (all data-independent under 'global')."""

    epsilon: float
    delta: float
    sensitivity: float  # bound on ||Δμ_ps||_2 before snapping
    snapped_sensitivity: float  # + g sqrt(|V|): what the noise is calibrated to
    grid: float
    sigma: float


def calibrate(epsilon: float, delta: float, sensitivity: float, vocab_size: int) -> GaussianCalibration:
    """σ from the analytic Gaussian at δ(1 − 1e-3) for the snapped sensitivity Δ₂ + g sqrt(|V|)."""
    grid = noise_grid(sensitivity, epsilon, vocab_size)
    snapped = sensitivity + grid * math.sqrt(vocab_size)
    sigma = gaussian_sigma(epsilon, delta * (1.0 - DELTA_MARGIN), snapped)
    return GaussianCalibration(epsilon, delta, sensitivity, snapped, grid, sigma)


def release_logits(mu: np.ndarray, calibration: GaussianCalibration, noise: NoiseSource) -> np.ndarray:
    """h = g (round_half_up(μ/g) + k), k = floor(Z/g + 1/2) with Z ~ N(0, σ²) per coordinate: μ
    snapped to the power-of-two grid, then rounded-Gaussian lattice noise, so h = g·(m + k) exactly
    (docs/noise.md, steps 1-2). m + k = floor(m + Z/g + 1/2) is post-processing of the continuous
    Gaussian mechanism on m, whose l2 sensitivity is the snapped one: the analytic Gaussian
    accounting of :func:`calibrate` holds exactly (docs/noise.md, "Released Gaussian values")."""
    grid = calibration.grid
    lattice = np.floor(np.asarray(mu, dtype=np.float64) / grid + 0.5)
    return grid * lattice + noise.gaussian_on_grid(calibration.sigma, lattice.size, grid)


def bayesian_release(
    mu: np.ndarray,
    calibration: GaussianCalibration,
    noise: NoiseSource,
    *,
    stage: str,
    differentially_private: bool,
) -> tuple[np.ndarray, list[PrivacyEvent]]:
    """The released logits h (:func:`release_logits`) and the privacy event of exactly that draw.

    Privacy map: one Gaussian mechanism with noise ``calibration.sigma`` on a query of
    l2-sensitivity ``calibration.snapped_sensitivity`` (:func:`sensitivity_bound` plus the grid's
    snapping, :func:`calibrate`), so (ε, δ(1 − 1e-3))-DP by the analytic Gaussian; derivation in
    docs/bayes_sensitivity.md and docs/noise.md. With ``differentially_private=False`` (the
    brute-force calibration) the event says it is NOT DP."""
    h = release_logits(mu, calibration, noise)
    event = PrivacyEvent(
        stage=stage,
        mechanism="gaussian",
        sigma=calibration.sigma,
        sensitivity=calibration.snapped_sensitivity,
        note="BayesianDP h ~ N(mu_ps, sigma^2 I)"
        + ("" if differentially_private else " — BRUTE-FORCE CALIBRATION, NOT DP"),
    )
    return h, [event]


def softmax(h: np.ndarray) -> np.ndarray:
    """θ = softmax(h) (eq. 4), computed stably."""
    h = np.asarray(h, dtype=np.float64)
    e = np.exp(h - h.max())
    return e / e.sum()


def kl_divergence(counts: np.ndarray, theta: np.ndarray, floor: float = 1e-12) -> float:
    """KL(p ‖ θ) with p = counts / sum(counts). θ is mixed with the uniform distribution at weight
    ``floor`` so that a θ with zeros (the thresholded Laplace baselines) gives a finite number.
    For evaluation only (benchmarks): it reads exact private counts."""
    counts = np.asarray(counts, dtype=np.float64)
    p = counts / counts.sum()
    q = (1.0 - floor) * np.asarray(theta, dtype=np.float64) + floor / theta.size
    nz = p > 0
    return float(np.sum(p[nz] * (np.log(p[nz]) - np.log(q[nz]))))


# -- §4.2 baselines ------------------------------------------------------------------------------
def laplace_noisy_counts(
    total_count: np.ndarray, *, epsilon: float, C: int, W: int, noise: NoiseSource
) -> tuple[np.ndarray, float]:
    """Laplace mechanism on the bounded counts (§4.2 baseline 1): each user contributes at most W
    trigrams with count ≤ C, so the l1-sensitivity is W·C and the scale b = W C / ε. Integer
    counts + discrete Laplace on the integer lattice (exact, docs/noise.md). Returns (ĉ, b)."""
    scale = laplace_scale(epsilon, float(W * C))
    counts = np.asarray(total_count, dtype=np.float64)
    return counts + noise.laplace_on_grid(scale, counts.size, 1.0), scale


def laplace_baseline_release(
    total_count: np.ndarray, *, epsilon: float, C: int, W: int, noise: NoiseSource, method: str, stage: str
) -> tuple[np.ndarray, float, list[PrivacyEvent]]:
    """:func:`laplace_noisy_counts` and the privacy event of exactly that draw.

    Privacy map: the Laplace mechanism with scale W·C/ε on a query of l1-sensitivity W·C is
    ε-DP (pure); derivation in docs/bayes.md ("Deviations from the paper") and docs/noise.md."""
    noisy, scale = laplace_noisy_counts(total_count, epsilon=epsilon, C=C, W=W, noise=noise)
    event = PrivacyEvent(
        stage=stage,
        mechanism="laplace",
        epsilon=epsilon,
        sensitivity=float(W * C),
        note=f"{method}: Laplace on bounded trigram counts",
    )
    return noisy, scale, [event]


def laplace_distribution(noisy: np.ndarray) -> np.ndarray:
    """Threshold at 0 and normalise (§4.2 baseline 1); uniform if nothing is positive."""
    kept = np.maximum(np.asarray(noisy, dtype=np.float64), 0.0)
    total = kept.sum()
    return kept / total if total > 0 else np.full(kept.size, 1.0 / kept.size)


def laplace_public_distribution(noisy: np.ndarray, public: np.ndarray, scale: float) -> np.ndarray:
    """Laplace with public data (§4.2 baseline 2), post-processing of the same noisy counts:
    θ ∝ max(ĉ, 0) + κ α̃ with α̃ the normalised public counts (add-one smoothed) and κ = b|V|/2, the
    expected mass the thresholded noise adds. The paper's formula taken literally cancels α̃
    (Σ_n w_n = 1, so Σ_n w_n(Δc̃ⁿ − α̃) + α̃ = c/‖c‖₁) and normalises by the private total, whose
    sensitivity depends on the data; this Dirichlet-smoothing reading keeps the public data useful
    and the sensitivity data-independent (docs/bayes.md)."""
    alpha = np.asarray(public, dtype=np.float64) + 1.0
    alpha_tilde = alpha / alpha.sum()
    kept = np.maximum(np.asarray(noisy, dtype=np.float64), 0.0) + scale * alpha.size / 2.0 * alpha_tilde
    return kept / kept.sum()


# ----------------------------------------------------------------------------------------------
# Data preparation (SQL in the run schema)
# ----------------------------------------------------------------------------------------------
PUBLIC_SENTENCES = "bayes_public_sentences"


PUBLIC_SENTENCE_COLUMNS = pa.schema([("user_id", pa.int64()), ("tokens", pa.list_(pa.string()))])


PUBLIC_OCCURRENCES = "bayes_public_occ"


PUBLIC_COUNTS = "bayes_public_counts"


PRIVATE_OCCURRENCES = "bayes_private_occ"


RELEASED_TABLE = "bayes_released_trigrams"


WORK_TABLES = (
    PUBLIC_SENTENCES,
    PUBLIC_OCCURRENCES,
    PUBLIC_COUNTS,
    PRIVATE_OCCURRENCES,
    SPACE_WORDS,
    USERS,
    f"{USERS}_per_user",
    f"{USERS}_buckets",
    UID_SENTENCES,
    VOCABULARY_TABLE,
    RELEASED_TABLE,
    SPACE,
    USER_COUNTS,
    "bayes_tune_counts",
    "bayes_tune_users",
    "bayes_tune_user_counts",
)


def _public_batches(path: str | Path, lowercase: bool) -> Iterator[pa.Table]:
    from dpngram.text.public import read_public_corpus

    tokens: list[list[str]] = []
    first = 0
    for sentence in read_public_corpus(path, lowercase):
        tokens.append(sentence)
        if len(tokens) >= PUBLIC_BATCH_SENTENCES:
            yield _sentence_table(first, tokens)
            first, tokens = first + len(tokens), []
    if tokens:
        yield _sentence_table(first, tokens)


def _sentence_table(first: int, tokens: list[list[str]]) -> pa.Table:
    return pa.table(
        {
            "user_id": pa.array(np.arange(first, first + len(tokens), dtype=np.int64)),
            "tokens": pa.array(tokens, pa.list_(pa.string())),
        },
        schema=PUBLIC_SENTENCE_COLUMNS,
    )


def load_public_corpus(
    wh: Engine, schema: str, path: str | Path, lowercase: bool = True, cache_dir: Path | None = None
) -> int:
    """Stream the public corpus (:func:`dpngram.text.public.read_public_corpus`, the ingest
    tokenizer) into ``{schema}.bayes_public_sentences(user_id = sentence number, tokens)``.
    Returns the number of sentences (a public fact). ``cache_dir``: the public-model cache
    (:mod:`dpngram.lm.public_cache`), where the tokenised sentences are kept per corpus content and
    lowercasing: tokenising Brown took about 0.6 s of every run's stage."""
    wh.load_table(
        schema, PUBLIC_SENTENCES, _cached_public_batches(path, lowercase, cache_dir), PUBLIC_SENTENCE_COLUMNS
    )
    return int(wh.fetch_scalar(f"SELECT coalesce(max(user_id) + 1, 0) FROM {schema}.{PUBLIC_SENTENCES}"))


def _cached_public_batches(path: str | Path, lowercase: bool, cache_dir: Path | None) -> Iterator[pa.Table]:
    """:func:`_public_batches`, read from the cache entry ``public_sentences`` (written from them
    first when missing); without a usable cache, tokenised here."""
    from dpngram.lm.public_cache import cached_file, entry_key, file_digest

    def write(target: Path) -> None:
        with pq.ParquetWriter(target, PUBLIC_SENTENCE_COLUMNS, compression="zstd") as writer:
            for table in _public_batches(path, lowercase):
                writer.write_table(table)

    key = entry_key("bayes-public-sentences", file_digest(path), lowercase) if cache_dir else ""
    cached = cached_file(cache_dir, "public_sentences", key, "sentences.parquet", write) if key else None
    if cached is None:
        yield from _public_batches(path, lowercase)
        return
    for batch in pq.ParquetFile(cached).iter_batches(batch_size=PUBLIC_BATCH_SENTENCES):
        yield pa.Table.from_batches([batch])


def install_vocabulary(wh: Engine, schema: str, tokens: pa.Table | None) -> bool:
    """``{schema}.bayes_vocabulary(token)`` from a released vocabulary (column ``token``).
    Returns whether tokens outside it map to ``<unk>`` (False when no vocabulary is given)."""
    columns = pa.schema([("token", pa.string())])
    if tokens is None:
        wh.load_table(schema, VOCABULARY_TABLE, [], columns)
        return False
    distinct = pa.table({"token": pa.array(sorted(set(tokens["token"].to_pylist()) - {None}), pa.string())})
    wh.load_table(schema, VOCABULARY_TABLE, [distinct], columns)
    return True


def trigram_occurrences(wh: Engine, schema: str, source: str, target: str, map_unk: bool) -> None:
    """``{schema}.{target}(user_id, w1, w2, w3)`` from a sentence relation ``{source}(user_id,
    tokens)`` (``sql/bayes/occurrences.sql``)."""
    wh.execute(
        load_sql(
            "bayes/occurrences", schema=schema, source=source, target=target, vocabulary=VOCABULARY_TABLE
        ),
        {"map_unk": bool(map_unk)},
    )


def _public_counts(wh: Engine, schema: str, target: str, first: int, last: int) -> None:
    wh.execute(
        load_sql("bayes/public_counts", schema=schema, target=target, occurrences=PUBLIC_OCCURRENCES),
        {"first": int(first), "last": int(last)},
    )


def released_trigrams(kgrams_path: Path | None) -> pa.Table:
    """Trigrams (k = 3) of a released ``kgrams.parquet`` as columns w1, w2, w3 (a DP output)."""
    schema = pa.schema([("w1", pa.string()), ("w2", pa.string()), ("w3", pa.string())])
    if kgrams_path is None or not Path(kgrams_path).is_file():
        return schema.empty_table()
    table = pq.read_table(kgrams_path, columns=["k", "ngram"])
    grams = [
        g.split(" ")
        for g, k in zip(table["ngram"].to_pylist(), table["k"].to_pylist(), strict=True)
        if k == 3
    ]
    grams = [g for g in grams if len(g) == 3]
    return pa.table(
        {f"w{i + 1}": pa.array([g[i] for g in grams], pa.string()) for i in range(3)}, schema=schema
    )


def build_space(wh: Engine, schema: str, released: pa.Table, max_size: int) -> int:
    """V (``sql/bayes/space.sql``): public trigrams ∪ released trigrams, capped by public count.
    Needs ``{schema}.bayes_public_counts``. Returns |V| (public: computed from public data and DP
    outputs only)."""
    columns = pa.schema([(f"w{i}", pa.string()) for i in (1, 2, 3)])
    distinct = sorted(set(zip(*(released[f"w{i}"].to_pylist() for i in (1, 2, 3)), strict=True)))
    rows = pa.table({f"w{i}": pa.array([g[i - 1] for g in distinct], pa.string()) for i in (1, 2, 3)})
    wh.load_table(schema, RELEASED_TABLE, [rows], columns)
    wh.execute(
        load_sql(
            "bayes/space", schema=schema, target=SPACE, public_counts=PUBLIC_COUNTS, released=RELEASED_TABLE
        ),
        {"max_size": int(max_size)},
    )
    return int(wh.fetch_scalar(f"SELECT count(*) FROM {schema}.{SPACE}"))


def _space_vector(wh: Engine, schema: str, size: int, table: str | None = None) -> np.ndarray:
    """Public counts over V (index tid − 1), from V itself or from another public count table."""
    if table is None:
        sql = f"SELECT tid, public_count AS n FROM {schema}.{SPACE}"
    else:
        sql = (
            f"SELECT s.tid, p.public_count AS n FROM {schema}.{SPACE} AS s JOIN {schema}.{table} AS p "
            "ON p.w1 = s.w1 AND p.w2 = s.w2 AND p.w3 = s.w3"
        )
    cols = wh.fetch_numpy(sql)
    out = np.zeros(size, dtype=np.float64)
    out[np.asarray(cols["tid"], dtype=np.int64) - 1] = np.asarray(cols["n"], dtype=np.float64)
    return out


def exact_counts_for_evaluation(wh: Engine, schema: str, occurrences: str, size: int) -> np.ndarray:
    """Unbounded counts over V of an occurrence table. EVALUATION ONLY (benchmarks, public tuning)."""
    cols = wh.fetch_numpy(load_sql("bayes/exact_counts", schema=schema, occurrences=occurrences, space=SPACE))
    out = np.zeros(size, dtype=np.float64)
    out[np.asarray(cols["tid"], dtype=np.int64) - 1] = np.asarray(cols["exact_count"], dtype=np.float64)
    return out


@dataclass
class TrigramInputs:
    """Everything a mechanism needs, as vectors over V (index tid − 1).

    ``public`` (α), ``size`` and the public sentence count are public; ``total_count`` (c) and
    ``users`` (N) are exact PRIVATE statistics: they never leave the process."""

    schema: str
    size: int
    public: np.ndarray
    total_count: np.ndarray = field(repr=False)
    users: np.ndarray = field(repr=False)
    public_sentences: int
    unk_mapped: bool
    released_trigrams: int


def prepare_inputs(
    wh: Engine,
    schema: str,
    *,
    public_path: str | Path,
    vocabulary: pa.Table | None,
    released: pa.Table,
    C: int,
    W: int,
    vocab_size: int,
    salt: int,
    lowercase: bool = True,
    private_sentences: str = "sentences",
    cache_dir: Path | None = None,
    user_counts_table: bool = False,
) -> TrigramInputs:
    """Steps 1-4 of the module docstring up to (c, N, α). Private tables stay in ``schema``.
    ``cache_dir``: the public-model cache (:func:`load_public_corpus`). ``user_counts_table``:
    also leave the per-user bounded counts in ``{schema}.bayes_user_counts`` (what the NOT-DP
    brute-force sensitivity reads); else (c, N) come from :func:`private_count_sums`."""
    map_unk = install_vocabulary(wh, schema, vocabulary)
    sentences = load_public_corpus(wh, schema, public_path, lowercase, cache_dir)
    trigram_occurrences(wh, schema, PUBLIC_SENTENCES, PUBLIC_OCCURRENCES, map_unk)
    _public_counts(wh, schema, PUBLIC_COUNTS, 0, sentences)
    size = build_space(wh, schema, released, vocab_size)
    if size == 0:
        raise ConfigError("public: the public corpus and the released k-grams give no trigram (V is empty)")
    if user_counts_table:
        private_user_counts(wh, schema, private_sentences, USER_COUNTS, map_unk=map_unk, C=C, W=W, salt=salt)
        total, users = aggregate_counts(wh, schema, USER_COUNTS, size)
    else:
        total, users = private_count_sums(
            wh, schema, private_sentences, size, map_unk=map_unk, C=C, W=W, salt=salt
        )
    return TrigramInputs(
        schema=schema,
        size=size,
        public=_space_vector(wh, schema, size),
        total_count=total,
        users=users,
        public_sentences=sentences,
        unk_mapped=map_unk,
        released_trigrams=released.num_rows,
    )


def space_keys(wh: Engine, schema: str) -> pa.Table:
    """V as (w1, w2, w3) in tid order (public)."""
    return wh.fetch_arrow(f"SELECT w1, w2, w3 FROM {schema}.{SPACE} ORDER BY tid")


def drop_work_tables(wh: Engine, schema: str) -> None:
    wh.drop(schema, *WORK_TABLES)


def bruteforce_sensitivity_not_dp(
    wh: Engine, inputs: TrigramInputs, *, S: float, rho: float, C: int, log_clip: float
) -> float:
    """NOT DP. The paper's brute-force sensitivity (Alg. 1): max over the users present of the exact
    ‖μ_ps(D) − μ_ps(D₋ₙ)‖₂ (``sql/bayes/bruteforce.sql``). Depends on the private data. Reads the
    per-user table that :func:`prepare_inputs` builds only when asked (``user_counts_table``)."""
    if not wh.table_exists(inputs.schema, USER_COUNTS):
        raise ValueError(
            "the brute-force sensitivity reads the per-user counts: call prepare_inputs with "
            "user_counts_table=True first"
        )
    logs = np.log1p(inputs.total_count)
    mean_log = float(logs.mean())
    centre = min(mean_log, log_clip)
    weight = decay_weights(inputs.users, S, C)
    held = inputs.users > 0
    stats = pa.table(
        {
            "tid": np.nonzero(held)[0].astype(np.int64) + 1,
            "total_count": inputs.total_count[held],
            "users": inputs.users[held],
            "log_count": logs[held],
            "weight": weight[held],
            "centred": logs[held] - centre,
        }
    )
    view = "bayes_bruteforce_stats"
    with wh.registered(**{view: stats}):
        gamma = wh.fetch_scalar(
            load_sql("bayes/bruteforce", schema=inputs.schema, user_counts=USER_COUNTS, stats=view),
            {
                "vocab_size": float(inputs.size),
                "mean_log": mean_log,
                "mean_clip": float(log_clip),
                "centre": centre,
                "weight_sq_total": float(np.sum(weight * weight)),
                "slope": S / C,
            },
        )
    return rho * max(float(gamma or 0.0), 1e-12)


# ----------------------------------------------------------------------------------------------
# Public hyperparameter tuning (zero privacy cost)
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TuningResult:
    """Chosen (S, ρ) and the public evidence for it (safe to report: public data only)."""

    S: float
    rho: float
    method: str
    scores: list[dict[str, float]]
    prior_sentences: int
    pseudo_users: int

    def report(self) -> dict[str, Any]:
        return asdict(self)


def tune_on_public(
    wh: Engine,
    inputs: TrigramInputs,
    *,
    epsilon: float,
    delta: float,
    C: int,
    W: int,
    log_clip: float,
    S_grid: Sequence[float] = S_GRID,
    rho_grid: Sequence[float] = RHO_GRID,
    seed: int = 0,
) -> TuningResult:
    """Choose (S, ρ) on public data only (§3.2's grid search, without touching private data).

    The public corpus (in file order) is split into a prior fold (first 70% of sentences) and a
    pseudo-private fold whose pseudo-users are runs of 5 consecutive sentences. For each grid
    point, the mechanism is simulated on the pseudo-private fold (same C, W, V, L, ε, δ and the
    same data-independent σ) and scored by KL(pseudo-private ‖ softmax(h)), averaged over a few
    simulated noise draws. The simulated noise protects nothing (the data are public), so it uses
    :func:`simulation_rng`. A contiguous split keeps genre shifts of an ordered corpus (e.g. Brown)
    between prior and pseudo-private data, as between a public and a private corpus."""
    schema = inputs.schema
    n_prior = int(inputs.public_sentences * TUNING_PRIOR_SHARE)
    if n_prior < 1 or inputs.public_sentences - n_prior < TUNING_USER_SENTENCES:
        raise ConfigError(
            "public: the public corpus is too small for public tuning; set bayes_S and bayes_rho"
        )
    _public_counts(wh, schema, "bayes_tune_counts", 0, n_prior)
    prior = _space_vector(wh, schema, inputs.size, "bayes_tune_counts")
    wh.execute(
        load_sql(
            "bayes/pseudo_users", schema=schema, target="bayes_tune_users", occurrences=PUBLIC_OCCURRENCES
        ),
        {"first": n_prior, "sentences_per_user": TUNING_USER_SENTENCES},
    )
    bounded_user_counts(wh, schema, "bayes_tune_users", "bayes_tune_user_counts", C=C, W=W, salt=seed)
    total, users = aggregate_counts(wh, schema, "bayes_tune_user_counts", inputs.size)
    target = exact_counts_for_evaluation(wh, schema, "bayes_tune_users", inputs.size)
    pseudo_users = int(wh.fetch_scalar(f"SELECT count(DISTINCT user_id) FROM {schema}.bayes_tune_users"))
    if target.sum() <= 0:
        raise ConfigError("public: no public trigram of V in the tuning fold; set bayes_S and bayes_rho")
    rng = simulation_rng(seed)
    scores = []
    for S in S_grid:
        for rho in rho_grid:
            bound = sensitivity_bound(C=C, W=W, S=S, rho=rho, vocab_size=inputs.size, log_clip=log_clip)
            sigma = calibrate(epsilon, delta, bound, inputs.size).sigma
            mu = posterior_mean(total, users, prior, S=S, rho=rho, C=C, log_clip=log_clip)
            kls = [
                kl_divergence(target, softmax(mu + rng.normal(0.0, sigma, mu.size)))
                for _ in range(TUNING_DRAWS)
            ]
            scores.append({"S": S, "rho": rho, "sigma": sigma, "kl": float(np.mean(kls))})
    best = min(scores, key=lambda s: s["kl"])
    return TuningResult(best["S"], best["rho"], "public", scores, n_prior, pseudo_users)


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ConfigError(f"{name}: must be a finite number > 0 (got {value!r})")
