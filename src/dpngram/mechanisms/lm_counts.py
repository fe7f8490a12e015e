"""DP-noisy n-gram counts for the language model (step ``lm_counts``): the domain and the release.

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
   next ``lm_verdict_holdout`` *verdict* users, the rest *counting* users;
4. per counting user u, the count vector x_u over D (all orders together) is scaled by
   min(1, C/‖x_u‖₂) (C = ``lm_count_clip``) and summed: l2-sensitivity C under adding or removing
   one user. Gaussian noise calibrated by :mod:`dpngram.core.accounting` (analytic Gaussian, snapped to
   a power-of-two grid as in docs/noise.md) is added to every coordinate of D;
5. released: every order-1 coordinate, and the order-≥2 coordinates whose noisy value is at least
   ``lm_count_threshold``·σ (dropping the rest is post-processing);
6. the model Q of the released counts, the public model P and their mixture are post-processing
   (:mod:`dpngram.mechanisms.lm_models`); with ``lm_mix_weight='auto'`` the mixture weight λ is
   chosen on the selection users (:mod:`dpngram.mechanisms.lm_selection`), and the private-domain
   verdict is measured on a third group of users (:mod:`dpngram.mechanisms.lm_verdict`).

Privacy map: :func:`noisy_release` calibrates σ by the analytic Gaussian at (ε, δ·(1 − 10⁻³)) for
the snapped l2-sensitivity C + g·√|D| (:func:`dpngram.mechanisms.bayes.calibrate`), so the released
vector is (ε, δ)-DP in a counting user; the ledger records it as one Gaussian event (σ, the snapped
sensitivity: :meth:`CountRelease.events`). The selection and the verdict users are disjoint from the
counting users (a data-independent keyed hash), so by parallel composition the stage is (ε, δ)-DP
with its whole share and that event is its only one. Derivation: docs/lm_privacy.md, sections 3
(the counts), 5 and 5a (the three groups of users).

Owns: the count domain, the counting SQL's per-user bounded sums, the noisy count release and its
privacy event.
Imports: dpngram.mechanisms.bayes, dpngram.lm.open_model, dpngram.lm.public_cache,
dpngram.release.layout, dpngram.engines, dpngram.core; numba, numpy, polars, pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa
from numba import njit

from dpngram.core.accounting import PrivacyEvent
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine, list_arrays
from dpngram.engines.sql import load_sql
from dpngram.release.layout import KGRAMS

if TYPE_CHECKING:
    from dpngram.mechanisms.bayes import GaussianCalibration


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
    public_prune: int = 0,
) -> CountDomain:
    """V_LM, the public model P and the counting domain D (module docstring, steps 1-2), with the
    rows' counting keys. Order 1 is sorted; each higher order holds the public picks, sorted, then
    the released k-grams that are not among them, sorted. ``cache_dir``: the public-model cache
    (:mod:`dpngram.lm.public_cache`); ``public_prune``: P's pruning (the domain's public picks are
    taken from every public n-gram either way)."""
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
        public_prune=public_prune,
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


def _load_domain_tables(wh: Engine, schema: str, domain: CountDomain) -> None:
    """Load the model vocabulary and the n-gram domain, as word ids, into the engine's work tables."""
    vocab_table, domain_table = counting_tables(domain.vocabulary, domain.frame, domain.keys)
    wh.load_table(schema, VOCABULARY_TABLE, [vocab_table], vocab_table.schema)
    wh.load_table(schema, DOMAIN_TABLE, [domain_table], domain_table.schema)


