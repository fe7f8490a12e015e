"""Peak RSS of a whole `dpngram run` against its --memory-limit (issue 17, item 6).

`memory_limit` is the budget of the whole process: DuckDB gets `duckdb_memory_limit(limit)` of it
(src/dpngram/engines/duckdb.py), the rest is left to Python. This benchmark runs the real CLI in a
child process on a generated corpus and reads the child's peak RSS (`getrusage(RUSAGE_CHILDREN)`),
then reports it against the limit: the margin `peak - limit` is what docs/engines.md documents.

Usage::

    python benchmarks/memory_bench.py                       # 1M users, 2GB, T = 3 (~10 min on 2 cores)
    python benchmarks/memory_bench.py --users 100000 --quick   # a few minutes, writes nothing

Writes ``benchmarks/results/memory.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import git_commit, load_average, machine  # noqa: E402

from dpngram.engines.duckdb import duckdb_memory_limit, memory_bytes  # noqa: E402
from dpngram.text.sample import write_sample  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "memory.json"
DATA = ROOT / "benchmarks" / ".data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--memory-limit", default="2GB")
    parser.add_argument("--max-n", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="write nothing")
    args = parser.parse_args(argv)

    corpus = DATA / f"memory_sample_u{args.users}_s17"
    if not (corpus / "users.jsonl.gz").is_file():
        started = time.perf_counter()
        write_sample(corpus, n_users=args.users, seed=17, public_sentences=1000)
        print(f"generated {args.users:,} users in {time.perf_counter() - started:.0f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="dpngram-memory-") as work:
        command = [
            str(Path(sys.executable).parent / "dpngram"),
            "run",
            "--input", str(corpus / "users.jsonl.gz"),
            "--out", f"{work}/out",
            "--warehouse", f"{work}/wh",
            "--memory-limit", args.memory_limit,
            "--threads", str(args.threads),
            "--max-n", str(args.max_n),
            "--epsilon", "4",
            "--delta", "1e-8",
            "--quiet",
            "--json",
        ]  # fmt: skip
        started = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux: KiB
    limit = memory_bytes(args.memory_limit)
    record = {
        "benchmark": "memory",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "machine": machine(),
        "load_average_1min": load_average(),
        "parameters": {
            "users": args.users,
            "memory_limit": args.memory_limit,
            "duckdb_memory_limit": duckdb_memory_limit(args.memory_limit),
            "max_n": args.max_n,
            "threads": args.threads,
            "stages": "ingest, dpne.k1..kT, dpne.kgrams, validation, report (stage_budget dpne=1)",
        },
        "exit_code": proc.returncode,
        "seconds": round(seconds, 1),
        "peak_rss_bytes": peak,
        "memory_limit_bytes": limit,
        "peak_over_limit_bytes": peak - limit,
        "peak_over_limit_fraction": round(peak / limit - 1, 4),
        "stderr_tail": proc.stderr[-400:] if proc.returncode else "",
    }
    print(json.dumps({k: v for k, v in record.items() if k != "stderr_tail"}, indent=2))
    if proc.returncode:
        print(proc.stderr[-2000:], file=sys.stderr)
    if not args.quick:
        RESULTS.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
