"""Scoring held-out users' sentences under KenLM models, summed per user (stage ``lm_counts``).

The mixture-weight selection and the private-domain verdict (:mod:`dpngram.mechanisms.lm_counts`)
both stream some users' sentences out of the run schema, score every event (each token and
``</s>``) under a few KenLM models, turn each user's log10 probabilities into a short vector
(``reduce``) and sum the vectors. :func:`held_out_user_sums` does that once for both.

Scoring is Python calling KenLM per sentence and model: at 1M users (100k selection users, four
models) it was about 86 s of the full default split on one core. Once more than
:data:`PARALLEL_AFTER_USERS` users have streamed, the rest are scored by worker processes
(``spawn``; each loads the models once) in tasks of :data:`USERS_PER_TASK` users, while the
parent keeps reading; smaller runs (e.g. SOTU's 1,300 selection users) never start a pool.
The sum is the same up to floating-point rounding (tasks are summed in submission order, so a
run is deterministic for a given number of workers; tests/test_lm_heldout_scoring.py).

PRIVATE: the sentences and the sums stay in the run's own process tree (the workers return
only per-task sums); only the caller's DP release of the sums leaves it.

Owns: streaming, per-user grouping and the worker pool of held-out scoring.
Imports: dpngram.lm.evaluate (the quiet KenLM loader), dpngram.engines; numpy.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from dpngram.engines.base import Engine

#: Users scored in-process before the worker pool starts (no pool for small held-out sets).
PARALLEL_AFTER_USERS = 20_000

#: Users per task sent to a worker.
USERS_PER_TASK = 2_000

#: A user's reduction: (log10 probabilities under every model but the last, under the last) ->
#: a vector of fixed length. Must be picklable (a module-level function or a functools.partial).
Reduce = Callable[[list[np.ndarray], np.ndarray], np.ndarray]


def default_workers() -> int:
    """Worker processes for scoring: the machine's cores, at most 4 (1: in-process only)."""
    return max(1, min(4, os.cpu_count() or 1))


def user_logprobs(models: Sequence[Any], sentences: Sequence[str]) -> tuple[list[np.ndarray], np.ndarray]:
    """log10 probabilities of every event of ``sentences`` (space-joined tokens) under each model:
    (arrays of all models but the last, array of the last)."""
    *publics, last = models
    p_bufs: list[list[float]] = [[] for _ in publics]
    q_buf: list[float] = []
    for text in sentences:
        for model, buf in zip(publics, p_bufs, strict=True):
            buf.extend(s[0] for s in model.full_scores(text, bos=True, eos=True))
        q_buf.extend(s[0] for s in last.full_scores(text, bos=True, eos=True))
    return [np.array(b) for b in p_bufs], np.array(q_buf)


def _users(wh: Engine, sql: str, params: dict[str, Any]) -> Iterator[list[str]]:
    """Each user's non-empty sentences (space-joined), for rows (user_id, tokens) in user order."""
    current: Any = None
    texts: list[str] = []
    for batch in wh.fetch_batches(sql, params, batch_rows=50_000):
        ids = batch.column(0).to_pylist()
        tokens = batch.column(1).to_pylist()
        for uid, sentence in zip(ids, tokens, strict=True):
            if uid != current:
                if texts:
                    yield texts
                current, texts = uid, []
            if sentence:
                texts.append(" ".join(sentence))
    if texts:
        yield texts


_WORKER_MODELS: list[Any] = []


def _load_worker_models(paths: list[str]) -> None:
    from dpngram.lm.evaluate import load_model

    _WORKER_MODELS[:] = [load_model(p) for p in paths]


def _task_sum(users: list[list[str]], reduce: Reduce, width: int) -> np.ndarray:
    total = np.zeros(width, dtype=np.float64)
    for sentences in users:
        publics, last = user_logprobs(_WORKER_MODELS, sentences)
        total += reduce(publics, last)
    return total


def held_out_user_sums(
    wh: Engine,
    sql: str,
    params: dict[str, Any],
    model_paths: Sequence[Path],
    reduce: Reduce,
    width: int,
    *,
    workers: int | None = None,
    parallel_after: int = PARALLEL_AFTER_USERS,
    users_per_task: int = USERS_PER_TASK,
    loaded: dict[str, Any] | None = None,
) -> tuple[np.ndarray, int]:
    """(Σ over users of ``reduce``, number of users) for the users of ``sql`` (rows (user_id,
    tokens) in user order; a user without a non-empty sentence is skipped), scored under the
    models at ``model_paths`` (the last one is ``reduce``'s second argument). PRIVATE sums.

    ``loaded``: KenLM models by path, shared by the calls of one stage (the selection and the
    verdict score the same files; loading an ARPA file of the public model takes ~0.5 s). Filled
    here; emptied when the scoring moves to workers, so the parent holds no models meanwhile."""
    from dpngram.lm.evaluate import load_model

    workers = default_workers() if workers is None else workers
    paths = [str(p) for p in model_paths]
    loaded = {} if loaded is None else loaded
    for p in paths:
        if p not in loaded:
            loaded[p] = load_model(p)
    models = [loaded[p] for p in paths]
    total = np.zeros(width, dtype=np.float64)
    count = 0
    users = _users(wh, sql, params)
    for sentences in users:
        publics, last = user_logprobs(models, sentences)
        total += reduce(publics, last)
        count += 1
        if workers > 1 and count >= parallel_after:
            break
    else:
        return total, count
    del models  # the rest is scored by the workers
    loaded.clear()
    context = multiprocessing.get_context("spawn")
    pending: deque[Future[np.ndarray]] = deque()
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_load_worker_models, initargs=(paths,)
    ) as pool:
        task: list[list[str]] = []
        for sentences in users:
            task.append(sentences)
            count += 1
            if len(task) == users_per_task:
                pending.append(pool.submit(_task_sum, task, reduce, width))
                task = []
                while len(pending) > 2 * workers:  # bounded: at most a few tasks in flight
                    total += pending.popleft().result()
        if task:
            pending.append(pool.submit(_task_sum, task, reduce, width))
        while pending:
            total += pending.popleft().result()
    return total, count
