"""Held-out scoring (dpngram.mechanisms.heldout_scoring): the per-user sums are the same whether
the users are scored in-process or, past the switch-over, by worker processes, and equal a direct
computation with KenLM.

The models are two small hand-written ARPA files (unigram + bigram, different probabilities), so
the expected values come from KenLM itself, not from the code under test."""

from __future__ import annotations

import math
import random
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dpngram.engines.duckdb import Warehouse
from dpngram.lm.evaluate import load_model
from dpngram.mechanisms import lm_counts
from dpngram.mechanisms.heldout_scoring import held_out_user_sums, user_logprobs

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


def test_user_logprobs_are_kenlm_scores_per_event(models):
    loaded = [load_model(p) for p in models]
    publics, last = user_logprobs(loaded, ["a b", "c"])
    assert [len(p) for p in publics] == [5, 5] and len(last) == 5  # 3 tokens + 2 </s>
    direct = [x[0] for t in ("a b", "c") for x in loaded[0].full_scores(t, bos=True, eos=True)]
    assert publics[0].tolist() == pytest.approx(direct)


@pytest.mark.parametrize("workers, parallel_after", [(1, 10**9), (2, 5), (2, 1)])
def test_selection_sums_match_direct_scoring_in_process_and_in_workers(
    warehouse, users, models, workers, parallel_after
):
    weights = (0.0, 0.3, 0.9)
    reduce = partial(lm_counts.selection_user_vector, weights=weights)
    want, want_count = expected(users, models, reduce)
    got, count = held_out_user_sums(
        warehouse,
        SQL,
        {},
        models,
        reduce,
        2 * len(weights),
        workers=workers,
        parallel_after=parallel_after,
        users_per_task=4,
    )
    assert count == want_count == len(users) - 1
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert not np.allclose(got[:3], got[3:])  # the two public variants really differ


def test_verdict_sums_match_in_workers(warehouse, users, models):
    reduce = partial(lm_counts.verdict_user_contribution, weight=0.4)
    want, want_count = expected(users, models, reduce)
    got, _ = held_out_user_sums(
        warehouse, SQL, {}, models, reduce, 4, workers=2, parallel_after=3, users_per_task=5
    )
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert math.isclose(got[3], lm_counts.VERDICT_LOSS_CLIP * want_count)


def test_models_loaded_once_for_a_stage_and_released_before_workers(warehouse, users, models, monkeypatch):
    """``loaded`` shares the KenLM models between the calls of one stage (selection then verdict score
    the same files): a second in-process call loads nothing, with the same sums; a call that moves
    to workers leaves the parent holding none."""
    from dpngram.lm import evaluate

    calls: list[str] = []
    real = evaluate.load_model

    def counting(path):
        calls.append(str(path))
        return real(path)

    monkeypatch.setattr(evaluate, "load_model", counting)
    reduce = partial(lm_counts.selection_user_vector, weights=(0.0, 0.5))
    want, _ = expected(users, models, reduce)
    loaded: dict = {}
    for _ in range(2):
        got, _ = held_out_user_sums(warehouse, SQL, {}, models, reduce, 4, workers=1, loaded=loaded)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert sorted(calls) == sorted(str(p) for p in models)  # each file once, not twice
    assert set(loaded) == {str(p) for p in models}
    got, _ = held_out_user_sums(
        warehouse, SQL, {}, models, reduce, 4, workers=2, parallel_after=3, users_per_task=5, loaded=loaded
    )
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert loaded == {}
