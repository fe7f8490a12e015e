"""Trust under faults, round two (issue 26, item 6): output size is never driven by the noise.
At a tiny ε the synthetic stage's noisy counts are of the order of θ ∝ 1/ε, and so was the number
of synthetic sentences it published (10,974,646 at ε = 1e-6 on 300 users; gigabytes of memory at
1e-10). The number of sentences is now at most `synth_max_sequences` and the tree at most
`synth_max_nodes` released nodes: public parameters, applied to noisy values only
(post-processing). docs/synth.md and docs/faults.md, "Output bounds"."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dpngram.core.noise import NoiseSource, simulation_rng
from dpngram.mechanisms import synth, synth_sequences

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_synth import markov_records  # noqa: E402


def noisy_tree(epsilon: float, seed: int, **params) -> synth.ExplorationTree:
    records = markov_records(300, 300, 20, seed=1)
    tree_params = synth.TreeParams(epsilon=epsilon, l_max=20, n_max=5, n_labels=301, **params)
    return synth.build_tree(synth.MemoryChildCounts(records), tree_params, NoiseSource.seeded_for_tests(seed))


def tree_with_mass(epsilon: float) -> synth_sequences.ConsistentTree:
    """A tree (seeded) whose level 1 released something: at a tiny ε its counts are huge."""
    for seed in range(50):
        consistent = synth_sequences.enforce_consistency(noisy_tree(epsilon, seed))
        if consistent.count:
            return consistent
    raise AssertionError("no seed released a node")  # pragma: no cover


@pytest.mark.parametrize("epsilon", [1e-6, 1e-10])
def test_a_tiny_epsilon_gives_at_most_max_sequences(epsilon):
    consistent = tree_with_mass(epsilon)
    # the noise alone would ask for ~ theta = l_max ln(|I|/2) / eps sentences: far beyond any input
    assert sum(c for k, c in consistent.count.items() if len(k) == 1) > 1e7
    sequences = synth_sequences.split_sequences(consistent, 20, 5, simulation_rng(1), max_sequences=1000)
    assert sum(n for _, n in sequences) == 1000


def test_the_cap_keeps_the_distribution_and_exact_counts_when_it_does_not_bind():
    records = markov_records(500, 6, 10, seed=2)
    sequences = synth_sequences.records_to_sequences(records)
    exact = synth_sequences.exact_ngram_tree(synth_sequences.ngram_occurrences(sequences, 11), 6, 11)
    free = synth_sequences.split_sequences(exact, 10, 11)
    capped = synth_sequences.split_sequences(exact, 10, 11, max_sequences=10**6)
    assert capped == free  # not binding: the exact reconstruction is unchanged
    small = synth_sequences.split_sequences(exact, 10, 11, max_sequences=len(sequences) // 2)
    assert sum(n for _, n in small) == len(sequences) // 2


def test_the_tree_never_holds_more_than_max_nodes():
    records = markov_records(3000, 8, 12, seed=1)
    params = synth.TreeParams(epsilon=50.0, l_max=12, n_max=5, n_labels=8, max_nodes=20)
    tree = synth.build_tree(synth.MemoryChildCounts(records), params, NoiseSource.seeded_for_tests(4))
    assert tree.truncated and 0 < len(tree.noisy) <= 20
    for key, labels in tree.children.items():  # the tree stays a tree: every child is released
        assert all(key + (x,) in tree.noisy for x in labels)
    synth_sequences.enforce_consistency(tree)  # consistency still runs on the cut tree
    unbounded = synth.TreeParams(epsilon=50.0, l_max=12, n_max=5, n_labels=8)
    full = synth.build_tree(synth.MemoryChildCounts(records), unbounded, NoiseSource.seeded_for_tests(4))
    assert len(full.noisy) > 20 and not full.truncated


def test_the_stage_parameters_exist_with_public_defaults():
    from dpngram.config import RunConfig

    config = RunConfig.build(input="x", out="o")
    assert config.synth.max_sequences == 1_000_000 and config.synth.max_nodes == 1_000_000
    capped = RunConfig.build(input="x", out="o", synth_max_sequences=10, synth_max_nodes=5)
    assert (capped.synth.max_sequences, capped.synth.max_nodes) == (10, 5)


def test_the_synth_stage_at_a_tiny_epsilon_publishes_a_small_useless_corpus(tmp_path):
    """The reported case: 300 users, synth ε = 1e-6. Before: millions of sentences."""
    import pyarrow.parquet as pq
    from conftest import run_through_dpne

    from dpngram.release.layout import SYNTHETIC_SEQUENCES
    from dpngram.stages import synth as synth_stage
    from dpngram.text.sample import write_sample

    files = write_sample(tmp_path / "sample", n_users=300, seed=5, vocab_size=300, public_sentences=10)
    ctx = run_through_dpne(
        tmp_path,
        files,
        public=False,
        epsilon=8.0,
        delta=1e-4,
        max_n=2,
        stage_budget={"dpne": 0.5, "synth": 1.25e-7},  # synth: epsilon 1e-6
        memory_limit="1GB",
        synth_max_sequences=2000,
        noise=NoiseSource.seeded_for_tests(SEED),  # a fixed vocabulary: the synth seed below holds
    )
    # A seed whose tree releases a level-1 node (about half of them do at this epsilon).
    summary = synth_stage.run_synth(ctx, noise=NoiseSource.seeded_for_tests(SEED))
    rows = pq.read_metadata(ctx.release.root / SYNTHETIC_SEQUENCES).num_rows
    report = summary.get("report") or {}
    assert 0 < rows <= 2000
    assert report.get("sequences_capped", True)


SEED = 1  # seeded_for_tests(1), for DPNE and synth, releases level-1 nodes here (0, 2-5 do not)