def weighted_counts(
    wh: Engine, schema: str, domain: CountDomain, *, salt: int, holdout: int, clip: float, power: float
) -> np.ndarray:
    """The summed per-user l2-bounded n-gram counts over the domain (index gid - 1), before noise
    (module docstring, step 4; PRIVATE, kept in the run's process): the counting users (keyed hash
    at or above ``holdout`` per mille under ``salt``), each user's counts to the power ``power``
    (``lm_count_power``), the vector scaled to norm ≤ ``clip``. Leaves :data:`WORK_TABLES` in
    ``schema`` (the caller drops them).

    Two ways to the same sums (tests/test_lm_counts.py checks they agree). The DuckDB engine runs
    in this process: it streams each user's list of domain ids (sql/lm_counts/user_gid_lists.sql)
    and :func:`_sum_bounded_user_counts` counts, clips and sums them here, which at 1M users took
    41-42 s against 73 s for the whole of it in SQL (docs/engines.md, "lm_counts: counting each
    user's ids in the process"), mostly DuckDB's per-user list sort. Any other engine (Spark:
    per-user lists would travel to the driver) runs sql/lm_counts/weighted.sql and returns only
    the sums."""
    _load_domain_tables(wh, schema, domain)
    params = {"salt": int(salt), "holdout_per_mille": holdout, **COUNTING_PARAMS}
    if wh.name == "duckdb":
        return summed_in_process(wh, schema, domain.size, params, clip=clip, power=power)
    return summed_in_engine(wh, schema, domain.size, params, clip=clip, power=power)


def _counting_identifiers(schema: str) -> dict[str, str]:
    return {"schema": schema, "source": "sentences", "vocabulary": VOCABULARY_TABLE, "domain": DOMAIN_TABLE}


def summed_in_process(
    wh: Engine, schema: str, size: int, params: dict[str, Any], *, clip: float, power: float
) -> np.ndarray:
    """:func:`weighted_counts` on an engine in this process: the users' id lists of
    sql/lm_counts/user_gid_lists.sql (``params``: its parameters), streamed in batches of
    :data:`USER_BATCH` users and summed by :func:`_sum_bounded_user_counts` into a vector of
    ``size`` (index gid − 1)."""
    weighted = np.zeros(size, dtype=np.float64)
    powers = np.arange(POWER_TABLE_SIZE, dtype=np.float64) ** power
    scratch = np.zeros(size + 1, dtype=np.int64)
    sql = load_sql("lm_counts/user_gid_lists", **_counting_identifiers(schema))
    for batch in wh.fetch_batches(sql, params, USER_BATCH):
        offsets, gids = list_arrays(batch.column(0))
        _sum_bounded_user_counts(offsets, gids, power, clip, powers, scratch, weighted)
    return weighted


def summed_in_engine(
    wh: Engine, schema: str, size: int, params: dict[str, Any], *, clip: float, power: float
) -> np.ndarray:
    """:func:`weighted_counts` in the engine: sql/lm_counts/weighted.sql writes the sums to
    :data:`WEIGHTED_TABLE`, and only they are fetched, into a vector of ``size`` (index gid − 1)."""
    wh.execute(
        load_sql("lm_counts/weighted", target=WEIGHTED_TABLE, **_counting_identifiers(schema)),
        {**params, "clip": clip, "count_power": power},
    )
    cols = wh.fetch_numpy(f"SELECT gid, weighted FROM {schema}.{WEIGHTED_TABLE}")
    weighted = np.zeros(size, dtype=np.float64)
    weighted[np.asarray(cols["gid"], dtype=np.int64) - 1] = np.asarray(cols["weighted"], dtype=np.float64)
    return weighted


#: Users per streamed batch of :func:`weighted_counts` (about 250 ids a user at 1M users: ~130 MB).
USER_BATCH = 1 << 16


#: Counts below this take their power c^p from a table (np.power per id took most of the time).
POWER_TABLE_SIZE = 4096


