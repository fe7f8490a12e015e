"""BayesianDP's per-user bounded trigram counts (Algorithm 1 lines 1-4, with the cap W): the
private input of :mod:`dpngram.mechanisms.bayes`, which owns the mechanism around it.

Per user, over the trigram space V: each trigram's count clamped to C, at most W distinct trigrams
(the W with the smallest keyed hash; ``sql/bayes/_bounded_counts.sql`` states the rule); then
c (the summed bounded counts) and N (the users holding each trigram). Three ways to the same
numbers: from an occurrence table (public tuning's pseudo-users, :func:`bounded_user_counts`), from
the run's sentences with integer keys into a per-user table (:func:`private_user_counts`: Spark, and
the NOT-DP brute-force calibration, which reads the table), or, on the DuckDB engine, each user's
matched trigram ids streamed to this process and bounded here (:func:`private_count_sums`).
Sensitivity argument: docs/bayes_sensitivity.md.

Owns: the per-user bounding and its working tables (V, V's words, the users' integer ids).
Imports: dpngram.engines, dpngram.core, dpngram.mechanisms.dpne_domain (the user numbering);
numba, numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from dpngram.core.errors import ConfigError
from dpngram.engines.base import Engine, list_arrays
from dpngram.engines.sql import load_sql
from dpngram.mechanisms.dpne_domain import number_users

#: The sentence markers and the unknown word, as V's trigrams spell them.
BOS, EOS, UNK = "<s>", "</s>", "<unk>"


SPACE_WORDS = "bayes_space_words"


USERS = "bayes_users"


UID_SENTENCES = "bayes_uid_sentences"


VOCABULARY_TABLE = "bayes_vocabulary"


SPACE = "bayes_space"


USER_COUNTS = "bayes_user_counts"


#: Bits per word id in V's integer trigram keys (sql/bayes/private_user_counts.sql): three ids of
#: 21 bits fill a BIGINT, so V may hold up to 2^21 − 1 distinct words (checked: a ConfigError
#: beyond). With the run's DP vocabulary V's words are that vocabulary's and the markers.
WORD_ID_BITS = 21


def bounded_user_counts(
    wh: Engine, schema: str, occurrences: str, target: str, *, C: int, W: int, salt: int
) -> None:
    """Per-user clamped (≤ C) counts of at most W trigrams of V (``sql/bayes/user_counts.sql``)."""
    wh.execute(
        load_sql("bayes/user_counts", schema=schema, target=target, occurrences=occurrences, space=SPACE),
        {"clip_count": int(C), "max_trigrams": int(W), "salt": int(salt)},
    )


def private_user_counts(
    wh: Engine, schema: str, sentences: str, target: str, *, map_unk: bool, C: int, W: int, salt: int
) -> None:
    """The same table :func:`bounded_user_counts` makes from :func:`trigram_occurrences` of
    ``sentences``, straight from the sentences with integer keys (``sql/bayes/private_user_counts.sql``;
    its ``user_id`` is the run-local integer id of ``{schema}.bayes_users``). Needs V
    (:func:`build_space`) and the vocabulary table."""
    identifiers, params = _private_count_inputs(wh, schema, sentences, map_unk=map_unk)
    wh.execute(
        load_sql("bayes/private_user_counts", target=target, **identifiers),
        {**params, "clip_count": int(C), "max_trigrams": int(W), "salt": int(salt)},
    )


def _private_count_inputs(
    wh: Engine, schema: str, sentences: str, *, map_unk: bool
) -> tuple[dict[str, str], dict[str, Any]]:
    """The working tables (V's words, the integer user ids) and the identifiers and parameters of
    ``sql/bayes/private_user_counts.sql`` and ``sql/bayes/user_tid_lists.sql``."""
    wh.execute(load_sql("bayes/space_words", schema=schema, target=SPACE_WORDS, space=SPACE))
    words = wh.fetch_numpy(f"SELECT word, wid FROM {schema}.{SPACE_WORDS}")
    ids = {w: int(i) for w, i in zip(words["word"], words["wid"], strict=True) if w in (BOS, EOS, UNK)}
    if len(words["wid"]) >= 1 << WORD_ID_BITS:
        raise ConfigError(
            f"bayes_vocab_size: V's trigrams have more distinct words than the {(1 << WORD_ID_BITS) - 1:,} "
            "its integer trigram keys hold; lower bayes_vocab_size"
        )
    number_users(wh, schema, USERS, sentences=sentences)
    wh.execute(
        load_sql("bayes/uid_sentences", schema=schema, target=UID_SENTENCES, source=sentences, users=USERS)
    )
    identifiers = {
        "schema": schema,
        "source": UID_SENTENCES,
        "vocabulary": VOCABULARY_TABLE,
        "words": SPACE_WORDS,
        "space": SPACE,
    }
    params = {
        "map_unk": bool(map_unk),
        "word_shift": 1 << WORD_ID_BITS,
        "bos_id": ids.get(BOS, 0),
        "eos_id": ids.get(EOS, 0),
        "unk_id": ids.get(UNK, 0) if map_unk else 0,
    }
    return identifiers, params


def private_count_sums(
    wh: Engine, schema: str, sentences: str, size: int, *, map_unk: bool, C: int, W: int, salt: int
) -> tuple[np.ndarray, np.ndarray]:
    """(c, N) over V (index tid − 1) of the per-user bounded counts of ``sentences``: what
    :func:`aggregate_counts` gives over :func:`private_user_counts`'s table, without the table
    (PRIVATE: never logged or released). The DuckDB engine runs in this process: each user's
    matched trigram ids (``sql/bayes/user_tid_lists.sql``) are streamed and bounded by
    :func:`_sum_bounded_trigram_counts` (docs/engines.md, "bayes: bounding each user's trigrams
    in the process"); any other engine (Spark: the lists would travel to the driver) builds the
    table and aggregates it in SQL."""
    if wh.name != "duckdb":
        private_user_counts(wh, schema, sentences, USER_COUNTS, map_unk=map_unk, C=C, W=W, salt=salt)
        return aggregate_counts(wh, schema, USER_COUNTS, size)
    identifiers, params = _private_count_inputs(wh, schema, sentences, map_unk=map_unk)
    keys = wh.fetch_numpy(
        load_sql("bayes/trigram_sort_keys", schema=schema, space=SPACE), {"salt": int(salt)}
    )
    sort_keys = np.zeros(size, dtype=np.uint64)
    sort_keys[np.asarray(keys["tid"], dtype=np.int64) - 1] = np.asarray(keys["sort_key"], dtype=np.uint64)
    total = np.zeros(size, dtype=np.float64)
    users = np.zeros(size, dtype=np.float64)
    scratch = np.zeros(size + 1, dtype=np.int64)
    distinct = np.zeros(size + 1, dtype=np.int64)
    for batch in wh.fetch_batches(load_sql("bayes/user_tid_lists", **identifiers), params, USER_BATCH):
        offsets, tids = list_arrays(batch.column(0))
        _sum_bounded_trigram_counts(offsets, tids, sort_keys, int(C), int(W), scratch, distinct, total, users)
    return total, users


#: Users per streamed batch of :func:`private_count_sums` (at most a few hundred ids a user).
USER_BATCH = 1 << 16


@njit(cache=True, nogil=True)
def _sum_bounded_trigram_counts(offsets, tids, sort_keys, C, W, scratch, distinct, total, users):  # noqa: ANN001
    """Add every user's bounded counts to ``total`` (c) and ``users`` (N), index tid − 1: user u's
    trigram occurrences are ``tids[offsets[u]:offsets[u + 1]]`` (any order). The rule of
    ``sql/bayes/_bounded_counts.sql``: a user over W distinct trigrams keeps the W with the smallest
    ``sort_keys[tid − 1]``, ties by tid; each kept count is clamped to C. ``scratch`` (zeros, one
    slot per tid) counts a user's trigrams and is left zero again; ``distinct`` is working space."""
    for u in range(len(offsets) - 1):
        n = 0
        for k in range(offsets[u], offsets[u + 1]):
            t = tids[k]
            if scratch[t] == 0:
                distinct[n] = t
                n += 1
            scratch[t] += 1
        kept = distinct[:n]
        if n > W:
            by_tid = np.sort(kept)  # a stable sort by key below then breaks ties by tid
            kept = by_tid[np.argsort(sort_keys[by_tid - 1], kind="mergesort")[:W]]
        for t in kept:
            total[t - 1] += min(scratch[t], C)
            users[t - 1] += 1.0
        for k in range(n):
            scratch[distinct[k]] = 0


def aggregate_counts(wh: Engine, schema: str, user_counts: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(c, N) as arrays over V (index tid − 1). PRIVATE: never logged or released."""
    cols = wh.fetch_numpy(load_sql("bayes/aggregate", schema=schema, user_counts=user_counts))
    total = np.zeros(size, dtype=np.float64)
    users = np.zeros(size, dtype=np.float64)
    tid = np.asarray(cols["tid"], dtype=np.int64) - 1
    total[tid] = np.asarray(cols["total_count"], dtype=np.float64)
    users[tid] = np.asarray(cols["users"], dtype=np.float64)
    return total, users
