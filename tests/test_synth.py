"""Chen et al. (2012) variable-length n-gram stage (pipeline/synth.py): threshold derivation, exact
pass probability of the grid noise, implicit zero-child sampling vs explicit per-child noise (in
distribution), consistency, Theorem 4.1 reconstruction, SQL records/counts, and the stage end to end
(write_sample -> ingest -> DPNE -> synth -> GX suite). The ε-DP check is in test_synth_privacy.py."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import run_through_dpne
from scipy import stats

from dpngram.config import RunConfig
from dpngram.core import errors as errors
from dpngram.core.accounting import PrivacyEvent
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource, simulation_rng
from dpngram.engines.duckdb import Warehouse
from dpngram.engines.ingest import add_token_ids
from dpngram.mechanisms import synth, synth_sequences
from dpngram.release import layout
from dpngram.release.context import RunContext, read_parts
from dpngram.stages import synth as synth_stage
from dpngram.stages import validate as validate_stage
from dpngram.text.sample import write_sample

SCHEMA = "run_synth_test"
ALPHA = 1e-4  # false-failure rate of every statistical assertion in this file


# ----------------------------------------------------------------------------------------------
# Threshold and noise parameters
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("eps", "l_max", "n_items"), [(0.1, 20, 18), (1.0, 20, 10_001), (0.37, 7, 3)])
def test_threshold_makes_expected_false_children_one(eps, l_max, n_items):
    theta = synth.threshold(eps, l_max, n_items)
    # continuous Laplace tail of scale l_max/eps at theta, times |I|, is exactly 1 (§4.3.3)
    tail = stats.laplace.sf(theta, scale=l_max / eps)
    assert n_items * tail == pytest.approx(1.0, rel=1e-9)


def test_threshold_is_zero_for_tiny_universes():
    assert synth.threshold(1.0, 10, 2) == 0.0
    assert synth.threshold(1.0, 10, 1) == 0.0


@pytest.mark.parametrize(
    ("theta", "scale", "grid"), [(30.0, 20.0, 0.25), (0.0, 5.0, 0.0625), (-3.0, 4.0, 0.5)]
)
def test_pass_probability_is_the_exact_grid_tail(theta, scale, grid):
    q = math.exp(-grid / scale)
    ks = np.arange(-20000, 20001)
    pmf = q ** np.abs(ks)
    pmf /= pmf.sum()
    assert synth.pass_probability(theta, scale, grid) == pytest.approx(
        pmf[grid * ks >= theta].sum(), rel=1e-9
    )


def test_budget_quantisation_rounds_down_on_a_fixed_grid():
    for eps in [0.013, 0.2, 1.0, 3.3]:
        qeps = synth.quantize_budget(eps)
        assert qeps <= eps and qeps > eps / 2 ** (1 / 8) * (1 - 1e-12)
    assert synth.quantize_budget(0.5) == 0.5


def test_complement_enumerates_the_missing_labels():
    rng = simulation_rng(3)
    for _ in range(50):
        excluded = np.sort(rng.choice(60, size=int(rng.integers(0, 30)), replace=False))
        rest = np.setdiff1d(np.arange(60), excluded)
        positions = np.arange(rest.size)
        assert np.array_equal(synth._complement(excluded, positions), rest)


def test_conditional_tail_sampler_matches_the_conditional_law(secure_noise):
    scale, grid, m = 6.0, 0.5, 7
    draws = synth._laplace_at_least(secure_noise, m, scale, grid, 20000) / grid
    assert draws.min() >= m
    q = math.exp(-grid / scale)
    # (K - m) | K >= m is geometric on {0, 1, ...} with ratio q; chi-square over binned support
    j = (draws - m).astype(int)
    edges = [0, 2, 5, 10, 20, 40, 80, 10**9]
    observed = np.histogram(j, bins=edges)[0]
    expected = np.array([q**a - q**b for a, b in zip(edges, edges[1:], strict=False)]) * draws.size
    assert stats.chisquare(observed, expected).pvalue > ALPHA


# ----------------------------------------------------------------------------------------------
# Implicit zero-child sampling has the explicit mechanism's output distribution
# ----------------------------------------------------------------------------------------------
def test_implicit_children_match_explicit_per_child_noise_in_distribution(secure_noise):
    n_labels, eps, l_max = 120, 1.0, 4
    scale = l_max / eps
    grid = synth.noise_grid(scale)
    theta = synth.threshold(eps, l_max, n_labels - 1) * 0.6  # lower θ: more zero children pass
    counts = np.zeros(n_labels)
    nonzero = np.array([3, 17, 40, 41, 99])
    counts[nonzero] = [2, 9, 15, 30, 12]
    runs = 3000
    exp_sizes, imp_sizes = [], []
    exp_zero_vals, imp_zero_vals = [], []
    exp_hits, imp_hits = Counter(), Counter()
    zero_labels = np.setdiff1d(np.arange(n_labels), nonzero)
    for _ in range(runs):
        el, ev = synth.explicit_children(secure_noise, counts, theta, scale, grid)
        il, iv = synth.implicit_children(secure_noise, nonzero, counts[nonzero], n_labels, theta, scale, grid)
        assert np.all(iv >= theta) and len(set(il.tolist())) == il.size
        for labels, values, sizes, vals, hits in (
            (el, ev, exp_sizes, exp_zero_vals, exp_hits),
            (il, iv, imp_sizes, imp_zero_vals, imp_hits),
        ):
            is_zero = counts[labels] == 0
            sizes.append(int(is_zero.sum()))
            vals.extend(values[is_zero].tolist())
            hits.update(labels.tolist())
    # number of passing zero-count children: same law (two-sample chi-square over counts 0..4+)
    table = np.array(
        [[sum(min(s, 4) == k for s in sizes) for k in range(5)] for sizes in (exp_sizes, imp_sizes)]
    )
    table = table[:, table.sum(axis=0) > 0]
    assert stats.chi2_contingency(table).pvalue > ALPHA
    # values of passing zero-count children: same conditional law (two-sample KS)
    assert stats.ks_2samp(exp_zero_vals, imp_zero_vals).pvalue > ALPHA
    # non-zero children: the same pass rate per label (two-proportion z-test, Bonferroni over labels)
    z_crit = stats.norm.isf(ALPHA / (2 * nonzero.size))
    for x in nonzero:
        p1, p2 = exp_hits[x] / runs, imp_hits[x] / runs
        pooled = (exp_hits[x] + imp_hits[x]) / (2 * runs)
        se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * 2 / runs)
        assert abs(p1 - p2) <= z_crit * se + 1e-12
    # which zero-count children pass: uniform over them (chi-square)
    zero_hits = np.array([imp_hits[x] for x in zero_labels])
    assert zero_hits.sum() > 200
    assert stats.chisquare(zero_hits).pvalue > ALPHA


# ----------------------------------------------------------------------------------------------
# Tree, budgets, consistency
# ----------------------------------------------------------------------------------------------
def markov_records(n_users: int, n_items: int, l_max: int, seed: int) -> list[list[int]]:
    """User records over items 1..n_items-1 with sentence ends (0), from a sparse Markov chain."""
    rng = simulation_rng(seed)
    trans = rng.dirichlet(np.full(n_items - 1, 0.3), size=n_items)
    records = []
    for _ in range(n_users):
        rec: list[int] = []
        while len(rec) < l_max:
            x = int(rng.integers(1, n_items))
            for _ in range(int(rng.integers(1, 7))):
                rec.append(x)
                x = 1 + int(rng.choice(n_items - 1, p=trans[x]))
            rec.append(synth.END_ID)
        records.append(rec[:l_max])
    return records


@pytest.mark.parametrize("allocation", ["adaptive", "uniform"])
def test_every_path_spends_at_most_epsilon(secure_noise, allocation):
    records = markov_records(3000, 8, 12, seed=1)
    params = synth.TreeParams(epsilon=2.0, l_max=12, n_max=5, n_labels=8, allocation=allocation)
    tree = synth.build_tree(synth.MemoryChildCounts(records), params, secure_noise)
    assert tree.height >= 2
    for key, spent in tree.spent.items():
        # spent(v) = sum of the budgets of v's ancestors' expansions
        path = sum(tree.budget[key[:i]] for i in range(len(key)))
        assert spent == pytest.approx(path)
        assert spent <= params.epsilon * (1 + 1e-12)
    assert all(key[-1] != synth.END_ID for key in tree.budget if key)  # '&' nodes are never expanded
    assert all(len(key) < params.n_max for key in tree.budget)


def test_consistency_makes_children_sum_to_the_parent(secure_noise):
    records = markov_records(3000, 10, 15, seed=2)
    params = synth.TreeParams(epsilon=1.0, l_max=15, n_max=4, n_labels=10)
    tree = synth.build_tree(synth.MemoryChildCounts(records), params, secure_noise)
    ct = synth_sequences.enforce_consistency(tree)
    checked = 0
    for key in tree.budget:
        if not key or key not in ct.count:
            continue
        value, labels = ct.rest[key]
        assert labels + len(ct.children[key]) == params.n_labels
        assert all(c >= 0 for c in ct.children[key].values()) and value >= 0
        if ct.children[key] or value > 0:
            assert ct.child_sum(key) == pytest.approx(ct.count[key], rel=1e-9)
            checked += 1
    assert checked >= 5
    assert all(c >= 0 for c in ct.count.values())


def hand_tree() -> synth.ExplorationTree:
    params = synth.TreeParams(epsilon=1.0, l_max=5, n_max=3, n_labels=5)
    tree = synth.ExplorationTree(params)
    tree.noisy.update({(1,): 10.0, (2,): 20.0, (2, 1): 8.0, (2, 3): 4.0, (1, 2): 6.0, (1, 2, 3): 3.0})
    tree.children.update({(): [1, 2], (2,): [1, 3], (1,): [2], (1, 2): [3]})
    return tree


def test_consistency_steps_on_a_hand_tree():
    ct = synth_sequences.enforce_consistency(hand_tree(), min_count=0.5)
    # (2,): level 1 -> step 3: leftover 20 - 12 spread over the 3 missing labels
    assert ct.children[(2,)] == {1: 8.0, 3: 4.0}
    assert ct.rest[(2,)] == (pytest.approx(8 / 3), 3)
    # (1,): step 3, leftover 4 over 4 missing labels
    assert ct.count[(1, 2)] == pytest.approx(6.0)
    # (1, 2): Markov parent context (2,) is expanded -> step 2: ratio s = 3 / c(2 3) = 0.75,
    # missing (1 2 1) gets 8 * 0.75 = 6, the other missing ones 8/3 * 0.75 = 2; total 15 -> factor 0.4
    assert ct.children[(1, 2)] == {1: pytest.approx(2.4), 3: pytest.approx(1.2)}
    assert ct.rest[(1, 2)][0] == pytest.approx(0.8) and ct.rest[(1, 2)][1] == 3
    assert ct.child_sum((1, 2)) == pytest.approx(6.0)


# ----------------------------------------------------------------------------------------------
# Synthetic database (Theorem 4.1)
# ----------------------------------------------------------------------------------------------
def test_generation_reconstructs_the_database_from_exact_counts():
    records = markov_records(400, 6, 10, seed=4)
    sequences = synth_sequences.records_to_sequences(records)
    exact = synth_sequences.ngram_occurrences(sequences, 10)
    generated = Counter()
    for key, copies in synth_sequences.generate_sequences({k: float(c) for k, c in exact.items()}):
        generated[key] += copies
    assert generated == Counter(sequences)
    # the same through the tree path: an exact tree of height l_max needs no extension
    tree = synth_sequences.exact_ngram_tree(exact, n_labels=6, n_max=10)
    extended = synth_sequences.extend_by_joins(tree, l_max=10)
    assert extended == {k: float(c) for k, c in exact.items()}
    again = Counter()
    for key, copies in synth_sequences.generate_sequences(extended):
        again[key] += copies
    assert again == Counter(sequences)
    # and the synthetic corpus reproduces every released count it was generated from
    assert synth_sequences.ngram_occurrences(again.elements(), 10) == exact


def test_join_estimates_follow_the_markov_formula():
    # Example 4.4: c(I2 I3 I1) * c(I3 I1 I2) / c(I3 I1) = 4 * 2 / 4 = 2
    tree = synth_sequences.ConsistentTree(5)
    tree.count.update({(2, 3, 1): 4.0, (3, 1): 4.0, (3, 1, 2): 2.0, (3, 1, 1): 2.0})
    tree.children.update({(3, 1): {2: 2.0, 1: 2.0}})
    extended = synth_sequences.extend_by_joins(tree, l_max=4)
    assert extended[(2, 3, 1, 2)] == pytest.approx(2.0)
    assert extended[(2, 3, 1, 1)] == pytest.approx(2.0)
    assert max(len(k) for k in extended) == 4


# ----------------------------------------------------------------------------------------------
# SQL: records and level counts
# ----------------------------------------------------------------------------------------------
def test_sql_records_and_counts_match_the_in_memory_reference():
    wh = Warehouse(":memory:", memory_limit="1GB")
    wh.con.execute(f"CREATE SCHEMA {SCHEMA}")
    wh.con.execute(
        f"CREATE TABLE {SCHEMA}.sentences (user_id VARCHAR, doc_id BIGINT, sent_id INTEGER, tokens VARCHAR[])"
    )
    rows = [
        ("u1", 0, 0, ["a", "b", "zz"]),
        ("u1", 0, 1, ["b", "a"]),
        ("u1", 1, 0, ["a", "a", "a", "b"]),
        ("u2", 0, 0, ["&", "b"]),
        ("u3", 2, 5, ["c"] * 30),
        ("u4", 0, 0, []),
        # exactly l_max items in two sentences: the third starts past l_max
        ("u5", 3, 1, ["b", "b", "b"]),
        ("u5", 3, 0, ["a", "a", "a"]),
        ("u5", 4, 0, ["c"]),
    ]
    wh.con.executemany(f"INSERT INTO {SCHEMA}.sentences VALUES (?, ?, ?, ?)", rows)
    add_token_ids(wh, SCHEMA)
    wh.con.execute(
        f"CREATE VIEW {SCHEMA}.tokens AS SELECT user_id, doc_id, sent_id, p.pos - 1 AS pos, "
        f"tokens[p.pos] AS token FROM {SCHEMA}.sentences, unnest(generate_series(1, len(tokens))) AS p(pos)"
    )
    labels = synth.item_labels(["a", "b", "c", "&"])
    assert labels == ["&", "<unk>", "a", "b", "c"]
    synth.install_records(wh, SCHEMA, labels, l_max=8)
    got = dict(wh.con.execute(f"SELECT user_id, items FROM {SCHEMA}.synth_records").fetchall())
    assert got == {
        "u1": [2, 3, 1, 0, 3, 2, 0, 2],
        "u2": [1, 3, 0],
        "u3": [4] * 8,
        "u5": [2, 2, 2, 0, 3, 3, 3, 0],
    }
    oracle_sql = synth.SqlChildCounts(wh, SCHEMA)
    oracle_mem = synth.MemoryChildCounts(list(got.values()))
    for n, parents in [(1, [()]), (2, [(2,), (3,), (4,)]), (3, [(2, 3), (4, 4), (1, 3)])]:
        a = oracle_sql.child_counts(n, parents)
        b = oracle_mem.child_counts(n, parents)
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), n


# ----------------------------------------------------------------------------------------------
# Config and the stage end to end
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [{"synth_n_max": 0}, {"synth_l_max": 0}, {"synth_allocation": "greedy"}])
def test_bad_synth_parameters_are_refused(bad):
    with pytest.raises(ConfigError, match="synth_"):
        RunConfig.build(input="x", out="y", **bad)


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("synth-run")
    files = write_sample(tmp / "sample", n_users=300, seed=5, vocab_size=300, public_sentences=10)
    ctx = run_through_dpne(
        tmp,
        files,
        public=False,
        epsilon=8.0,
        delta=1e-4,
        max_n=2,
        stage_budget={"dpne": 0.5, "synth": 0.5},
        memory_limit="1GB",
        synth_l_max=15,
        synth_n_max=4,
    )
    summary = synth_stage.run_synth(ctx)
    return ctx, summary


def test_stage_releases_counts_and_sequences(synth_run):
    ctx, summary = synth_run
    root = ctx.release.root
    seqs = pq.read_table(root / layout.SYNTHETIC_SEQUENCES)
    counts = pq.read_table(root / layout.NGRAM_COUNTS_NOISY)
    assert seqs.column_names == ["seq_id", "text"] and counts.column_names == ["ngram", "noisy_count"]
    assert summary["released_rows"] == seqs.num_rows > 0
    vocab = set(pq.read_table(root / layout.VOCABULARY)["token"].to_pylist()) | {synth.UNK}
    texts = seqs["text"].to_pylist()
    assert all(t and set(t.split(" ")) <= vocab for t in texts)
    assert all(len(t.split(" ")) <= ctx.config.synth.l_max for t in texts)
    assert min(counts["noisy_count"].to_pylist()) >= 0
    part = read_parts(ctx)["synth"]
    events = [PrivacyEvent(**e) for e in part["privacy"]["events"]]
    # the synth share as jointly calibrated with the run's other stages (docs/accounting.md)
    share = ctx.config.stage_share("synth").epsilon
    assert [(e.mechanism, e.epsilon, e.sensitivity) for e in events] == [("laplace", share, 15.0)]
    assert part["max_path_epsilon"] <= share
    assert part["noise_mode"] == "secure"


def test_stage_retry_reuses_outputs_and_gx_suite_passes(synth_run):
    ctx, _ = synth_run
    before = (ctx.release.root / layout.SYNTHETIC_SEQUENCES).read_bytes()
    again = synth_stage.run_synth(ctx)
    assert again["reused"] is True
    assert (ctx.release.root / layout.SYNTHETIC_SEQUENCES).read_bytes() == before
    result = validate_stage.validate_run(ctx, suites=["released.synth"])
    assert result["success"], result.get("failures")


def test_gx_suite_catches_tokens_outside_the_universe(synth_run, tmp_path):
    import pyarrow as pa

    ctx, _ = synth_run
    path = ctx.release.root / layout.SYNTHETIC_SEQUENCES
    original = path.read_bytes()
    try:
        pq.write_table(pa.table({"seq_id": [0, 1], "text": ["not-a-vocab-token", ""]}), path)
        with pytest.raises(errors.ValidationFailed) as err:
            validate_stage.validate_run(ctx, suites=["released.synth"])
        text = str(err.value)
        assert "sequence_tokens_outside_items" in text and "empty_sequences" in text
    finally:
        path.write_bytes(original)


def test_missing_vocabulary_is_a_clear_error(tmp_path):
    config = RunConfig.build(
        input="x",
        out=str(tmp_path / "out"),
        warehouse=str(tmp_path / "wh.duckdb"),
        stage_budget={"synth": 1.0},
        run_id="r1",
    )
    with pytest.raises(ConfigError, match="vocabulary"):
        synth_stage.run_synth(RunContext(config))


def test_tree_is_reproducible_with_a_seeded_source():
    records = markov_records(500, 6, 10, seed=7)
    params = synth.TreeParams(epsilon=1.0, l_max=10, n_max=3, n_labels=6)
    a = synth.build_tree(synth.MemoryChildCounts(records), params, NoiseSource.seeded_for_tests(9))
    b = synth.build_tree(synth.MemoryChildCounts(records), params, NoiseSource.seeded_for_tests(9))
    assert a.noisy == b.noisy


def test_sampled_joins_have_the_join_expectation_and_keep_exact_counts():
    tree = synth_sequences.ConsistentTree(5)
    tree.count.update({(2, 3, 1): 7.0, (3, 1): 10.0, (3, 1, 2): 6.0, (3, 1, 0): 3.0})
    tree.children.update({(3, 1): {2: 6.0, 0: 3.0}})  # 1 of 10 continuations is unknown: "stop"
    rng = simulation_rng(17)
    reps = 4000
    runs = [synth_sequences.extend_by_joins(tree, l_max=4, rng=rng) for _ in range(reps)]
    got = np.array([[run.get((2, 3, 1, x), 0.0) for x in (2, 0)] for run in runs])
    # each of the 7 copies goes to child 2 w.p. 0.6, to '&' w.p. 0.3: binomial means, z at ALPHA
    z = stats.norm.isf(ALPHA / 4)
    for col, p in ((0, 0.6), (1, 0.3)):
        assert abs(got[:, col].mean() - 7 * p) <= z * math.sqrt(7 * p * (1 - p) / reps)
    assert np.all(got.sum(axis=1) <= 7) and np.all(got == np.round(got))
    # exact integer counts of a complete tree are reconstructed exactly with randomized rounding too
    records = markov_records(200, 5, 8, seed=6)
    sequences = synth_sequences.records_to_sequences(records)
    exact = synth_sequences.ngram_occurrences(sequences, 8)
    full = synth_sequences.exact_ngram_tree(exact, n_labels=5, n_max=8)
    extended = synth_sequences.extend_by_joins(full, l_max=8, rng=rng)
    generated = Counter()
    for key, copies in synth_sequences.generate_sequences(extended, rng):
        generated[key] += copies
    assert generated == Counter(sequences)


def test_prefix_split_reproduces_exact_counts_and_keeps_totals():
    records = markov_records(300, 6, 9, seed=8)
    sequences = synth_sequences.records_to_sequences(records)
    exact = synth_sequences.ngram_occurrences(sequences, 10)
    full = synth_sequences.exact_ngram_tree(exact, n_labels=6, n_max=10)  # n_max > l_max: every prefix known
    for rng in (None, simulation_rng(2)):
        generated = Counter()
        for key, copies in synth_sequences.split_sequences(full, l_max=9, n_max=10, rng=rng):
            generated[key] += copies
        assert generated == Counter(sequences)
    # a short tree: the number of sequences is still the exact count of sequence starts, and
    # every generated sequence ends at '&' or at l_max, or where the model has no continuation
    short = synth_sequences.exact_ngram_tree(
        synth_sequences.ngram_occurrences(sequences, 3), n_labels=6, n_max=3
    )
    out = synth_sequences.split_sequences(short, l_max=9, n_max=3, rng=simulation_rng(3))
    assert sum(c for _, c in out) == len(sequences)
    assert all(len(k) <= 9 for k, _ in out)


def test_systematic_split_is_exact_for_integer_expectations_and_unbiased():
    assert synth_sequences._systematic_split(10, [3.0, 5.0, 2.0], None) == [3, 5, 2]
    rng = simulation_rng(4)
    reps = 4000
    got = np.array(
        [synth_sequences._systematic_split(3, np.array([1.0, 1.0, 2.0]), rng) for _ in range(reps)]
    )
    assert np.all(got.sum(axis=1) == 3)
    # expectations 0.75, 0.75, 1.5; each count varies within one of its expectation
    for col, mean in enumerate([0.75, 0.75, 1.5]):
        assert set(np.unique(got[:, col])) <= {math.floor(mean), math.ceil(mean)}
        z = stats.norm.isf(ALPHA / 6)
        frac = mean - math.floor(mean)
        assert abs(got[:, col].mean() - mean) <= z * math.sqrt(frac * (1 - frac) / reps)


class _FixedOffsets:
    """A UniformSource that returns the given offsets in turn."""

    def __init__(self, offsets: list[float]) -> None:
        self.offsets = iter(offsets)

    def random(self) -> float:
        return next(self.offsets)


def _numpy_systematic_split(total: int, weights: list[float], offset: float) -> list[int]:
    """The vectorised split the stage used until 2026-12-07 (numpy's pairwise sum for Σw)."""
    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    mass = w.sum()
    if total <= 0 or mass <= 0:
        return [0] * w.size
    edges = np.concatenate([[0.0], np.cumsum(w) / mass * total])
    edges[-1] = float(total)
    return np.diff(np.floor(edges - offset + 1.0 - 1e-9)).astype(np.int64).tolist()


def test_systematic_split_matches_the_vectorised_split_it_replaced():
    """The per-node split in plain Python gives the copies numpy's elementwise version gave, for
    the same offset: short and long weight lists (numpy sums 8 or more pairwise, the loop in
    order), zeros, negatives (count as 0), integer expectations, tiny and huge totals."""
    rng = simulation_rng(20261207)
    for _ in range(3000):
        size = int(rng.integers(1, 40))
        weights = rng.exponential(1.0, size) * 10.0 ** rng.uniform(-3, 4)
        weights[rng.random(size) < 0.2] = 0.0
        weights[rng.random(size) < 0.05] = -1.0
        if rng.random() < 0.3:  # integer expectations: weights that are whole counts of the total
            weights = rng.integers(0, 5, size).astype(float)
        total = int(weights.clip(0).sum()) if rng.random() < 0.3 else int(rng.integers(0, 10**6))
        # the extremes of an offset in [0, 1) too, where an integer edge meets the 1e-9 guard
        offset = float([0.0, 0.5, 1.0 - 2.0**-53, rng.random()][int(rng.integers(0, 4))])
        got = synth_sequences._systematic_split(total, weights.tolist(), _FixedOffsets([offset]))
        assert got == _numpy_systematic_split(total, weights.tolist(), offset), (total, weights, offset)
        assert sum(got) == (total if total > 0 and weights.clip(0).sum() > 0 else 0)


def test_node_budget_with_a_zero_threshold_does_not_fail():
    """With |I| <= 2 items the threshold is 0: the height estimate log(theta / c) / log(P_max) is
    undefined; every count passes a zero threshold, so the subtree may be as deep as allowed and
    the node gets the remaining budget spread over the levels left (found by a default run on a
    200-user corpus at epsilon 2, which raised 'math domain error')."""
    from dpngram.mechanisms.synth import ExplorationTree, TreeParams, _node_budget, threshold

    params = TreeParams(epsilon=1.0, l_max=4, n_max=3, n_labels=3)  # |I| = 2
    assert threshold(0.5, params.l_max, params.n_items) == 0.0
    tree = ExplorationTree(params)
    tree.spent[(0,)] = 0.25
    tree.noisy[(0,)] = 5.0
    tree.noisy[(1,)] = 3.0
    tree.children[()] = [0, 1]
    assert _node_budget(tree, (0,), 1) == pytest.approx(0.75 / 2)
