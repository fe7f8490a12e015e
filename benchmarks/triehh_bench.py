"""LDP TrieHH benchmark (issue 8): coverage of discovered OOV words vs eps0 (paper Fig. 1) and the
paper's Table 1 (GreedySampling vs RandomSampling, one pass vs two passes at the same total
number of users), on

* a generated corpus with a heavy-tailed (Zipf) OOV distribution, and
* ``sotu_users.jsonl.gz`` (12,807 pseudo-users of 5 sentences) with the known vocabulary = the
  top-N tokens of ``brown_public.txt.gz``.

Coverage (paper §4): total contributions (occurrences, over all users) of the target words that
were discovered / total contributions of all target words. Target words = every eligible OOV
word of the corpus (alphabet, length <= L - 1, not known). Exact counts are used here only to
score the benchmark; nothing of this is released.

Groups: every configuration uses the same total number of users n x L x passes <= N; one pass
uses n = N // L users per layer, two passes n // 2 (paper Table 1).

Writes benchmarks/results/triehh.json (machine, date, parameters, results) and triehh.png.
Usage: python benchmarks/triehh_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dpngram.core.noise import NoiseSource, simulation_rng  # noqa: E402
from dpngram.engines.duckdb import Warehouse  # noqa: E402
from dpngram.mechanisms import triehh  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
SCHEMA = "bench"
DELTA = 1e-6


def synthetic_words(n_users: int, vocab: int, zipf: float, mean_tokens: float, seed: int) -> pa.Table:
    """(uidx, word, cnt): each user types Poisson(mean) + 1 OOV tokens drawn from a Zipf law over
    ``vocab`` random letter strings of length 3..10."""
    rng = simulation_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(3, 11, vocab)
    words = sorted({"".join(rng.choice(letters, k)) for k in lengths})
    rank_p = 1.0 / np.arange(1, len(words) + 1) ** zipf
    rank_p /= rank_p.sum()
    order = rng.permutation(len(words))  # popularity independent of spelling
    per_user = rng.poisson(mean_tokens, n_users) + 1
    uidx = np.repeat(np.arange(n_users), per_user)
    token = order[rng.choice(len(words), per_user.sum(), p=rank_p)]
    pairs, cnt = np.unique(np.stack([uidx, token], axis=1), axis=0, return_counts=True)
    return pa.table(
        {
            "uidx": pa.array(pairs[:, 0], pa.int64()),
            "word": pa.array(np.array(words, dtype=object)[pairs[:, 1]].tolist(), pa.string()),
            "cnt": pa.array(cnt, pa.int64()),
        }
    )


def load_synthetic(wh: Warehouse, n_users: int, seed: int) -> None:
    table = synthetic_words(n_users, vocab=20_000, zipf=1.1, mean_tokens=6.0, seed=seed)
    with wh.registered(words_src=table):
        wh.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.triehh_user_words AS SELECT * FROM words_src")
    users = pa.table({"user_id": pa.array([str(i) for i in range(n_users)]), "uidx": np.arange(n_users)})
    with wh.registered(users_src=users):
        wh.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.triehh_users AS SELECT * FROM users_src")


def load_sotu(wh: Warehouse, known_top: int, max_depth: int) -> list[str]:
    """Tokenize SOTU like ingest does, build the known vocabulary from Brown, and run the stage's
    own SQL (prepare_user_words) to form the users' local datasets."""
    import polars as pl

    from dpngram.engines.ingest import add_token_ids
    from dpngram.text.public import read_public_corpus
    from dpngram.text.tokenizer import tokenize_frame

    frame = pl.read_ndjson(DATA / "sotu_users.jsonl.gz").select(
        pl.col("user_id").cast(pl.String), pl.lit(0, pl.Int64).alias("doc_id"), pl.col("text")
    )
    sentences = tokenize_frame(frame)
    with wh.registered(sentences_src=sentences.to_arrow()):
        wh.execute(f"CREATE OR REPLACE TABLE {SCHEMA}.sentences AS SELECT * FROM sentences_src")
    add_token_ids(wh, SCHEMA)  # the stage's SQL reads the token ids, as ingest writes them
    brown = Counter(tok for sent in read_public_corpus(DATA / "brown_public.txt.gz") for tok in sent)
    known = [w for w, _ in brown.most_common(known_top)]
    params = triehh.TrieParameters(epsilon0=1.0, users_per_layer=1, max_depth=max_depth)
    triehh.prepare_user_words(wh, SCHEMA, known, params)
    return known


