"""Chen et al. (CCS 2012) §6.2 evaluation of the synth stage: average relative error of random count
queries by maximal query size (sanity bound 0.1% of |D|) and top-K frequent-pattern true-positive
ratio / utility loss (K = 20..100), at ε ∈ {0.1, 1.0}, n_max = 5, ℓ_max = 20, next to the
non-private "Baseline" (the same extension + generation from the exact 5-grams), on three corpora:

* ``small``: generated MSNBC-like corpus (one sequence per user, |I| = 18 items + <unk>, average
  length ≈ 5.7, sparse first-order Markov transitions);
* ``words``: generated corpus with a 10,000-word vocabulary (Zipfian Markov chain, several
  sentences per user, truncated to ℓ_max);
* ``sotu``: ``../shared/data/sotu_users.jsonl.gz`` ingested with the pipeline's tokenizer
  (skipped when absent).

    python benchmarks/synth_bench.py [small|words|sotu|all] [--queries 2000] [--reps 1]

The item universe is an INPUT here: the top tokens by count (benchmark only, not private; the
stage itself uses the run's DP vocabulary). Ground truth is the truncated, segmented database D
(each user's first ℓ_max items split at '&'): truncation error is excluded for every method
(the generated corpora have at most ℓ_max items per user anyway). Exact statistics are computed
for evaluation only and never released.

Writes ``benchmarks/results/synth.json`` (machine, date, parameters, per-corpus tables) and
``benchmarks/results/synth.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dpngram.core.noise import NoiseSource, simulation_rng  # noqa: E402
from dpngram.engines.duckdb import Warehouse  # noqa: E402
from dpngram.mechanisms import synth, synth_sequences  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT.parent / "shared" / "data"
EPSILONS = (0.1, 1.0)
N_MAX, L_MAX = 5, 20
QUERY_SIZES = (4, 8, 12, 16, 20)
KS = (20, 40, 60, 80, 100)
PATTERN_MAX = 8  # frequent patterns are counted up to this length (the top 100 are far shorter)
SCHEMA = "synth_bench"


# ----------------------------------------------------------------------------------------------
# Corpora -> {schema}.synth_records(user_id, items INTEGER[]) + labels
# ----------------------------------------------------------------------------------------------
def _store_records(wh: Warehouse, records: list[list[int]]) -> None:
    table = pa.table(
        {
            "user_id": pa.array([str(i) for i in range(len(records))]),
            "items": pa.array(records, type=pa.list_(pa.int32())),
        }
    )
    wh.con.register("bench_records", table)
    wh.con.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.{synth.RECORDS_TABLE} AS SELECT * FROM bench_records")
    wh.con.unregister("bench_records")


def small_alphabet(wh: Warehouse, users: int, seed: int) -> tuple[list[str], list[list[int]]]:
    """MSNBC-like: 18 page categories, sequence length ~ geometric (mean ≈ 5.7), skewed start
    distribution and sparse transitions (Dirichlet 0.3), one sequence per user."""
    rng = simulation_rng(seed)
    k = 18
    labels = synth.item_labels([f"c{i:02d}" for i in range(k)])
    start = rng.dirichlet(np.full(k, 0.5))
    trans = rng.dirichlet(np.full(k, 0.3), size=k)
    records = []
    for _ in range(users):
        length = min(L_MAX - 1, int(rng.geometric(1 / 5.7)))
        x = int(rng.choice(k, p=start))
        seq = []
        for _ in range(length):
            seq.append(2 + x)
            x = int(rng.choice(k, p=trans[x]))
        records.append(seq + [synth.END_ID])
    _store_records(wh, records)
    return labels, records


def word_corpus(
    wh: Warehouse, users: int, seed: int, vocab: int = 10_000
) -> tuple[list[str], list[list[int]]]:
    """Zipfian word-level Markov chain over ``vocab`` words: sentence length ~ geometric (mean 8),
    2-4 sentences per user, each word followed by one of 40 Zipf-drawn successors."""
    rng = simulation_rng(seed)
    labels = synth.item_labels([f"w{i:05d}" for i in range(vocab)])
    zipf = 1.0 / np.arange(1, vocab + 1) ** 1.1
    zipf /= zipf.sum()
    successors = rng.choice(vocab, size=(vocab, 40), p=zipf)
    weights = rng.dirichlet(np.full(40, 0.4), size=vocab)
    cum = np.cumsum(weights, axis=1)
    records = []
    for _ in range(users):
        rec: list[int] = []
        for _ in range(int(rng.integers(2, 5))):
            x = int(rng.choice(vocab, p=zipf))
            for _ in range(max(1, int(rng.geometric(1 / 8)))):
                rec.append(2 + x)
                x = int(successors[x, min(39, int(np.searchsorted(cum[x], rng.random())))])
            rec.append(synth.END_ID)
        records.append(rec[:L_MAX])
    _store_records(wh, records)
    return labels, records


def sotu_corpus(wh: Warehouse, tmp: Path, vocab: int) -> tuple[list[str], list[list[int]]] | None:
    from dpngram.config import RunConfig
    from dpngram.engines.sql import run_schema_name
    from dpngram.release.context import RunContext
    from dpngram.release.publish import prepare
    from dpngram.stages.ingest import run_ingest

    path = DATA / "sotu_users.jsonl.gz"
    if not path.is_file():
        print(f"skip sotu: {path} not found")
        return None
    config = RunConfig.build(
        input=str(path),
        out=str(tmp / "out"),
        warehouse=str(tmp / "sotu.duckdb"),
        delta=1e-6,
        memory_limit="4GB",
    )
    ctx = RunContext(prepare(config))
    run_ingest(ctx)
    schema = run_schema_name(ctx.run_id)
    with ctx.warehouse() as pwh:
        top = [
            t
            for (t,) in pwh.con.execute(
                f"SELECT token FROM {schema}.tokens GROUP BY token "
                f"ORDER BY count(*) DESC, token LIMIT {int(vocab)}"
            ).fetchall()
        ]
        labels = synth.item_labels(top)
        synth.install_records(pwh, schema, labels, L_MAX)
        records = [
            list(r)
            for (r,) in pwh.con.execute(f"SELECT items FROM {schema}.{synth.RECORDS_TABLE}").fetchall()
        ]
    _store_records(wh, records)
    return labels, records


# ----------------------------------------------------------------------------------------------
# Metrics (§6.2.1 count queries, §6.2.2 frequent patterns)
# ----------------------------------------------------------------------------------------------
def random_queries(n_labels: int, per_size: int, seed: int) -> dict[int, list[tuple[int, ...]]]:
    """§6.2.1: per maximal size m, queries of sizes uniform in 1..m with items uniform over the
    vocabulary items (ids >= 2: '<unk>' and '&' are markers, not items a query names)."""
    rng = simulation_rng(seed)
    return {
        m: [
            tuple(int(x) for x in rng.integers(2, n_labels, size=int(rng.integers(1, m + 1))))
            for _ in range(per_size)
        ]
        for m in QUERY_SIZES
    }


def answer_queries(db: list[tuple[tuple[int, ...], int]], queries: set[tuple[int, ...]]) -> Counter:
    """Occurrences of every query in a weighted database [(sequence, copies)]."""
    prefixes = {q[:i] for q in queries for i in range(1, len(q) + 1)}
    out: Counter = Counter()
    for seq, copies in db:
        n = len(seq)
        for i in range(n):
            for j in range(i + 1, n + 1):
                gram = seq[i:j]
                if gram not in prefixes:
                    break
                if gram in queries:
                    out[gram] += copies
    return out


def patterns(db: list[tuple[tuple[int, ...], int]]) -> Counter:
    """Supports (occurrence counts) of contiguous patterns of length 2..PATTERN_MAX without '&'."""
    out: Counter = Counter()
    for seq, copies in db:
        body = seq[:-1] if seq and seq[-1] == synth.END_ID else seq
        n = len(body)
        for i in range(n):
            for j in range(i + 2, min(n, i + PATTERN_MAX) + 1):
                out[body[i:j]] += copies
    return out


def evaluate(true_db, true_answers, true_patterns, synthetic, queries, sanity) -> dict:
    answers = answer_queries(synthetic, {q for qs in queries.values() for q in qs})
    are = {
        str(m): float(np.mean([abs(answers[q] - true_answers[q]) / max(true_answers[q], sanity) for q in qs]))
        for m, qs in queries.items()
    }
    syn_patterns = patterns(synthetic)
    tp, loss = {}, {}
    for k in KS:
        top_true = [g for g, _ in true_patterns.most_common(k)]
        top_syn = dict(syn_patterns.most_common(k))
        tp[str(k)] = len(set(top_true) & set(top_syn)) / k
        loss[str(k)] = float(
            np.mean([abs(true_patterns[g] - top_syn.get(g, 0)) / true_patterns[g] for g in top_true])
        )
    return {
        "avg_relative_error": are,
        "top_k_true_positive": tp,
        "top_k_utility_loss": loss,
        "synthetic_sequences": int(sum(c for _, c in synthetic)),
    }


def run_corpus(name: str, wh: Warehouse, labels: list[str], records: list[list[int]], args) -> dict:
    sequences = synth_sequences.records_to_sequences(records)
    true_db = [(s, c) for s, c in Counter(sequences).items()]
    queries = random_queries(len(labels), args.queries, seed=11)
    all_queries = {q for qs in queries.values() for q in qs}
    true_answers = answer_queries(true_db, all_queries)
    true_patterns = patterns(true_db)
    sanity = 0.001 * len(sequences)
    out: dict = {
        "users": len(records),
        "sequences_D": len(sequences),
        "items_I": len(labels) - 1,
        "labels": len(labels),
        "positions": int(sum(len(r) for r in records)),
        "methods": {},
    }
    started = time.perf_counter()
    exact = synth_sequences.ngram_occurrences(sequences, N_MAX)
    base_tree = synth_sequences.exact_ngram_tree({k: float(v) for k, v in exact.items()}, len(labels), N_MAX)
    rng = simulation_rng(5)
    base_db = synth_sequences.split_sequences(base_tree, L_MAX, N_MAX, rng)
    out["methods"]["baseline"] = {
        **evaluate(true_db, true_answers, true_patterns, base_db, queries, sanity),
        "seconds": round(time.perf_counter() - started, 2),
    }
    print_row(name, "baseline", out["methods"]["baseline"])
    # the paper's reconstruction (§4.3.5: joins, then c(v) copies from the longest n-grams down)
    started = time.perf_counter()
    paper_db = synth_sequences.generate_sequences(
        synth_sequences.extend_by_joins(base_tree, L_MAX, rng=rng), rng
    )
    out["methods"]["baseline-paper-reconstruction"] = {
        **evaluate(true_db, true_answers, true_patterns, paper_db, queries, sanity),
        "seconds": round(time.perf_counter() - started, 2),
    }
    print_row(name, "base-rec", out["methods"]["baseline-paper-reconstruction"])
    for eps in EPSILONS:
        reps = []
        for _ in range(args.reps):
            params = synth.TreeParams(epsilon=eps, l_max=L_MAX, n_max=N_MAX, n_labels=len(labels))
            t0 = time.perf_counter()
            tree = synth.build_tree(synth.SqlChildCounts(wh, SCHEMA), params, NoiseSource.secure())
            t1 = time.perf_counter()
            consistent = synth_sequences.enforce_consistency(tree)
            db = synth_sequences.split_sequences(consistent, L_MAX, N_MAX, rng)
            t2 = time.perf_counter()
            expanded = sum(tree.expanded_per_level)
            result = evaluate(true_db, true_answers, true_patterns, db, queries, sanity)
            result.update(
                {
                    "tree_seconds": round(t1 - t0, 3),
                    "synthesis_seconds": round(t2 - t1, 3),
                    "expanded_nodes": expanded,
                    "expanded_per_level": tree.expanded_per_level,
                    "nodes_expanded_per_second": round(expanded / max(t1 - t0, 1e-9), 1),
                    "children_considered_per_second": round(expanded * len(labels) / max(t1 - t0, 1e-9), 1),
                    "released_ngrams": len(consistent.count),
                    "tree_height": tree.height,
                }
            )
            reps.append(result)
        out["methods"][f"eps={eps}"] = summarise(reps)
        print_row(name, f"eps={eps}", out["methods"][f"eps={eps}"])
    return out


def summarise(reps: list[dict]) -> dict:
    if len(reps) == 1:
        return {**reps[0], "reps": 1}
    out: dict = {"reps": len(reps), "runs": reps}
    for key in ("avg_relative_error", "top_k_true_positive", "top_k_utility_loss"):
        out[key] = {k: float(np.mean([r[key][k] for r in reps])) for k in reps[0][key]}
    for key in (
        "tree_seconds",
        "synthesis_seconds",
        "nodes_expanded_per_second",
        "released_ngrams",
        "tree_height",
        "expanded_nodes",
        "synthetic_sequences",
    ):
        out[key] = float(np.mean([r[key] for r in reps]))
    return out


def print_row(corpus: str, method: str, r: dict) -> None:
    are = " ".join(f"{r['avg_relative_error'][str(m)]:.3f}" for m in QUERY_SIZES)
    tp = " ".join(f"{r['top_k_true_positive'][str(k)]:.2f}" for k in KS)
    speed = (
        f"{r.get('nodes_expanded_per_second', float('nan')):>10.0f}"
        if "nodes_expanded_per_second" in r
        else " " * 10
    )
    secs = r.get("tree_seconds", r.get("seconds", 0.0)) + r.get("synthesis_seconds", 0.0)
    print(
        f"{corpus:6} {method:9} | ARE(4..20) {are} | TP(20..100) {tp} | nodes/s {speed} | {secs:7.1f}s",
        flush=True,
    )


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    corpora = list(results)
    fig, axes = plt.subplots(2, len(corpora), figsize=(4.5 * len(corpora), 7), squeeze=False)
    for col, name in enumerate(corpora):
        for method, r in results[name]["methods"].items():
            axes[0][col].plot(
                QUERY_SIZES, [r["avg_relative_error"][str(m)] for m in QUERY_SIZES], marker="o", label=method
            )
            axes[1][col].plot(KS, [r["top_k_true_positive"][str(k)] for k in KS], marker="o", label=method)
        axes[0][col].set_title(f"{name} (|I| = {results[name]['items_I']})")
        axes[0][col].set_xlabel("max query size")
        axes[0][col].set_ylabel("average relative error")
        axes[1][col].set_xlabel("K")
        axes[1][col].set_ylabel("top-K true positive ratio")
        axes[1][col].set_ylim(0, 1.05)
        axes[0][col].legend(fontsize=8)
    fig.suptitle(f"Chen et al. n-gram synthesis, n_max = {N_MAX}, l_max = {L_MAX}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", default="all", choices=["small", "words", "sotu", "all"])
    parser.add_argument("--queries", type=int, default=2000, help="random queries per maximal size")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--small-users", type=int, default=200_000)
    parser.add_argument("--word-users", type=int, default=50_000)
    parser.add_argument("--sotu-vocab", type=int, default=2000)
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    json_path = RESULTS / "synth.json"
    previous = json.loads(json_path.read_text()) if json_path.is_file() else {}
    results: dict = dict(previous.get("corpora", {}))
    with tempfile.TemporaryDirectory(prefix="synth-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        wh = Warehouse(str(tmp / "bench.duckdb"), memory_limit="4GB", temp_directory=str(tmp / "spill"))
        wh.con.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        chosen = ["small", "words", "sotu"] if args.corpus == "all" else [args.corpus]
        for name in chosen:
            t0 = time.perf_counter()
            if name == "small":
                data = small_alphabet(wh, args.small_users, seed=1)
            elif name == "words":
                data = word_corpus(wh, args.word_users, seed=2)
            else:
                data = sotu_corpus(wh, tmp, args.sotu_vocab)
            if data is None:
                continue
            print(f"{name}: corpus ready in {time.perf_counter() - t0:.1f}s", flush=True)
            results[name] = run_corpus(name, wh, *data, args)
        wh.close()
    payload = {
        "benchmark": "synth (Chen et al. 2012 §6.2)",
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_1min": os.getloadavg()[0],
        },
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "parameters": {
            "epsilons": EPSILONS,
            "n_max": N_MAX,
            "l_max": L_MAX,
            "query_sizes": QUERY_SIZES,
            "queries_per_size": args.queries,
            "K": KS,
            "pattern_max_length": PATTERN_MAX,
            "sanity_bound": "0.1% of |D| (segments of the truncated database)",
            "reps": args.reps,
            "small_users": args.small_users,
            "word_users": args.word_users,
            "sotu_vocab": args.sotu_vocab,
        },
        "corpora": results,
    }
    json_path.write_text(json.dumps(payload, indent=2))
    plot(results, RESULTS / "synth.png")
    print(f"wrote {json_path} and {RESULTS / 'synth.png'}")


if __name__ == "__main__":
    main()
