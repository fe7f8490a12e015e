"""Scoring held-out users' sentences under back-off models, summed per user (stage ``lm_counts``).

The mixture-weight selection (:mod:`dpngram.mechanisms.lm_selection`) and the private-domain
verdict (:mod:`dpngram.mechanisms.lm_verdict`) both stream some users' sentences out of the run
schema, score every event (each token and ``</s>``) under a few models, turn each user's log10
probabilities into a short vector (``reduce``) and sum the vectors. :func:`held_out_user_sums` does
that once for both.

Scoring is :class:`dpngram.lm.backoff_scorer.BackoffScorer`: the models' own tables, every sentence
of a batch of users in one compiled pass per model, the probabilities KenLM gives for the same
model (to about 1e-6 in log10). Before, each model was written as an ARPA file, parsed by KenLM and
called once per sentence, which at 1M users needed worker processes (about 40 s of the full default
split) and on small corpora cost about 0.5 s a model to load (docs/engines.md, "Scale").

PRIVATE: the sentences and the sums stay in the run's process; only the caller's DP release of the
sums leaves it.

Owns: streaming and per-user grouping of held-out scoring.
Imports: dpngram.lm.backoff_scorer, dpngram.engines; numpy, polars, pyarrow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from dpngram.engines.base import Engine
from dpngram.lm.backoff_scorer import BackoffScorer

#: A batch's reduction: (log10 probabilities of the batch's events under every model but the
#: last, under the last, user bounds) -> the sum over the batch's users of a vector of fixed length
#: each (user u's events are ``[bounds[u], bounds[u + 1])``, never empty).
Reduce = Callable[[list[np.ndarray], np.ndarray, np.ndarray], np.ndarray]

#: Rows (sentences) fetched per batch: bounds the event arrays a batch scores (the selection holds
#: |grid| of them per public variant, a few hundred MB at 50,000 long sentences).
BATCH_ROWS = 10_000


def _user_chunks(wh: Engine, sql: str, params: dict[str, Any]) -> Iterator[pl.DataFrame]:
    """Frames (user_id, tokens) of whole users, in user order, for rows (user_id, tokens) in user
    order: a batch's last user is held back and joined to the next batch's rows."""
    held: pl.DataFrame | None = None
    for batch in wh.fetch_batches(sql, params, batch_rows=BATCH_ROWS):
        frame = pl.from_arrow(pa.Table.from_batches([batch])).rename({batch.schema.names[0]: "user_id"})
        frame = frame.select("user_id", pl.col(batch.schema.names[1]).alias("tokens"))
        if held is not None:
            frame = pl.concat([held, frame], how="vertical_relaxed")
        if frame.is_empty():
            held = frame
            continue
        others = frame["user_id"].reverse().ne_missing(frame["user_id"][-1]).arg_true()
        cut = frame.height - (int(others[0]) if others.len() else frame.height)
        held = frame.slice(cut)
        if cut:
            yield frame.slice(0, cut)
    if held is not None and not held.is_empty():
        yield held


def _score(model: BackoffScorer, rows: np.ndarray | None, flat: pl.Series, offsets: np.ndarray) -> np.ndarray:
    """``model``'s log10 probabilities of a batch's events (``rows``: the words' rows when every
    model shares one vocabulary, else None)."""
    return model.score(model.word_rows(flat) if rows is None else rows, offsets)


def held_out_user_sums(
    wh: Engine,
    sql: str,
    params: dict[str, Any],
    models: Sequence[BackoffScorer],
    reduce: Reduce,
    width: int,
    pool: Executor | None = None,
) -> tuple[np.ndarray, int]:
    """(Σ over users of ``reduce``, number of users) for the users of ``sql`` (rows (user_id,
    tokens) in user order; empty sentences are skipped, and so is a user without a non-empty one),
    scored under ``models`` (the last one is ``reduce``'s second argument). PRIVATE sums.
    ``pool``: an idle worker that scores every other model while this thread scores the rest (the
    compiled scoring releases the GIL; the sums are the same either way)."""
    total = np.zeros(width, dtype=np.float64)
    count = 0
    shared = all(m.vocabulary.equals(models[0].vocabulary) for m in models[1:])
    for chunk in _user_chunks(wh, sql, params):
        chunk = chunk.filter(pl.col("tokens").list.len() > 0)
        if chunk.is_empty():
            continue
        lengths = chunk["tokens"].list.len().cast(pl.Int64).to_numpy()
        sentence_offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=sentence_offsets[1:])
        flat = chunk["tokens"].explode()
        rows = models[0].word_rows(flat) if shared else None
        batch = (rows, flat, sentence_offsets)
        aside = {i: pool.submit(_score, m, *batch) for i, m in enumerate(models) if i % 2} if pool else {}
        scores = [aside[i].result() if i in aside else _score(m, *batch) for i, m in enumerate(models)]
        *publics, last = scores
        # each sentence's events (its tokens and </s>) follow its predecessor's: a user's events
        # are one slice
        event_ends = np.cumsum(lengths + 1)
        starts = chunk["user_id"].ne_missing(chunk["user_id"].shift(1)).arg_true().to_numpy()
        bounds = np.concatenate([[0], event_ends[np.append(starts[1:], lengths.size) - 1]])
        total += reduce(publics, last, bounds)
        count += bounds.size - 1
    return total, count
