"""How close is the sample generator's n-gram structure to real text?

The DPNE benchmark's generated corpus stands in for real user text at sizes (1M users) where no
real corpus is at hand, so its n-gram statistics should look like real text's. This benchmark
measures the statistics DPNE is sensitive to on real corpora and on the generator, at equal size:

* ``repeat_rate[k]``: share of k-gram occurrences whose k-gram occurs at least twice in the
  corpus (occurrence-level, no users needed; computed on the first ``--tokens`` tokens);
* ``shared_rate[k]``: share of k-gram occurrences whose k-gram is used by at least ``u`` distinct
  users, u = 2 and 10 (user corpora only, equal numbers of users);
* ``type_token[k]``: distinct k-grams per k-gram occurrence.

Real text: ``../shared/data/brown_public.txt.gz`` (occurrence statistics) and
``sotu_users.jsonl.gz`` (both). The generator runs with ``SampleSpec()`` defaults, or with any
field overridden on the command line (``--spec phrase_share=0.2``), so a proposed change to the
defaults can be compared against real text before it is made. Without overrides the generator's
earlier (uncalibrated) defaults are measured too.

    .venv/bin/python benchmarks/sample_realism_bench.py [--tokens 1000000] [--spec field=value ...]

Results: ``benchmarks/results/sample_realism.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dpne.common import header, write_result  # noqa: E402

from dpngram.text.public import read_public_corpus  # noqa: E402
from dpngram.text.sample import SampleSpec, write_sample  # noqa: E402
from dpngram.text.tokenizer import tokenize_frame  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
KS = range(1, 8)
SEED = 20261121
#: The generator's defaults before they were calibrated (kept for comparison).
EARLIER_SPEC = SampleSpec(follow=0.75, phrase_share=0.5)
EARLIER_VOCAB = 5000


def user_sentences(path: Path) -> pl.DataFrame:
    """(user_id, tokens) per sentence of a users JSONL(.gz) file, tokenized as ingest does."""
    docs = (
        pl.read_ndjson(path)
        .with_row_index("doc_id")
        .select(pl.col("user_id").cast(pl.String), pl.col("doc_id"), pl.col("text"))
    )
    return tokenize_frame(docs).select("user_id", "tokens")


def public_sentences(path: Path) -> pl.DataFrame:
    return pl.DataFrame(
        {"user_id": None, "tokens": list(read_public_corpus(path))},
        schema={"user_id": pl.String, "tokens": pl.List(pl.String)},
    )


def first_tokens(frame: pl.DataFrame, tokens: int) -> pl.DataFrame:
    """Sentences in order up to ``tokens`` tokens in total."""
    cumulative = frame.select(pl.col("tokens").list.len().cum_sum()).to_series()
    return frame.filter(cumulative <= tokens)


def first_users(frame: pl.DataFrame, users: int) -> pl.DataFrame:
    keep = frame.select(pl.col("user_id").unique(maintain_order=True).head(users)).to_series()
    return frame.filter(pl.col("user_id").is_in(keep.implode()))


def kgram_stats(frame: pl.DataFrame, with_users: bool) -> dict[str, Any]:
    con = duckdb.connect()
    con.register("sentences", frame.to_arrow())
    stats: dict[str, Any] = {
        "sentences": frame.height,
        "tokens": int(frame.select(pl.col("tokens").list.len().sum()).item()),
    }
    if with_users:
        stats["users"] = int(frame.select(pl.col("user_id").n_unique()).item())
    per_k: dict[str, dict[str, float]] = {}
    for k in KS:
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE grams AS
            SELECT user_id, list_slice(tokens, i, i + $k - 1) AS gram
            FROM (SELECT user_id, tokens, unnest(generate_series(1, len(tokens) - $k + 1)) AS i
                  FROM sentences WHERE len(tokens) >= $k)
            """,
            {"k": k},
        )
        row = con.execute(
            """
            WITH per_gram AS (SELECT gram, count(*) AS n, count(DISTINCT user_id) AS u
                              FROM grams GROUP BY gram)
            SELECT sum(n), count(*), sum(n) FILTER (WHERE n >= 2),
                   sum(n) FILTER (WHERE u >= 2), sum(n) FILTER (WHERE u >= 10)
            FROM per_gram
            """
        ).fetchall()[0]
        occurrences, types, repeated, shared2, shared10 = (int(v or 0) for v in row)
        entry = {
            "repeat_rate": round(repeated / occurrences, 4),
            "type_token": round(types / occurrences, 4),
        }
        if with_users:
            entry["shared_rate_u2"] = round(shared2 / occurrences, 4)
            entry["shared_rate_u10"] = round(shared10 / occurrences, 4)
        per_k[str(k)] = entry
    con.close()
    stats["k"] = per_k
    return stats