@njit(cache=True, nogil=True)
def _sum_bounded_user_counts(offsets, gids, power, clip, powers, scratch, weighted):  # noqa: ANN001
    """Add to ``weighted`` (index gid − 1) every user's count vector x_u scaled by
    min(1, clip / ‖x_u‖₂), where x_u holds c^power for each id the user has c times: user u's ids
    are ``gids[offsets[u]:offsets[u + 1]]``, in any order. ``powers[c]`` = c^power for small c;
    ``scratch`` (zeros, one slot per id) counts a user's ids and is left zero again. The same sums
    as sql/lm_counts/weighted.sql, up to the order of floating-point additions."""
    for u in range(len(offsets) - 1):
        start, stop = offsets[u], offsets[u + 1]
        if stop == start:
            continue
        for k in range(start, stop):
            scratch[gids[k]] += 1
        norm2 = 0.0
        for k in range(start, stop):  # each distinct id once: its count is negated once seen
            c = scratch[gids[k]]
            if c > 0:
                x = powers[c] if c < len(powers) else float(c) ** power
                norm2 += x * x
                scratch[gids[k]] = -c
        scale = min(1.0, clip / np.sqrt(norm2))
        for k in range(start, stop):
            c = -scratch[gids[k]]
            if c > 0:
                x = powers[c] if c < len(powers) else float(c) ** power
                weighted[gids[k] - 1] += x * scale
                scratch[gids[k]] = 0


def thresholded_release(
    domain: CountDomain, noisy: np.ndarray, threshold: float
) -> tuple[pl.DataFrame, pa.Table]:
    """The released rows (every unigram; longer n-grams at or above the threshold) and their table,
    sorted by (n, ngram) (the domain's higher orders end with the released k-grams it adds).
    Post-processing of the noisy vector (module docstring, step 5)."""
    released = domain.frame.with_columns(noisy_count=pl.Series(noisy)).filter(
        (pl.col("n") == 1) | (pl.col("noisy_count") >= threshold)
    )
    ones = released["n"] == 1
    released = pl.concat([released.filter(ones), released.filter(~ones).sort("n", "ngram")])
    table = pa.table(
        {
            "n": pa.array(released["n"].to_numpy().astype(np.int8)),
            "ngram": pa.array(released["ngram"].to_list(), pa.string()),
            "noisy_count": pa.array(released["noisy_count"].to_numpy(), pa.float64()),
        },
        schema=COUNTS_SCHEMA,
    )
    return released, table


@dataclass(frozen=True)
class CountRelease:
    """What :func:`release_counts` releases: ``rows`` (n, ngram, noisy_count; every unigram, the
    longer n-grams at or above ``threshold``) and ``table``, the same rows as
    ``released/lm_counts.parquet`` holds them; the Gaussian ``calibration`` (public parameters)."""

    rows: pl.DataFrame
    table: pa.Table
    calibration: GaussianCalibration
    threshold: float

    @property
    def sigma(self) -> float:
        return self.calibration.sigma

    def events(self, stage: str) -> list[PrivacyEvent]:
        """The ledger's record of the release (module docstring, "Privacy map"): the Gaussian
        mechanism on the l2-bounded count vector, at the snapped sensitivity. The selection and the
        verdict add none: they run on disjoint users (docs/lm_privacy.md, section 5)."""
        return [
            PrivacyEvent(
                stage=stage,
                mechanism="gaussian",
                sigma=self.calibration.sigma,
                sensitivity=self.calibration.snapped_sensitivity,
                note="noisy n-gram counts (l2-bounded per user); the weight selection runs on disjoint users",
            )
        ]


def release_counts(
    weighted: np.ndarray,
    domain: CountDomain,
    *,
    epsilon: float,
    delta: float,
    clip: float,
    threshold_sigmas: float,
    noise: NoiseSource,
) -> CountRelease:
    """The stage's one noise draw on the counts (module docstring, steps 4-5): the Gaussian
    mechanism on ``weighted`` (:func:`noisy_release`, l2-sensitivity ``clip``), then the rows
    kept at a threshold of ``threshold_sigmas``·σ (``lm_count_threshold``; post-processing)."""
    noisy, calibration = noisy_release(weighted, epsilon=epsilon, delta=delta, clip=clip, noise=noise)
    threshold = threshold_sigmas * calibration.sigma
    rows, table = thresholded_release(domain, noisy, threshold)
    return CountRelease(rows, table, calibration, threshold)
