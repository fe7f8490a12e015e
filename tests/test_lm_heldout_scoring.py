"""Held-out scoring (dpngram.mechanisms.heldout_scoring): the per-user sums equal a direct
computation with KenLM, whatever the batches the rows arrive in.

The models are two small hand-written ARPA files (unigram + bigram, different probabilities), so
the expected values come from KenLM itself, not from the code under test. Tolerance: the values are
written with at most two decimals; KenLM holds them as 32-bit floats (relative error 2^-24), the
scorer as 64-bit ones, so an event's log10 p differs by < 1e-7 and a user's reduced vector (means
and clipped differences, in nats) by < 1e-6; the sums over 57 users by < 1e-4."""

from __future__ import annotations

import math
import random
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dpngram.engines.duckdb import Warehouse
from dpngram.lm.arpa_file import read_arpa
from dpngram.lm.backoff_scorer import BackoffScorer
from dpngram.lm.evaluate import load_model
from dpngram.mechanisms import heldout_scoring, lm_selection, lm_verdict
from dpngram.mechanisms.heldout_scoring import held_out_user_sums

TOLERANCE = 1e-4
WORDS = ["a", "b", "c", "d"]


def write_arpa(path: Path, unigram_log10: dict[str, float], bigram: tuple[str, str, float]) -> Path:
    lines = ["\\data\\", f"ngram 1={len(unigram_log10) + 3}", "ngram 2=1", "", "\\1-grams:"]
    lines += ["-1.0\t<unk>\t0", "-99\t<s>\t-0.3", "-0.9\t</s>\t0"]
    lines += [f"{p}\t{w}\t-0.2" for w, p in unigram_log10.items()]
    lines += ["", "\\2-grams:", f"{bigram[2]}\t{bigram[0]} {bigram[1]}", "", "\\end\\", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("heldout_models")
    return [
        write_arpa(root / "p.arpa", {"a": -0.5, "b": -0.7, "c": -1.1, "d": -1.3}, ("a", "b", -0.2)),
        write_arpa(root / "p2.arpa", {"a": -0.6, "b": -0.6, "c": -1.0, "d": -1.5}, ("c", "d", -0.4)),
        write_arpa(root / "q.arpa", {"a": -0.8, "b": -0.5, "c": -0.9, "d": -1.2}, ("b", "a", -0.3)),
    ]


@pytest.fixture(scope="module")
def users() -> dict[str, list[list[str]]]:
    rng = random.Random(7)
    out: dict[str, list[list[str]]] = {}
    for u in range(57):
        sentences = [
            [rng.choice(WORDS + ["zz"]) for _ in range(rng.randint(1, 6))] for _ in range(rng.randint(1, 4))
        ]
        if u % 10 == 3:
            sentences.append([])  # an empty sentence is skipped
        out[f"user-{u:03d}"] = sentences
    out["user-empty"] = [[]]  # no event: not counted
    return out


@pytest.fixture
def warehouse(users):
    rows = [(u, s) for u, sentences in users.items() for s in sentences]
    table = pa.table(
        {"user_id": [u for u, _ in rows], "tokens": [s for _, s in rows]},
        schema=pa.schema([("user_id", pa.string()), ("tokens", pa.list_(pa.string()))]),
    )
    with Warehouse(":memory:") as wh:
        with wh.registered(heldout_rows=table):
            wh.execute("CREATE TABLE main.held AS SELECT * FROM heldout_rows")
        yield wh


SQL = "SELECT user_id, tokens FROM main.held ORDER BY user_id"


def expected(users, paths, reduce) -> tuple[np.ndarray, int]:
    """Σ reduce over users with at least one event, scored directly with KenLM."""
    loaded = [load_model(p) for p in paths]
    total, count = None, 0
    for _, sentences in sorted(users.items()):
        texts = [" ".join(s) for s in sentences if s]
        if not texts:
            continue
        *publics, last = loaded
        p = [np.array([x[0] for t in texts for x in m.full_scores(t, bos=True, eos=True)]) for m in publics]
        q = np.array([x[0] for t in texts for x in last.full_scores(t, bos=True, eos=True)])
        v = reduce(p, q)
        total = v if total is None else total + v
        count += 1
    return total, count


def scorers(paths: list[Path]) -> list[BackoffScorer]:
    return [BackoffScorer.from_model(read_arpa(p)[1]) for p in paths]


class BatchedRows:
    """An engine whose query result arrives in batches of ``rows`` rows (so users span batches)."""

    def __init__(self, warehouse: Warehouse, rows: int) -> None:
        self.warehouse, self.rows = warehouse, rows
        self.batches = 0

    def fetch_batches(self, sql, params=None, batch_rows=0):
        table = self.warehouse.con.sql(sql).arrow().read_all()
        for batch in table.to_batches(max_chunksize=self.rows):
            self.batches += 1
            yield batch


@pytest.mark.parametrize("batch_rows", [None, 1, 3, 7])
def test_selection_sums_match_direct_scoring_in_any_batches(warehouse, users, models, batch_rows):
    weights = (0.0, 0.3, 0.9)
    want, want_count = expected(users, models, partial(lm_selection.selection_user_vector, weights=weights))
    engine = warehouse if batch_rows is None else BatchedRows(warehouse, batch_rows)
    reduce = partial(lm_selection.selection_batch_sum, weights=weights)
    got, count = held_out_user_sums(engine, SQL, {}, scorers(models), reduce, 2 * len(weights))
    assert count == want_count == len(users) - 1
    assert got == pytest.approx(want, rel=0, abs=TOLERANCE)
    assert not np.allclose(got[:3], got[3:])  # the two public variants really differ
    if batch_rows is not None:
        assert engine.batches > len(users) / batch_rows / 4  # many batches, users cut across them


def test_a_worker_thread_scoring_half_the_models_changes_no_sum(warehouse, users, models):
    """With ``pool``, the worker scores models 1, 3, ... of each batch; every model's scores still
    go to the reduction in the models' order (a swap would change the λ scores' order)."""
    weights = (0.0, 0.3, 0.9)
    reduce = partial(lm_selection.selection_batch_sum, weights=weights)
    engine = BatchedRows(warehouse, 3)
    alone, count = held_out_user_sums(engine, SQL, {}, scorers(models), reduce, 2 * len(weights))
    with ThreadPoolExecutor(1) as pool:
        shared, shared_count = held_out_user_sums(
            engine, SQL, {}, scorers(models), reduce, 2 * len(weights), pool
        )
    assert shared_count == count
    assert np.array_equal(shared, alone)
    swapped = [scorers(models)[i] for i in (1, 0, 2)]
    other, _ = held_out_user_sums(engine, SQL, {}, swapped, reduce, 2 * len(weights))
    assert not np.array_equal(other, alone)


def test_verdict_sums_match_direct_scoring(warehouse, users, models):
    def contribution(publics, released):
        (public,) = publics
        return lm_verdict.verdict_user_contribution(public, released)

    want, want_count = expected(users, models[:2], contribution)
    reduce = lm_verdict.verdict_batch_sum
    got, _ = held_out_user_sums(BatchedRows(warehouse, 4), SQL, {}, scorers(models[:2]), reduce, 4)
    assert got == pytest.approx(want, rel=0, abs=TOLERANCE)
    assert math.isclose(got[3], lm_verdict.VERDICT_LOSS_CLIP * want_count)


def test_a_user_with_no_event_and_an_empty_result_count_nothing(warehouse, models):
    reduce = partial(lm_selection.selection_batch_sum, weights=(0.5,))
    total, count = held_out_user_sums(
        warehouse,
        "SELECT user_id, tokens FROM main.held WHERE user_id = 'user-empty'",
        {},
        scorers(models[:2]),
        reduce,
        1,
    )
    assert count == 0 and total.tolist() == [0.0]
    total, count = held_out_user_sums(
        warehouse, "SELECT user_id, tokens FROM main.held WHERE false", {}, scorers(models[:2]), reduce, 1
    )
    assert count == 0 and total.tolist() == [0.0]


def test_batches_are_bounded(monkeypatch, warehouse, users, models):
    """The rows are fetched in batches of BATCH_ROWS: the scoring holds one batch (and one user) at
    a time, not the whole selection."""
    seen: list[int] = []
    real = warehouse.fetch_batches

    def recording(sql, params=None, batch_rows=1 << 20):
        seen.append(batch_rows)
        return real(sql, params, batch_rows)

    monkeypatch.setattr(warehouse, "fetch_batches", recording)
    held_out_user_sums(
        warehouse, SQL, {}, scorers(models[:2]), partial(lm_selection.selection_batch_sum, weights=(0.5,)), 1
    )
    assert seen == [heldout_scoring.BATCH_ROWS]


def test_batch_sums_equal_the_per_user_vectors_summed():
    """The batch reductions (one numpy pass per batch) against the per-user definitions, on random
    log10 probabilities including users far past the clips (a -60 log10 p is > C nats behind)."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 30, size=200)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    events = int(bounds[-1])
    p, p2, q = (rng.uniform(-6, 0, events) for _ in range(3))
    p[bounds[5] : bounds[6]] = -60.0
    q[bounds[7] : bounds[8]] = -60.0
    users = list(zip(bounds[:-1], bounds[1:], strict=True))
    weights = (0.0, 0.25, 1.0)
    want = sum(lm_selection.selection_user_vector([p[a:b], p2[a:b]], q[a:b], weights) for a, b in users)
    got = lm_selection.selection_batch_sum([p, p2], q, bounds, weights)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-9)
    want = sum(lm_verdict.verdict_user_contribution(p[a:b], q[a:b]) for a, b in users)
    got = lm_verdict.verdict_batch_sum([p], q, bounds)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-9)
    # the clip binds for the extreme user: λ = 0 (P alone, log10 p = −60) is far behind λ = 1
    extreme = lm_selection.selection_user_vector(
        [p[bounds[5] : bounds[6]]], q[bounds[5] : bounds[6]], weights
    )
    assert extreme[0] == -lm_selection.SCORE_RANGE_NATS and extreme[2] == 0.0