def parse_spec(items: list[str]) -> SampleSpec:
    fields = {f.name: f.type for f in dataclasses.fields(SampleSpec)}
    values: dict[str, Any] = {}
    for item in items:
        name, _, text = item.partition("=")
        if name not in fields:
            raise SystemExit(f"unknown SampleSpec field {name!r}; known: {sorted(fields)}")
        values[name] = int(text) if fields[name] in (int, "int") else float(text)
    return SampleSpec(**values)


def print_table(results: dict[str, Any]) -> None:
    names = list(results)
    print(f"\n{'k':>2}  " + "  ".join(f"{n[:24]:>24}" for n in names))
    for metric in ("repeat_rate", "shared_rate_u2", "shared_rate_u10", "type_token"):
        print(metric)
        for k in KS:
            cells = []
            for n in names:
                value = results[n]["k"][str(k)].get(metric)
                cells.append(f"{value:>24.3f}" if value is not None else f"{'-':>24}")
            print(f"{k:>2}  " + "  ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1_000_000, help="tokens per corpus (occurrence stats)")
    parser.add_argument("--users", type=int, default=10_000, help="users per corpus (user stats)")
    parser.add_argument("--spec", nargs="*", default=[], help="SampleSpec overrides, field=value")
    parser.add_argument(
        "--vocab-size", type=int, default=None, help="generator vocabulary (default: write_sample's)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only (for trying a --spec)")
    args = parser.parse_args()
    spec = parse_spec(args.spec)

    results: dict[str, Any] = {}
    if (DATA / "brown_public.txt.gz").is_file():
        results["brown (public)"] = kgram_stats(
            first_tokens(public_sentences(DATA / "brown_public.txt.gz"), args.tokens), with_users=False
        )
    sotu = None
    if (DATA / "sotu_users.jsonl.gz").is_file():
        sotu = user_sentences(DATA / "sotu_users.jsonl.gz")
        results["sotu (tokens)"] = kgram_stats(first_tokens(sotu, args.tokens), with_users=False)
        results["sotu (users)"] = kgram_stats(first_users(sotu, args.users), with_users=True)
    sizes = {"vocab_size": args.vocab_size} if args.vocab_size else {}
    generators = [("generator", spec, sizes)]
    if not args.spec and not args.vocab_size:
        generators.append(("earlier generator", EARLIER_SPEC, {"vocab_size": EARLIER_VOCAB}))
    for name, gen_spec, gen_sizes in generators:
        with tempfile.TemporaryDirectory() as tmp:
            # Enough users for both the token-matched and the user-matched slice.
            n_users = max(args.users, int(args.tokens / gen_spec.mean_tokens_per_user * 1.3))
            paths = write_sample(
                tmp, n_users=n_users, seed=SEED, public_sentences=0, spec=gen_spec, **gen_sizes
            )
            generated = user_sentences(paths["users"])
        results[f"{name} (tokens)"] = kgram_stats(first_tokens(generated, args.tokens), with_users=False)
        results[f"{name} (users)"] = kgram_stats(first_users(generated, args.users), with_users=True)
    print_table(results)
    if not args.no_write:
        record = header(
            "sample_realism",
            {
                "tokens": args.tokens,
                "users": args.users,
                "spec": dataclasses.asdict(spec),
                "seed": SEED,
                "vocab_size": args.vocab_size or "write_sample default",
            },
        )
        record["results"] = results
        write_result("sample_realism.json", record)


if __name__ == "__main__":
    main()
