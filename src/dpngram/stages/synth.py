"""Step ``synth``: Chen et al.'s variable-length n-gram tree and a synthetic sentence corpus.

:func:`run_synth` maps the private sentences onto the released vocabulary, builds the noisy
exploration tree with the synth share of ε (:func:`dpngram.mechanisms.synth.build_tree`; pure ε-DP,
one Laplace event), makes its counts consistent, and releases them with synthetic sentences
generated from them (post-processing) as ``released/ngram_counts_noisy.parquet`` and
``released/synthetic_sequences.parquet`` (:func:`write_outputs`), through
:func:`dpngram.release.spend.spend_once`. The algorithm and its privacy argument are in
:mod:`dpngram.mechanisms.synth` and ``docs/synth.md``.

Owns: the ``synth`` step (its inputs from the release, the released files, the report part).
Imports: dpngram.mechanisms (synth, synth_sequences), dpngram.release, dpngram.engines, dpngram.config,
dpngram.core; pyarrow.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dpngram.config.stages import SYNTH
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource, simulation_rng
from dpngram.engines.base import Engine
from dpngram.mechanisms.synth import (
    END_ID,
    Key,
    SqlChildCounts,
    TreeParams,
    build_tree,
    drop_work_tables,
    install_records,
    item_labels,
    key_text,
)
from dpngram.mechanisms.synth_sequences import ConsistentTree, enforce_consistency, split_sequences
from dpngram.release.context import RunContext, StageResult, released_summary
from dpngram.release.layout import NGRAM_COUNTS_NOISY, SYNTHETIC_SEQUENCES, VOCABULARY
from dpngram.release.spend import spend_once


# ----------------------------------------------------------------------------------------------
# Stage
# ----------------------------------------------------------------------------------------------
def _load_vocabulary(ctx: RunContext) -> list[str]:
    path = ctx.release.root / VOCABULARY
    if not path.is_file():
        raise ConfigError(
            f"synth: needs the run's DP vocabulary {VOCABULARY} (run the vocabulary stage first)"
        )
    return [t for t in pq.read_table(path, columns=["token"])["token"].to_pylist() if t is not None]


#: The stage's one name (declared in :mod:`dpngram.config.stages`).
STAGE = SYNTH.name


def write_outputs(
    ctx: RunContext, labels: list[str], consistent: ConsistentTree, sequences: list[tuple[Key, int]]
) -> tuple[int, int]:
    """``released/ngram_counts_noisy.parquet`` (ngram, noisy_count): consistent counts of the
    tree's explicit nodes (> 0); ``released/synthetic_sequences.parquet`` (seq_id, text): one row
    per synthetic sentence (the end symbol dropped, empty ones skipped)."""
    grams = sorted((k for k, c in consistent.count.items() if c > 0), key=lambda k: (len(k), k))
    counts_table = pa.table(
        {
            "ngram": pa.array([key_text(labels, k) for k in grams], pa.string()),
            "noisy_count": pa.array([float(consistent.count[k]) for k in grams], pa.float64()),
        }
    )
    with ctx.release.writing(NGRAM_COUNTS_NOISY) as tmp:
        pq.write_table(counts_table, tmp)
    schema = pa.schema([("seq_id", pa.int64()), ("text", pa.string())])
    n_rows = 0
    with ctx.release.writing(SYNTHETIC_SEQUENCES) as tmp, pq.ParquetWriter(tmp, schema) as writer:
        batch_ids: list[int] = []
        batch_text: list[str] = []
        for key, copies in sequences:
            body = key[:-1] if key and key[-1] == END_ID else key
            if not body:
                continue
            text = key_text(labels, body)
            for _ in range(copies):
                batch_ids.append(n_rows)
                batch_text.append(text)
                n_rows += 1
            if len(batch_ids) >= 100_000:
                writer.write_table(pa.table({"seq_id": batch_ids, "text": batch_text}, schema=schema))
                batch_ids, batch_text = [], []
        writer.write_table(pa.table({"seq_id": batch_ids, "text": batch_text}, schema=schema))
    return len(grams), n_rows


def run_synth(ctx: RunContext, *, noise: NoiseSource | None = None) -> dict[str, Any]:
    """Stage ``synth``: Algorithm 1 with the synth share of ε (pure ε-DP, one Laplace event),
    releasing the consistent noisy n-gram counts and a synthetic sentence corpus, via
    :func:`dpngram.release.spend.spend_once`. ``noise`` is for seeded tests only."""
    config = ctx.config
    epsilon, _ = config.stage_share(STAGE)
    labels = item_labels(_load_vocabulary(ctx))
    params = TreeParams(
        epsilon=epsilon,
        l_max=config.synth.l_max,
        n_max=config.synth.n_max,
        n_labels=len(labels),
        allocation=config.synth.allocation,
        max_nodes=config.synth.max_nodes,
    )

    def compute(wh: Engine) -> StageResult:
        source = noise or NoiseSource.secure()
        install_records(wh, ctx.schema, labels, params.l_max)
        tree = build_tree(SqlChildCounts(wh, ctx.schema), params, source)
        drop_work_tables(wh, ctx.schema)
        consistent = enforce_consistency(tree)
        started = time.perf_counter()
        rng = simulation_rng(None)  # post-processing only: rounding and splitting (not DP noise)
        max_sequences = config.synth.max_sequences
        sequences = split_sequences(consistent, params.l_max, params.n_max, rng, max_sequences)
        n_grams, n_sequences = write_outputs(ctx, labels, consistent, sequences)
        levels = Counter(len(k) for k in tree.noisy)
        report = {
            "method": "chen2012-variable-length-ngrams",
            "paper": "Chen, Acs & Castelluccia, CCS 2012, Algorithm 1 and §4.3.2-4.3.5",
            "l_max": params.l_max,
            "n_max": params.n_max,
            "items": params.n_items,
            "allocation": params.allocation,
            "sensitivity": params.l_max,
            "tree_height": tree.height,
            "released_nodes_per_level": {str(k): levels[k] for k in sorted(levels)},
            "expanded_nodes_per_level": tree.expanded_per_level,
            "max_path_epsilon": tree.max_path_spend(),
            "released_ngrams": n_grams,
            "synthetic_sequences": n_sequences,
            # Output bounds (docs/synth.md, "Output bounds"): public parameters, and whether they
            # bound this release (functions of the noisy counts only: post-processing).
            "max_sequences": max_sequences,
            "max_nodes": params.max_nodes,
            "sequences_capped": sum(n for _, n in sequences) >= max_sequences,
            "tree_truncated": tree.truncated,
            "tree_seconds": round(tree.seconds, 3),
            "synthesis_seconds": round(time.perf_counter() - started, 3),
            "differentially_private": True,
            "guarantee": f"pure {epsilon:g}-DP at user level (Laplace, sensitivity l_max = {params.l_max})",
            "noise_mode": source.mode,
        }
        return StageResult(events=tree.events(STAGE), report=report)

    result = spend_once(ctx, STAGE, [NGRAM_COUNTS_NOISY, SYNTHETIC_SEQUENCES], compute, engine=True)
    return released_summary(ctx, STAGE, result, [SYNTHETIC_SEQUENCES, NGRAM_COUNTS_NOISY])
