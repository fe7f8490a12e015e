"""DPSU vocabulary (DPNE Alg. 1 line 1; supplement Alg. 5): contribution bounding, Prop. 2.2,
empty input, and the stage function's output contract."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import sentences_warehouse
from scipy import stats

from dpngram.config import RunConfig
from dpngram.core.accounting import Accountant
from dpngram.core.noise import NoiseSource
from dpngram.engines.duckdb import Warehouse
from dpngram.engines.ingest import add_token_ids
from dpngram.engines.sql import load_sql
from dpngram.mechanisms import dpsu
from dpngram.release import layout
from dpngram.release.context import RunContext, read_parts
from dpngram.release.publish import prepare
from dpngram.stages import vocabulary as vocabulary_stage

SCHEMA = "run_dpsu_test"
FALSE_FAILURE = 1e-4  # per statistical check


def _warehouse(rows: list[tuple[str, list[str]]]) -> Warehouse:
    return sentences_warehouse(SCHEMA, rows)


def _histogram(wh: Warehouse, max_contribution: int, salt: int) -> dict[str, float]:
    wh.con.execute(load_sql("dpsu/vocabulary_source", schema=SCHEMA, target="src"))
    dpsu.dpsu_histogram(wh, SCHEMA, "src", "hist", max_contribution=max_contribution, salt=salt)
    return dict(wh.con.sql(f"SELECT item, weight FROM {SCHEMA}.hist").fetchall())


def _released(wh: Warehouse, target: str = "out") -> set[str]:
    return {r[0] for r in wh.con.sql(f"SELECT item FROM {SCHEMA}.{target}").fetchall()}


def test_no_users_release_nothing(secure_noise):
    wh = _warehouse([])
    wh.con.execute(load_sql("dpsu/vocabulary_source", schema=SCHEMA, target="src"))
    # even a threshold far below zero cannot release anything from an empty histogram
    n = dpsu.dpsu_release(
        wh, SCHEMA, "src", "out", sigma=1.0, threshold=-100.0, max_contribution=5, noise=secure_noise
    )
    assert n == 0 and _released(wh) == set()


def test_never_releases_an_item_no_user_holds(secure_noise):
    """Prop. 2.2: the histogram only has held items, so even a threshold everything crosses
    releases exactly the held set; with a real threshold, the release is a subset of it."""
    rows = [(f"u{i}", ["shared", f"own{i}", "common"]) for i in range(30)] + [("z", ["zeta", None])]
    wh = _warehouse(rows)
    held = {t for _, toks in rows for t in toks if t is not None}
    wh.con.execute(load_sql("dpsu/vocabulary_source", schema=SCHEMA, target="src"))
    n = dpsu.dpsu_release(
        wh, SCHEMA, "src", "out", sigma=1.0, threshold=-100.0, max_contribution=5, noise=secure_noise
    )
    assert _released(wh) == held and n == len(held)
    for _ in range(20):
        dpsu.dpsu_release(
            wh, SCHEMA, "src", "out", sigma=2.0, threshold=1.0, max_contribution=5, noise=secure_noise
        )
        assert _released(wh) <= held


def test_contribution_bound_gives_unit_l2_norm_per_user():
    """Each user's kept items carry 1/sqrt(|U_i|) with |U_i| = min(#distinct, Delta): l2 norm 1."""
    many = [f"t{j}" for j in range(50)]
    wh = _warehouse([("big", many), ("big", many[:10]), ("small", ["a", "b", "b", "c"])])
    hist = _histogram(wh, max_contribution=10, salt=123)
    big = {t: w for t, w in hist.items() if t.startswith("t")}
    assert len(big) == 10  # Delta items kept, duplicates across sentences counted once
    assert np.allclose(list(big.values()), 1 / math.sqrt(10))
    assert sum(w * w for w in big.values()) == pytest.approx(1.0)
    assert hist["a"] == pytest.approx(1 / math.sqrt(3)) and hist["b"] == pytest.approx(1 / math.sqrt(3))


@pytest.mark.statistical
def test_kept_subset_is_uniform_over_salts(secure_noise):
    """With a random salt, each of a user's n items is kept with probability Delta/n (the
    'randomly choose Delta items' of Alg. 5). Binomial band per item, Bonferroni over items,
    false-failure rate 1e-4 in total."""
    n_items, delta, runs = 20, 5, 300
    wh = _warehouse([("u", [f"t{j}" for j in range(n_items)])])
    counts = dict.fromkeys((f"t{j}" for j in range(n_items)), 0)
    for _ in range(runs):
        for token in _histogram(wh, max_contribution=delta, salt=secure_noise.salt()):
            counts[token] += 1
    p = delta / n_items
    lo = stats.binom.ppf(FALSE_FAILURE / (2 * n_items), runs, p)
    hi = stats.binom.isf(FALSE_FAILURE / (2 * n_items), runs, p)
    assert all(lo <= c <= hi for c in counts.values()), counts


