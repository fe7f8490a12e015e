"""Ingest benchmark: synthetic users (dpngram.text.sample) -> DuckDB with a bounded memory limit.

For each corpus size (default 1,000,000 and 100,000 users x ~100 tokens) it
1. generates the corpus once and caches it under benchmarks/.data/ (gitignored),
2. ingests it in a fresh child process (so peak RSS is per run) into a new warehouse file, once
   per DuckDB ``memory_limit`` (default 2GB and 256MB, to show RSS follows the limit and the
   batch size, not the data), and measures wall time, rows/s, tokens/s, peak RSS (the child's
   ``ru_maxrss``, plus a 0.2 s RSS sampler), the warehouse file size and the row identity,
3. measures tokenizer-only throughput on the largest corpus with 1 and with all polars threads,
   for ``tokenize_frame`` (what ingest runs) and ``tokenize_texts`` (adds Python list building),
4. compares the tokenizer inside DuckDB with today's polars pass (issue 51 item 3: "tokenize in one
   pass"; :func:`engine_tokenizer_worker`): per batch, either polars tokenizes and DuckDB inserts
   the raw text and the sentences (what ingest does, here without its overlap of the two), or
   DuckDB inserts the raw text and tokenizes it in SQL into the sentences (``scale_floor.py``'s
   SQL tokenizer, the floor's). Alternated ``--engine-tokenizer-repeats`` times in one process,
   with the two sentence tables compared row by row.

Prints a table and writes benchmarks/results/ingest.json (machine, date, parameters, results).
The corpora are synthetic, so printing their counts here is fine (unlike a real ingest). The
machine may be shared: the 1-minute load average before/after each ingest is recorded.

    .venv/bin/python benchmarks/ingest_bench.py                 # 1M and 100k users
    .venv/bin/python benchmarks/ingest_bench.py --users 20000   # quick run
    .venv/bin/python benchmarks/ingest_bench.py --engine-tokenizer-only   # item 4 alone, into ingest.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_average, machine, now  # noqa: E402

DATA = ROOT / "benchmarks" / ".data"
RESULTS = ROOT / "benchmarks" / "results" / "ingest.json"
SEED = 20261121


def corpus(n_users: int, public_sentences: int) -> tuple[Path, dict[str, Any]]:
    """Cached sample corpus for ``n_users``; generation stats in a sidecar JSON."""
    from dpngram.text.sample import GENERATOR_VERSION, write_sample

    folder = DATA / f"sample_u{n_users}_s{SEED}_g{GENERATOR_VERSION}"
    meta_path = folder / "meta.json"
    if meta_path.is_file():
        return folder / "users.jsonl.gz", json.loads(meta_path.read_text())
    started = time.perf_counter()
    paths = write_sample(folder, n_users=n_users, seed=SEED, public_sentences=public_sentences)
    seconds = time.perf_counter() - started
    raw_bytes = lines = 0
    with gzip.open(paths["users"], "rb") as fh:
        while chunk := fh.read(1 << 24):
            raw_bytes += len(chunk)
            lines += chunk.count(b"\n")
    meta = {
        "generate_seconds": round(seconds, 2),
        "users_file_bytes": paths["users"].stat().st_size,
        "users_uncompressed_bytes": raw_bytes,
        "documents": lines,
        "seed": SEED,
        "public_sentences": public_sentences,
    }
    meta_path.write_text(json.dumps(meta, indent=2))
    return paths["users"], meta


def worker(input_path: str, memory_limit: str, warehouse: str) -> None:
    """Child process: one ingest; prints a JSON line of measurements."""
    import psutil

    from dpngram.config import RunConfig
    from dpngram.engines.duckdb import Warehouse
    from dpngram.engines.ingest import ingest_file

    proc = psutil.Process()
    peak = {"rss": 0, "rows": 0}
    timeline: list[list[float]] = []  # [seconds, RSS MB, records read], every ~1 s
    stop = threading.Event()

    def sample_rss() -> None:
        t0 = last = time.perf_counter()
        while not stop.is_set():
            rss = proc.memory_info().rss
            peak["rss"] = max(peak["rss"], rss)
            now = time.perf_counter()
            if now - last >= 1 or not timeline:
                timeline.append([round(now - t0, 1), round(rss / 1e6), peak["rows"]])
                last = now
            stop.wait(0.2)

    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    config = RunConfig.build(
        input=input_path,
        out=str(Path(warehouse).parent / "out"),
        warehouse=str(Path(warehouse).parent),  # the directory; the file below is opened directly
        memory_limit=memory_limit,
    )
    started = time.perf_counter()
    with Warehouse(warehouse, memory_limit=memory_limit) as wh:
        wh.con.execute("CREATE SCHEMA IF NOT EXISTS run_bench")
        stats = ingest_file(wh, "run_bench", config, progress=lambda n: peak.__setitem__("rows", n))
        wh.con.execute("CHECKPOINT")
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    print(
        json.dumps(
            {
                "seconds": round(seconds, 2),
                "stats": stats.as_dict(),
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "peak_rss_sampled_bytes": peak["rss"],
                "rss_timeline": timeline,
                "warehouse_bytes": Path(warehouse).stat().st_size,
            }
        )
    )


def tokenizer_worker(input_path: str, max_docs: int) -> None:
    """Child process: tokenizer-only throughput on the first ``max_docs`` documents, for the frame
    path ingest uses (``tokenize_frame``: polars in, polars out) and for ``tokenize_texts`` (which
    also builds nested Python lists of str, the slower part)."""
    import polars as pl

    from dpngram.text.tokenizer import tokenize_frame, tokenize_texts

    texts = []
    with gzip.open(input_path, "rb") as fh:
        for line in fh:
            texts.append(json.loads(line)["text"])
            if len(texts) >= max_docs:
                break
    frame = pl.DataFrame({"user_id": ["u"] * len(texts), "doc_id": range(len(texts)), "text": texts})
    tokenize_frame(frame.head(1000))  # warm-up
    started = time.perf_counter()
    sentences = tokenize_frame(frame)
    frame_seconds = time.perf_counter() - started
    tokens = int(sentences.get_column("tokens").list.len().sum())
    started = time.perf_counter()
    tokenize_texts(frame.get_column("text"))
    texts_seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "threads": pl.thread_pool_size(),
                "docs": len(texts),
                "tokens": tokens,
                "bytes": sum(len(t.encode()) for t in texts),
                "tokenize_frame_seconds": round(frame_seconds, 3),
                "tokenize_frame_tokens_per_second": round(tokens / frame_seconds),
                "tokenize_texts_seconds": round(texts_seconds, 3),
                "tokenize_texts_tokens_per_second": round(tokens / texts_seconds),
            }
        )
    )


def engine_tokenizer_worker(input_path: str, repeats: int) -> None:
    """Child process: the tokenizer in polars (today's ingest) against the tokenizer in DuckDB SQL,
    alternated ``repeats`` times over the same documents, each into a fresh in-memory database with
    the product's two tables (raw text uncompressed, as ``sql/ingest/create.sql``), in batches of
    300,000 documents (about the product's batch). Prints each way's seconds and whether the two
    ways' sentences are equal."""
    import duckdb
    import polars as pl
    from scale_floor import TOKEN, _lit, _tokenized_text

    from dpngram.text.tokenizer import tokenize_frame

    docs = pl.read_ndjson(input_path).with_row_index("doc_id")
    docs = docs.select(pl.col("user_id"), pl.col("doc_id").cast(pl.Int64), pl.col("text"))
    batch = 300_000
    visible = _lit(r"[^\t\n\x{0B}\f\r\x{85}\p{Z}]")
    in_engine = f"""
        INSERT INTO sentences
        SELECT user_id, doc_id, CAST(i - 1 AS INTEGER), regexp_extract_all(parts[i], {_lit(TOKEN)})
        FROM (
            SELECT user_id, doc_id, parts, generate_subscripts(parts, 1) AS i
            FROM (
                SELECT user_id, doc_id,
                       list_filter(string_split({_tokenized_text("text")}, chr(10)),
                                   lambda p: regexp_matches(p, {visible})) AS parts
                FROM raw_batch
            )
        )"""

    def database() -> Any:
        con = duckdb.connect()
        con.execute("SET threads = 2; SET memory_limit = '4GB'")
        con.execute(
            "CREATE TABLE raw_text (user_id VARCHAR, doc_id BIGINT,"
            " text VARCHAR USING COMPRESSION uncompressed);"
            "CREATE TABLE sentences (user_id VARCHAR, doc_id BIGINT, sent_id INTEGER, tokens VARCHAR[])"
        )
        return con

    def polars_way(con: Any, frame: Any) -> None:
        sentences = tokenize_frame(frame)
        con.register("raw_batch", frame.to_arrow())
        con.register("sentence_batch", sentences.to_arrow())
        con.execute("INSERT INTO raw_text SELECT * FROM raw_batch")
        con.execute("INSERT INTO sentences SELECT * FROM sentence_batch")

    def engine_way(con: Any, frame: Any) -> None:
        con.register("raw_batch", frame.to_arrow())
        con.execute("INSERT INTO raw_text SELECT * FROM raw_batch")
        con.execute(in_engine)

    ways = {"polars_then_insert": polars_way, "duckdb_sql": engine_way}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    tables: dict[str, Any] = {}
    for _ in range(repeats):
        for name, way in ways.items():
            con = database()
            started = time.perf_counter()
            for offset in range(0, docs.height, batch):
                way(con, docs.slice(offset, batch))
                con.unregister("raw_batch")
            seconds[name].append(round(time.perf_counter() - started, 3))
            ordered = "SELECT doc_id, sent_id, tokens FROM sentences ORDER BY doc_id, sent_id"
            tables[name] = pl.from_arrow(con.execute(ordered).to_arrow_table())
            con.close()
    first, second = tables.values()
    print(
        json.dumps(
            {
                "docs": docs.height,
                "sentences": first.height,
                "tokens": int(first.get_column("tokens").list.len().sum()),
                "seconds": seconds,
                "same_sentences": first.equals(second),
                "threads": 2,
                "batch_documents": batch,
            }
        )
    )


def engine_tokenizer_row(args: argparse.Namespace) -> dict[str, Any]:
    """The comparison of :func:`engine_tokenizer_worker` on the ``--engine-tokenizer-users`` corpus,
    with the load around it and the ratio of the medians (engine over polars)."""
    path, meta = corpus(args.engine_tokenizer_users, args.public_sentences)
    load_before = load_average()
    run = run_child(["--engine-tokenizer-worker", str(path), str(args.engine_tokenizer_repeats)])
    medians = {name: sorted(values)[len(values) // 2] for name, values in run["seconds"].items()}
    return {
        "users": args.engine_tokenizer_users,
        "corpus": meta,
        **run,
        "median_seconds": medians,
        "engine_over_polars": round(medians["duckdb_sql"] / medians["polars_then_insert"], 2),
        "load_average_1min_before_after": [load_before, load_average()],
        "note": (
            "the DuckDB SQL tokenizer is scale_floor.py's: no NFKC (DuckDB has NFC only), so on "
            "non-ASCII text the product would still need polars for those rows; the polars way "
            "runs tokenizer and insert one after the other, where ingest overlaps them"
        ),
    }


def print_engine_tokenizer(row: dict[str, Any]) -> None:
    print(f"\ntokenizer in DuckDB SQL vs polars, {row['docs']:,} documents, {row['tokens']:,} tokens")
    for name, values in row["seconds"].items():
        print(f"  {name:<20} {' '.join(f'{v:.2f}' for v in values)} s")
    print(f"  engine / polars (medians): {row['engine_over_polars']}")
    print(f"  same sentences: {row['same_sentences']}")


def run_child(args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    if out.returncode != 0:
        sys.exit(f"benchmark child {args[0]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _halves(timeline: list[list[float]]) -> list[float]:
    """Peak sampled RSS (MB) while reading the first and the second half of the records: equal
    peaks mean memory stopped growing with the amount of data read."""
    total = max((row[2] for row in timeline), default=0)
    first = [row[1] for row in timeline if row[2] <= total / 2]
    second = [row[1] for row in timeline if row[2] > total / 2]
    return [max(first, default=0), max(second, default=0)]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[1_000_000, 100_000])
    parser.add_argument("--memory-limit", nargs="+", default=["2GB", "256MB"])
    parser.add_argument("--public-sentences", type=int, default=20_000)
    parser.add_argument("--tokenizer-docs", type=int, default=200_000)
    parser.add_argument("--keep-warehouse", action="store_true")
    parser.add_argument(
        "--engine-tokenizer-users",
        type=int,
        default=100_000,
        help="corpus of the engine tokenizer's comparison",
    )
    parser.add_argument("--engine-tokenizer-repeats", type=int, default=3)
    parser.add_argument(
        "--engine-tokenizer-only",
        action="store_true",
        help="run only the engine-tokenizer comparison and update its entry of ingest.json",
    )
    parser.add_argument(
        "--engine-tokenizer-worker", nargs=2, metavar=("INPUT", "REPEATS"), help=argparse.SUPPRESS
    )
    parser.add_argument("--worker", nargs=3, metavar=("INPUT", "MEMORY", "WAREHOUSE"), help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer-worker", nargs=2, metavar=("INPUT", "DOCS"), help=argparse.SUPPRESS)
    return parser.parse_args()


def ingest_row(
    n_users: int, path: Path, meta: dict[str, Any], memory_limit: str, keep_warehouse: bool
) -> dict[str, Any]:
    """One ingest of the corpus at ``path`` in a child process, into a fresh warehouse."""
    wh_dir = DATA / f"warehouse_u{n_users}"
    shutil.rmtree(wh_dir, ignore_errors=True)
    wh_dir.mkdir(parents=True)
    load_before = load_average()
    run = run_child(["--worker", str(path), memory_limit, str(wh_dir / "bench.duckdb")])
    load_after = load_average()
    if not keep_warehouse:
        shutil.rmtree(wh_dir, ignore_errors=True)
    stats = run["stats"]
    return {
        "users": n_users,
        "memory_limit": memory_limit,
        "corpus": meta,
        "ingest": {
            "seconds": run["seconds"],
            "rows_read": stats["rows_read"],
            "rows_loaded": stats["rows_loaded"],
            "rows_quarantined": stats["rows_quarantined"],
            "users": stats["users"],
            "sentences": stats["sentences"],
            "tokens": stats["tokens"],
            "rows_per_second": round(stats["rows_read"] / run["seconds"]),
            "tokens_per_second": round(stats["tokens"] / run["seconds"]),
            "input_mb_per_second": round(meta["users_uncompressed_bytes"] / run["seconds"] / 1e6, 2),
            "peak_rss_bytes": run["peak_rss_bytes"],
            "peak_rss_sampled_bytes": run["peak_rss_sampled_bytes"],
            "peak_rss_mb_first_half_second_half": _halves(run["rss_timeline"]),
            "rss_timeline_seconds_mb_records": run["rss_timeline"],
            "warehouse_bytes": run["warehouse_bytes"],
            "row_identity_held": stats["rows_read"] == stats["rows_loaded"] + stats["rows_quarantined"],
            "load_average_1min_before_after": [load_before, load_after],
        },
    }


def run_sizes(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every corpus size at every memory limit, and the tokenizer alone (1 and all polars threads)
    on the largest corpus."""
    results, tokenizer = [], []
    for n_users in args.users:
        path, meta = corpus(n_users, args.public_sentences)
        for memory_limit in args.memory_limit:
            results.append(ingest_row(n_users, path, meta, memory_limit, args.keep_warehouse))
            print_ingest(results[-1])
        if n_users == max(args.users):
            for env in ({"POLARS_MAX_THREADS": "1"}, {}):
                tokenizer.append(
                    {
                        "users": n_users,
                        **run_child(["--tokenizer-worker", str(path), str(args.tokenizer_docs)], env),
                    }
                )
    return results, tokenizer


def save_results(
    args: argparse.Namespace,
    results: list[dict[str, Any]],
    tokenizer: list[dict[str, Any]],
    engine_tokenizer: dict[str, Any],
) -> None:
    """benchmarks/results/ingest.json."""
    payload = {
        "benchmark": "ingest",
        "date": now(),
        "machine": machine(),
        "parameters": {
            "users": args.users,
            "memory_limit": args.memory_limit,
            "seed": SEED,
            "public_sentences": args.public_sentences,
            "tokenizer_docs": args.tokenizer_docs,
            "format": "jsonl.gz",
            "batch_bytes": _batch_bytes(),
        },
        "results": results,
        "tokenizer": tokenizer,
        "engine_tokenizer": engine_tokenizer,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nresults written to {RESULTS.relative_to(ROOT)}")


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.tokenizer_worker:
        tokenizer_worker(args.tokenizer_worker[0], int(args.tokenizer_worker[1]))
        return
    if args.engine_tokenizer_worker:
        engine_tokenizer_worker(args.engine_tokenizer_worker[0], int(args.engine_tokenizer_worker[1]))
        return
    if args.engine_tokenizer_only:
        row = engine_tokenizer_row(args)
        print_engine_tokenizer(row)
        payload = json.loads(RESULTS.read_text())
        payload["engine_tokenizer"] = {"date": now(), "machine": machine(), **row}
        RESULTS.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nengine_tokenizer written to {RESULTS.relative_to(ROOT)}")
        return
    results, tokenizer = run_sizes(args)
    engine_tokenizer = engine_tokenizer_row(args)
    print_tables(results, tokenizer)
    print_engine_tokenizer(engine_tokenizer)
    save_results(args, results, tokenizer, engine_tokenizer)


def _batch_bytes() -> int:
    from dpngram.text import records as ingest

    return ingest.BATCH_BYTES


_HEADER = (
    f"{'users':>9} {'mem limit':>9} {'docs':>9} {'tokens':>11} {'input MB':>8} {'gen s':>5} {'ingest s':>8} "
    f"{'docs/s':>7} {'tokens/s':>9} {'peak RSS MB':>11} {'RSS 1st/2nd half':>16} {'DB MB':>6}"
)


def print_ingest(r: dict[str, Any]) -> None:
    i, c = r["ingest"], r["corpus"]
    print(
        f"{r['users']:>9,} {r['memory_limit']:>9} {i['rows_read']:>9,} {i['tokens']:>11,} "
        f"{c['users_uncompressed_bytes'] / 1e6:>8.0f} {c['generate_seconds']:>5.0f} {i['seconds']:>8.1f} "
        f"{i['rows_per_second']:>7,} {i['tokens_per_second']:>9,} {i['peak_rss_bytes'] / 1e6:>11.0f} "
        f"{'/'.join(str(round(x)) for x in i['peak_rss_mb_first_half_second_half']):>16} "
        f"{i['warehouse_bytes'] / 1e6:>6.0f}",
        flush=True,
    )


def print_tables(results: list[dict[str, Any]], tokenizer: list[dict[str, Any]]) -> None:
    print("\ningest (JSONL.gz -> DuckDB; generation time of the cached corpus in 'gen s')")
    print(_HEADER)
    print("-" * len(_HEADER))
    for r in results:
        print_ingest(r)
    print("\ntokenizer only (first documents of the largest corpus)")
    print(
        f"{'threads':>7} {'docs':>8} {'tokens':>10} {'tokenize_frame tok/s':>21} {'tokenize_texts tok/s':>21}"
    )
    for t in tokenizer:
        print(
            f"{t['threads']:>7} {t['docs']:>8,} {t['tokens']:>10,} "
            f"{t['tokenize_frame_tokens_per_second']:>21,} {t['tokenize_texts_tokens_per_second']:>21,}"
        )


if __name__ == "__main__":
    main()