def target_counts(wh: Warehouse) -> dict[str, int]:
    rows = wh.fetch_arrow(f"SELECT word, sum(cnt) AS c FROM {SCHEMA}.triehh_user_words GROUP BY word")
    return dict(zip(rows.column("word").to_pylist(), rows.column("c").to_pylist(), strict=True))


def coverage(words: list[str], counts: dict[str, int]) -> float:
    total = sum(counts.values())
    return sum(counts.get(w, 0) for w in words) / total if total else 0.0


def run_one(wh, n_users, counts, *, eps0, sampling, passes, depth, m, k) -> dict:
    n = n_users // (depth * passes)
    params = triehh.TrieParameters(
        epsilon0=eps0,
        users_per_layer=n,
        max_depth=depth,
        max_words=m,
        max_prefixes=k,
        passes=passes,
        sampling=sampling,
    )
    source = triehh.WarehouseSource(wh, SCHEMA, "$")
    started = time.perf_counter()
    result = triehh.run_trie(source, n_users, params, NoiseSource.secure())
    return {
        "eps0": eps0,
        "sampling": sampling,
        "passes": passes,
        "users_per_layer": n,
        "coverage": coverage(result.words, counts),
        "words": len(result.words),
        "layers_run": len(result.layers),
        "central_epsilon_user_level": triehh.numerical_epsilon(m * eps0, n, DELTA),
        "central_epsilon_item_level": triehh.numerical_epsilon(eps0, n * m, DELTA),
        "seconds": round(time.perf_counter() - started, 2),
    }


def summarise(runs: list[dict]) -> dict:
    cov = np.array([r["coverage"] for r in runs])
    return {
        **{k: runs[0][k] for k in ("eps0", "sampling", "passes", "users_per_layer")},
        "coverage_mean": float(cov.mean()),
        "coverage_sd": float(cov.std(ddof=1)) if cov.size > 1 else 0.0,
        "repeats": int(cov.size),
        "words_mean": float(np.mean([r["words"] for r in runs])),
        "central_epsilon_user_level": runs[0]["central_epsilon_user_level"],
        "central_epsilon_item_level": runs[0]["central_epsilon_item_level"],
        "seconds_mean": float(np.mean([r["seconds"] for r in runs])),
    }


def bench_corpus(name, wh, n_users, args) -> dict:
    counts = target_counts(wh)
    common = {"depth": args.depth, "m": args.m, "k": args.k}
    curve = []
    for eps0 in args.eps0:
        runs = [
            run_one(wh, n_users, counts, eps0=eps0, sampling="greedy", passes=1, **common)
            for _ in range(args.repeats)
        ]
        curve.append(summarise(runs))
        print(f"{name:9s} curve eps0={eps0:5.1f} coverage={curve[-1]['coverage_mean']:.3f}", flush=True)
    table = []
    for sampling, passes in (("greedy", 1), ("random", 1), ("greedy", 2), ("random", 2)):
        runs = [
            run_one(wh, n_users, counts, eps0=args.table_eps0, sampling=sampling, passes=passes, **common)
            for _ in range(args.repeats)
        ]
        table.append(summarise(runs))
    return {"users": n_users, "target_words": len(counts), "coverage_vs_eps0": curve, "table1": table}


