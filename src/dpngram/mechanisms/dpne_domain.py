"""DPNE's level tables and the valid k-gram domain V_k, from released sets only.

The level tables of :mod:`dpngram.mechanisms.dpne` (``dpne_s{k}``: the released S_k with ids;
``dpne_occ{k}``: where its k-grams occur; ``dpne_users``: user numbering) and everything about
V_k = (S_1 x S_{k-1}) n (S_{k-1} x S_1) (``pruning='both'``) or S_{k-1} x S_1 (``'single'``):
candidate occurrences (Alg. 4 on positions), |V_k| exactly (:func:`count_valid_kgrams`) or
estimated (supplement Alg. 2, :func:`estimate_valid_kgrams`), a bijection range(|V_k|) <-> V_k
(:class:`ValidKgramIndex`) and the scalable variant's uniform draws from V_k minus supp(H_k)
(:func:`sample_spurious`). The domain is a function of released sets (post-processing of DP
outputs); only :func:`sample_spurious` reads the private histogram, to reject its support.
A k-gram is keyed by ``left_id * 2^32 + right_id`` (:data:`KEY_SHIFT`).

Owns: the level-table names and constants (``MAX_LEVEL``, ``KEY_SHIFT``, ``SENTENCE_STRIDE``,
``USER_BUCKETS``), :func:`install_vocabulary`, :func:`level1_occurrences`, :func:`number_users`,
:class:`LevelInputs`, the valid k-gram domain (:func:`build_candidates`, :func:`valid_sides`,
:func:`count_valid_kgrams`, :func:`estimate_valid_kgrams`, :class:`ValidKgramIndex`,
:func:`sample_spurious`).
Imports: dpngram.mechanisms.dpsu (the vocabulary table's name), dpngram.engines, dpngram.core;
numpy, pyarrow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.mechanisms.dpsu import VOCABULARY_TABLE

MAX_LEVEL = 12


KEY_SHIFT = 32  # key = left_id * 2^32 + right_id; ids are positive INTEGERs (< 2^31)


#: loc = sentence_no * stride + position (sentences < 2^24 tokens). A parameter of the SQL, except
#: in the view sql/dpne/candidates_level2.sql, which takes none and spells it 16777216.
SENTENCE_STRIDE = 1 << 24


#: Hash buckets of the user/sentence numbering (:func:`number_users`). Users are ranked inside
#: their bucket (a window PARTITION BY bucket: about users / USER_BUCKETS rows per window
#: partition, and the buckets spread over the engine's partitions); the only global window runs
#: over the per-bucket offsets table, at most USER_BUCKETS rows. 2^14 keeps the offsets table
#: tiny (< 1 MB, broadcast to every task on Spark) while giving a cluster with thousands of
#: shuffle partitions several buckets per partition (balanced tasks); at 10^8 users a window
#: partition holds ~6k users.
USER_BUCKETS = 1 << 14


MAX_DRAW_BATCH = 1 << 22  # bounds the sampler's memory per rejection round


Pruning = Literal["both", "single"]


def level_stage(k: int) -> str:
    return f"dpne.k{k}"


def level_table(k: int) -> str:
    return f"dpne_s{k}"


def occurrence_table(k: int) -> str:
    return f"dpne_occ{k}"


def check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or not 2 <= k <= MAX_LEVEL:
        raise ConfigError(f"k: must be an integer in 2..{MAX_LEVEL} (got {k!r})")


# ----------------------------------------------------------------------------------------------
# Level tables
# ----------------------------------------------------------------------------------------------
def install_vocabulary(wh: Engine, schema: str, items_table: str = VOCABULARY_TABLE) -> int:
    """Build the level-1 tables from the released S_1 in ``{schema}.{items_table}(item)``:
    ``dpne_users`` (integer user ids) and ``dpne_s1`` (token ids). Returns |S_1|. The positions of
    S_1's tokens (``dpne_occ1``) are built only where a level needs them
    (:func:`level1_occurrences`: single-side pruning); both-side level 2 reads its pairs from the
    sentences (sql/dpne/candidates_level2.sql)."""
    drop_tables(wh, schema, occurrence_table(1))  # tables of an earlier attempt are stale now
    for k in range(2, MAX_LEVEL + 1):
        drop_tables(wh, schema, level_table(k), occurrence_table(k), f"dpne_cand{k}", f"dpne_hist{k}")
    number_users(wh, schema, "dpne_users")
    wh.execute(load_sql("dpne/level1_table", schema=schema, target=level_table(1), released=items_table))
    return level_size(wh, schema, 1)


def level1_occurrences(wh: Engine, schema: str) -> str:
    """``dpne_occ1(uid, loc, gid)``: every position whose token is in S_1 (other tokens have no
    row, so they break n-grams), built once from ``dpne_users`` and ``dpne_s1``."""
    target = occurrence_table(1)
    if not table_exists(wh, schema, target):
        _from_sentences(wh, schema, "dpne/occurrences_level1", target)
    return target


def _from_sentences(wh: Engine, schema: str, statement: str, target: str) -> None:
    """Run a statement that reads the sentences' token positions (dpne/_sentence_positions.sql)
    with ``dpne_users`` and S_1 (``dpne_s1``) into ``target``."""
    wh.execute(
        load_sql(statement, schema=schema, target=target, users="dpne_users", vocabulary=level_table(1)),
        {"sentence_stride": SENTENCE_STRIDE},
    )


def number_users(
    wh: Engine, schema: str, target: str, buckets: int = USER_BUCKETS, sentences: str = "sentences"
) -> None:
    """``{schema}.{target}(user_id, uid, first_sentence)``: every user of ``{schema}.{sentences}``
    with a dense integer id ``uid`` = 1..N and the number of sentences of the users numbered
    before it (so its sentences are numbered ``first_sentence + 1, ...``), computed without a
    global window, which Spark would run in one partition (docs/engines.md "Numbering without a
    global window"): per-user sentence counts with a hash bucket (sql/numbering/sentences.sql), a
    per-bucket offsets table, then ranks inside each bucket (sql/numbering/users.sql).
    Deterministic on one engine; the ids differ across engines (so does the hash), which is fine:
    they are private keys that never leave the run schema. Shared by the DPNE level tables and
    TrieHH (``uidx = uid - 1``)."""
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
        raise ValueError(f"buckets: must be a positive integer (got {buckets!r})")
    per_user = f"{target}_per_user"
    sql = load_sql("numbering/sentences", schema=schema, target=per_user, sentences=sentences)
    wh.execute(sql, {"buckets": buckets})
    wh.execute(load_sql("numbering/users", schema=schema, target=target, per_user=per_user))
    wh.drop(schema, per_user, f"{target}_buckets")


def level_size(wh: Engine, schema: str, k: int) -> int:
    return int(_scalar(wh, load_sql("dpne/level_size", schema=schema, level=level_table(k))))


def _scalar(wh: Engine, sql: str, params: dict[str, Any] | None = None) -> Any:
    """First value of a one-row query (:meth:`Engine.fetch_scalar`)."""
    return wh.fetch_scalar(sql, params)


def _object_type(wh: Engine, schema: str, name: str) -> str | None:
    return wh.object_type(schema, name)


def table_exists(wh: Engine, schema: str, table: str) -> bool:
    return _object_type(wh, schema, table) is not None


def drop_tables(wh: Engine, schema: str, *tables: str) -> None:
    """Drop private working tables or views (whichever each name is)."""
    wh.drop(schema, *tables)


def build_candidates(wh: Engine, schema: str, k: int, pruning: Pruning) -> str:
    """``dpne_cand{k}(uid, loc, key)``: occurrences of valid k-grams (Alg. 4 on positions); a view
    over the sentences for both-side level 2 (sql/dpne/candidates_level2.sql), a table otherwise."""
    target = f"dpne_cand{k}"
    if pruning == "both" and k == 2:
        # a view (no prepared parameters: it spells SENTENCE_STRIDE); its readers compute it
        wh.execute(
            load_sql(
                "dpne/candidates_level2",
                schema=schema,
                target=target,
                users="dpne_users",
                vocabulary=level_table(1),
            )
        )
    elif pruning == "both":
        wh.execute(
            load_sql("dpne/candidates_both", schema=schema, target=target, previous=occurrence_table(k - 1))
        )
    else:
        unigrams = level1_occurrences(wh, schema)  # also level 2's previous positions
        wh.execute(
            load_sql(
                "dpne/candidates_single",
                schema=schema,
                target=target,
                previous=occurrence_table(k - 1),
                unigrams=unigrams,
            ),
            {"offset": k - 1},
        )
    return target


def valid_sides(wh: Engine, schema: str, k: int, pruning: Pruning) -> tuple[str, str]:
    left, right = f"dpne_left{k}", f"dpne_right{k}"
    name = "dpne/valid_sides_both" if pruning == "both" else "dpne/valid_sides_single"
    wh.execute(
        load_sql(
            name,
            schema=schema,
            left_side=left,
            right_side=right,
            previous=level_table(k - 1),
            unigrams=level_table(1),
        )
    )
    return left, right


def count_valid_kgrams(wh: Engine, schema: str, k: int, pruning: Pruning) -> int:
    """|V_k| exactly, from the released S_{k-1} and S_1 only (post-processing of DP outputs):
    both-side sum_o #(S_{k-1} ending with o) * #(S_{k-1} starting with o) over (k-2)-gram
    overlaps o (|S_1|^2 for k = 2); single-side |S_{k-1}| |S_1|."""
    left, right = valid_sides(wh, schema, k, pruning)
    return int(_scalar(wh, load_sql("dpne/valid_count", schema=schema, left_side=left, right_side=right)))


def estimate_valid_kgrams(
    wh: Engine, schema: str, k: int, pruning: Pruning, sampling_probability: float, noise: NoiseSource
) -> int:
    """EstimateValidKgrams (supplement Alg. 2), for comparison with the exact count.

    Draws N = ceil(p |S_1| |S_{k-1}|) pairs (x in S_1, w in S_{k-1}) uniformly and counts those
    for which x.w is valid (x + the first k-2 tokens of w is in S_{k-1}; w's last token is in
    S_1 by construction); returns ceil(count / p). Single-side: every pair is valid, so the
    estimate is |S_1| |S_{k-1}| (returned directly)."""
    if not 0 < sampling_probability <= 1:
        raise ConfigError(f"sampling_probability: must be in (0, 1] (got {sampling_probability})")
    n1 = level_size(wh, schema, 1)
    prev = _level_scan(wh, schema, k - 1)
    if pruning == "single" or k == 2 or n1 == 0 or prev["gid"].size == 0:
        return int(n1 * prev["gid"].size)
    draws = math.ceil(sampling_probability * n1 * prev["gid"].size)
    first = noise.integers(1, n1 + 1, draws)  # token ids are 1..|S_1|
    w = noise.integers(0, prev["gid"].size, draws)
    # x.w valid <=> the (k-1)-gram (x, prefix_{k-2}(w)) is in S_{k-1}; it is identified by its
    # first token and its suffix (k-2)-gram id r.
    present = (prev["first_tid"].astype(np.int64) << KEY_SHIFT) | prev["r"].astype(np.int64)
    wanted = (first << KEY_SHIFT) | prev["l"][w].astype(np.int64)
    count = int(np.isin(wanted, present).sum())
    return math.ceil(count / sampling_probability)


def _level_scan(wh: Engine, schema: str, k: int) -> dict[str, np.ndarray]:
    return wh.fetch_numpy(load_sql("dpne/level_scan", schema=schema, level=level_table(k)))


class ValidKgramIndex:
    """A bijection between range(|V_k|) and V_k, from the released sides of the overlap join
    (left grams grouped by suffix overlap o, right grams by prefix overlap o).

    Index j falls in overlap o's block (blocks ordered by o, block size n_L(o) n_R(o)); inside
    it, j - start(o) = a n_R(o) + b picks the a-th left and b-th right gram. A uniform j is
    therefore a uniform valid k-gram: the overlap is chosen with probability proportional to
    its product count, then a uniform left and a uniform right gram with that overlap."""

    def __init__(
        self, left_overlap: np.ndarray, left_id: np.ndarray, right_overlap: np.ndarray, right_id: np.ndarray
    ) -> None:
        self.left_id = np.asarray(left_id, dtype=np.int64)
        self.right_id = np.asarray(right_id, dtype=np.int64)
        lo, l_start, l_count = np.unique(np.asarray(left_overlap), return_index=True, return_counts=True)
        ro, r_start, r_count = np.unique(np.asarray(right_overlap), return_index=True, return_counts=True)
        _, li, ri = np.intersect1d(lo, ro, assume_unique=True, return_indices=True)
        self.l_start, self.l_count = l_start[li].astype(np.int64), l_count[li].astype(np.int64)
        self.r_start, self.r_count = r_start[ri].astype(np.int64), r_count[ri].astype(np.int64)
        self.block = self.l_count * self.r_count
        self.end = np.cumsum(self.block)
        self.size = int(self.end[-1]) if self.end.size else 0

    def keys(self, index: np.ndarray) -> np.ndarray:
        """Keys (left_id * 2^32 + right_id) of the valid k-grams at positions ``index``."""
        index = np.asarray(index, dtype=np.int64)
        block = np.searchsorted(self.end, index, side="right")
        offset = index - (self.end[block] - self.block[block])
        a, b = np.divmod(offset, self.r_count[block])
        left = self.left_id[self.l_start[block] + a]
        right = self.right_id[self.r_start[block] + b]
        return (left << KEY_SHIFT) | right


def valid_kgram_index(wh: Engine, schema: str, inputs: LevelInputs) -> ValidKgramIndex:
    """The bijection range(|V_k|) <-> V_k for a prepared level (built from released sets only)."""
    return ValidKgramIndex(*_side(wh, schema, inputs.left), *_side(wh, schema, inputs.right))


def _side(wh: Engine, schema: str, side: str) -> tuple[np.ndarray, np.ndarray]:
    cols = wh.fetch_numpy(load_sql("dpne/valid_side_scan", schema=schema, side=side))
    return np.asarray(cols["overlap"]), np.asarray(cols["id"])


def sample_spurious(
    wh: Engine,
    schema: str,
    index: ValidKgramIndex,
    histogram: str,
    count: int,
    noise: NoiseSource,
    support_size: int,
) -> np.ndarray:
    """``count`` DISTINCT keys drawn uniformly from V_k minus supp(H_k) (supplement Alg. 1).

    Rejection sampling, batched but equivalent to the sequential loop: i.i.d. uniform draws from
    V_k (every draw is valid by construction of ``index``), processed in draw order; a draw is
    accepted iff it is not in supp(H_k) (checked against the private histogram, not against the
    release) and not accepted before. ``support_size`` (private) only sizes the batches."""
    if count <= 0:
        return np.empty(0, dtype=np.int64)
    free = index.size - support_size
    if count > free:
        raise RuntimeError("spurious sample larger than V_k minus supp(H_k) (internal error)")
    chosen = np.empty(0, dtype=np.int64)
    view = "dpne_spurious_draws"
    while chosen.size < count:
        need = count - chosen.size
        batch = min(int(math.ceil(need * 1.25 * index.size / free)) + 16, MAX_DRAW_BATCH)
        keys = index.keys(noise.integers(0, index.size, batch))
        draws = pa.table({"draw": np.arange(batch, dtype=np.int64), "item": keys})
        with wh.registered(**{view: draws}):
            outside = wh.fetch_numpy(
                load_sql("dpne/support_exclude", schema=schema, drawn=view, histogram=histogram)
            )["draw"]
        keys = keys[np.asarray(outside, dtype=np.int64)]  # draw order kept
        _, first = np.unique(keys, return_index=True)
        keys = keys[np.sort(first)]
        keys = keys[~np.isin(keys, chosen)]
        chosen = np.concatenate([chosen, keys[:need]])
    return chosen


@dataclass(frozen=True)
class LevelInputs:
    """Private working tables of one level (names in the run schema) and the public |V_k|."""

    k: int
    pruning: str
    left: str
    right: str
    candidates: str
    source: str
    histogram: str
    valid: int
    previous: int