def test_threshold_streams_in_batches(secure_noise):
    """Batch size does not change which items can pass: a threshold nobody reaches keeps none,
    one everybody passes keeps all, whatever the batch size."""
    wh = _warehouse([(f"u{i}", [f"t{j}" for j in range(i % 7, i % 7 + 5)]) for i in range(40)])
    _histogram(wh, max_contribution=5, salt=1)
    scan = load_sql("dpsu/histogram_scan", schema=SCHEMA, histogram="hist")
    total = wh.con.sql(f"SELECT count(*) FROM {SCHEMA}.hist").fetchall()[0][0]
    for batch in (1, 3, 1000):
        everything = dpsu.threshold_histogram(
            wh, scan, sigma=1e-6, threshold=-1.0, noise=secure_noise, batch_rows=batch
        )
        nothing = dpsu.threshold_histogram(
            wh, scan, sigma=1e-6, threshold=1e6, noise=secure_noise, batch_rows=batch
        )
        assert everything.num_rows == total and nothing.num_rows == 0


def test_invalid_contribution_is_refused():
    wh = _warehouse([("u", ["a"])])
    wh.con.execute(load_sql("dpsu/vocabulary_source", schema=SCHEMA, target="src"))
    with pytest.raises(ValueError, match="max_contribution"):
        dpsu.dpsu_histogram(wh, SCHEMA, "src", "hist", max_contribution=0, salt=1)


def _context(tmp_path, rows, **overrides) -> RunContext:
    config = RunConfig.build(
        input=str(tmp_path / "in.jsonl"),
        out=str(tmp_path / "out"),
        warehouse=str(tmp_path / "wh.duckdb"),
        memory_limit="1GB",
        **{"stage_budget": {"dpne": 1.0}, **overrides},  # the vocabulary with the run's whole budget
    )
    ctx = RunContext(prepare(config))
    with ctx.warehouse() as wh:
        wh.con.execute(
            f"CREATE TABLE {ctx.schema}.sentences "
            "(user_id VARCHAR, doc_id BIGINT, sent_id INTEGER, tokens VARCHAR[])"
        )
        if rows:
            wh.con.executemany(
                f"INSERT INTO {ctx.schema}.sentences VALUES (?, 1, ?, ?)",
                [(u, i, t) for i, (u, t) in enumerate(rows)],
            )
        add_token_ids(wh, ctx.schema)
    return ctx


def test_run_vocabulary_contract(tmp_path):
    rows = [(f"u{i}", ["the", "cat", f"secret{i}"]) for i in range(300)]
    # delta small enough that no secret passes: P <= 300 * delta/2 = 1.5e-6
    ctx = _context(tmp_path, rows, epsilon=4.0, delta=1e-8, max_n=3, max_contribution=3)
    out = vocabulary_stage.run_vocabulary(ctx)
    path = ctx.release.root / layout.VOCABULARY
    table = pq.read_table(path)
    assert table.schema.names == ["token", "kgram_seed"] and str(table.schema.field("token").type) == "string"
    tokens = table.column("token").to_pylist()
    assert set(tokens) == {"the", "cat"}  # held by 300 users each; the secrets by one each
    assert tokens == sorted(tokens)
    assert out["released_rows"] == 2 and out["paths"] == [str(path)] and not out["reused"]
    part = read_parts(ctx)["dpne.k1"]
    params = vocabulary_stage.dpsu_parameters(ctx.config)
    assert part["released"] == 2 and part["sigma"] == params.sigma and part["rho"] == params.threshold
    assert part["max_contribution"] == 3
    # events: those of the default policy's parameters (a Gaussian and a threshold part per
    # round), whose threshold parts add up to threshold_delta * delta
    events = part["privacy"]["events"]
    expected = params.events("dpne.k1")
    assert sorted(e["mechanism"] for e in events) == sorted(e.mechanism for e in expected)
    assert {e["mechanism"] for e in events} == {"approx", "gaussian"}
    threshold_delta = sum(e["delta"] for e in events if e["mechanism"] == "approx")
    assert threshold_delta == pytest.approx(ctx.config.dpne.threshold_delta * 1e-8)
    # a retry reuses the persisted output and does not charge again
    again = vocabulary_stage.run_vocabulary(ctx)
    assert again["reused"] and pq.read_table(path).equals(table)
    assert out["epsilon"] == pytest.approx(
        Accountant([e for e in params.events("dpne.k1")]).total_epsilon(1e-8)
    )


def test_run_vocabulary_with_no_users(tmp_path):
    ctx = _context(tmp_path, [], max_n=2)
    out = vocabulary_stage.run_vocabulary(ctx)
    table = pq.read_table(ctx.release.root / layout.VOCABULARY)
    assert out["released_rows"] == 0 and table.num_rows == 0 and table.schema.names == ["token", "kgram_seed"]


def test_seeded_vocabulary_is_reproducible(tmp_path):
    rows = [(f"u{i}", [f"t{i % 9}", f"t{i % 4}", "x"]) for i in range(200)]
    results = []
    for name in ("a", "b"):
        ctx = _context(tmp_path / name, rows, epsilon=1.0, delta=1e-4, max_n=2, max_contribution=2)
        vocabulary_stage.run_vocabulary(ctx, noise=NoiseSource.seeded_for_tests(2024))
        results.append(pq.read_table(ctx.release.root / layout.VOCABULARY))
    assert results[0].equals(results[1])