def print_table(name: str, result: dict) -> None:
    print(f"\n{name}: {result['users']} users, {result['target_words']} target OOV words")
    print(f"{'setting':22s} {'n/layer':>8s} {'coverage':>15s} {'words':>7s} {'central eps (user)':>19s}")
    for row in result["table1"]:
        label = (
            f"{'GS' if row['sampling'] == 'greedy' else 'RS'} & {row['passes']}-pass (eps0={row['eps0']:g})"
        )
        print(
            f"{label:22s} {row['users_per_layer']:8d} {row['coverage_mean']:8.3f} ± {row['coverage_sd']:.3f} "
            f"{row['words_mean']:7.1f} {row['central_epsilon_user_level']:19.3f}"
        )


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, res in results.items():
        curve = res["coverage_vs_eps0"]
        axes[0].errorbar(
            [c["eps0"] for c in curve],
            [c["coverage_mean"] for c in curve],
            yerr=[c["coverage_sd"] for c in curve],
            marker="o",
            capsize=3,
            label=f"{name} (GS, 1 pass)",
        )
    axes[0].set_xlabel("eps0 (per-report LDP)")
    axes[0].set_ylabel("coverage of target OOV contributions")
    axes[0].set_title("Coverage vs eps0 (paper Fig. 1)")
    axes[0].legend()
    width = 0.8 / max(1, len(results))
    for i, (name, res) in enumerate(results.items()):
        labels = [f"{'GS' if r['sampling'] == 'greedy' else 'RS'}\n{r['passes']}-pass" for r in res["table1"]]
        x = np.arange(len(labels)) + i * width
        axes[1].bar(
            x,
            [r["coverage_mean"] for r in res["table1"]],
            width,
            yerr=[r["coverage_sd"] for r in res["table1"]],
            label=name,
        )
        axes[1].set_xticks(np.arange(len(labels)) + width * (len(results) - 1) / 2, labels)
    axes[1].set_ylabel("coverage")
    axes[1].set_title("Sampler and passes at equal total users (paper Table 1)")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer users/repeats (smoke run)")
    ap.add_argument("--users", type=int, default=100_000, help="generated corpus users")
    ap.add_argument("--eps0", type=float, nargs="+", default=[1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 15.0])
    ap.add_argument("--table-eps0", type=float, default=6.0)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--known-top", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.quick:
        args.users, args.repeats, args.eps0 = 20_000, 2, [2.0, 6.0, 10.0]
    results: dict[str, dict] = {}
    started = time.perf_counter()
    with Warehouse(":memory:", memory_limit="4GB") as wh:
        wh.execute(f"CREATE SCHEMA {SCHEMA}")
        load_synthetic(wh, args.users, seed=2026)
        results["generated"] = bench_corpus("generated", wh, args.users, args)
    if (DATA / "sotu_users.jsonl.gz").is_file() and (DATA / "brown_public.txt.gz").is_file():
        with Warehouse(":memory:", memory_limit="4GB") as wh:
            wh.execute(f"CREATE SCHEMA {SCHEMA}")
            load_sotu(wh, args.known_top, args.depth)
            n_users = int(wh.fetch_scalar(f"SELECT count(*) FROM {SCHEMA}.triehh_users"))
            results["sotu"] = bench_corpus("sotu", wh, n_users, args)
    else:
        print(f"skipping SOTU: shared data not found in {DATA}")
    for name, res in results.items():
        print_table(name, res)
    verdicts = {}
    for name, res in results.items():
        rows = {(r["sampling"], r["passes"]): r["coverage_mean"] for r in res["table1"]}
        verdicts[name] = {
            "random_ge_greedy_one_pass": rows[("random", 1)] >= rows[("greedy", 1)],
            "two_pass_ge_one_pass_random": rows[("random", 2)] >= rows[("random", 1)],
            "two_pass_ge_one_pass_greedy": rows[("greedy", 2)] >= rows[("greedy", 1)],
        }
        print(f"{name}: {verdicts[name]}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": "triehh",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "parameters": {
            **{k: v for k, v in vars(args).items()},
            "delta_for_central_epsilon": DELTA,
            "alphabet": triehh.DEFAULT_ALPHABET,
            "spurious_rate": 0.01,
            "generated_corpus": "Zipf(1.1) over 20,000 random letter strings (length 3-10), "
            "Poisson(6)+1 tokens/user",
        },
        "results": results,
        "verdicts": verdicts,
        "seconds": round(time.perf_counter() - started, 1),
    }
    (RESULTS / "triehh.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    plot(results, RESULTS / "triehh.png")
    print(f"wrote {RESULTS / 'triehh.json'} and triehh.png in {out['seconds']} s")


if __name__ == "__main__":
    main()
