"""What integer token ids would save (issue 51 item 2), measured before building them: the product's
heaviest string statements at 1M users, each against the same statement on 32-bit token ids, on a
generated corpus, alternating in one process.

    .venv/bin/python benchmarks/studies/token_ids_study.py [--users 100000] [--repeats 3]

Today every sentence is a ``VARCHAR[]`` of tokens: ingest inserts the strings (about 60% of ingest),
the vocabulary's per-user lists hash them (``dpsu/user_kept_lists_coded.sql``), and level 1 and 2
join them to the released words (``dpne/occurrences_level1.sql``, ``dpne/candidates_level2.sql``).
With ids, ingest would map each batch's tokens to ids through one run-wide dictionary (token -> id,
private, kept in the warehouse; here grown batch by batch with each batch's new words and applied
with polars' ``replace_strict``: polars 2's named Categorical did not give one mapping across
casts here) and insert ``INTEGER[]``; the levels would join ids. The four steps, each way
(``strings`` / ``ids``):

* ``insert``: the sentence batches (as tokenized by the product) into a fresh DuckDB file, then a
  CHECKPOINT; ``ids`` includes the cast to ids and writing the dictionary;
* ``user_items``: every user's distinct items, hashed (the vocabulary's kept lists);
* ``level1``: one row per position whose token is one of the most frequent 30% of the words (the
  released vocabulary's stand-in), with its word id (the level-1 occurrences);
* ``level2``: one row per adjacent pair of such positions with the pair's key (level 2's candidates).

Each step's rows are checked equal between the two ways (counts and sums of the ids, which are the
same for both: the words are numbered by a shared order). Not a product change: this only says
how much the change is worth. Writes ``benchmarks/results/token_ids.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import git_commit, load_average, machine, now, write_result  # noqa: E402

#: The generated corpus: scale_bench's (``write_sample(n_users, seed=20261124, vocab_size=50000)``).
SEED, VOCAB = 20261124, 50_000
#: The share of the distinct words that stands in for the released vocabulary S_1.
RELEASED_SHARE = 0.3

#: The three statements after the insert; ``{key}`` is the vocabulary's column the sentence's tokens
#: match: ``token`` (the text) for the strings, ``tid`` (the dictionary id) for the ids.
STEPS = {
    "user_items": """
        CREATE OR REPLACE TABLE items AS
        SELECT user_id, list_distinct(list(hash(t))) AS items
        FROM (SELECT user_id, unnest(tokens) AS t FROM s) GROUP BY user_id""",
    "level1": """
        CREATE OR REPLACE TABLE occ AS
        SELECT p.sid, p.pos, v.gid
        FROM (SELECT rowid AS sid, tokens, unnest(generate_series(1, array_length(tokens))) AS pos
              FROM s) AS p
        JOIN vocab AS v ON v.{key} = p.tokens[p.pos]""",
    "level2": """
        CREATE OR REPLACE TABLE pairs AS
        SELECT p.sid, p.pos, CAST(a.gid AS BIGINT) * 4294967296 + b.gid AS key
        FROM (SELECT rowid AS sid, tokens, unnest(generate_series(1, array_length(tokens))) AS pos
              FROM s) AS p
        JOIN vocab AS a ON a.{key} = p.tokens[p.pos]
        JOIN vocab AS b ON b.{key} = p.tokens[p.pos + 1]
        WHERE p.pos < array_length(p.tokens)""",
}
KEY = {"strings": "token", "ids": "tid"}

#: What each step's result is checked by: equal between the two ways.
CHECKS = {
    "user_items": "SELECT count(*), sum(array_length(items)) FROM items",
    "level1": "SELECT count(*), sum(gid), sum(pos) FROM occ",
    "level2": "SELECT count(*), sum(key % 1000003), sum(pos) FROM pairs",
}


def sentence_frames(path: Path) -> list[Any]:
    """The corpus's sentence batches as the product tokenizes them (user_id, doc_id, sent_id,
    tokens)."""
    from dpngram.text.records import jsonl_batches, tokenize_batch

    return [
        tokenize_batch(b, True, lambda d: (str(path), d))[1] for b in jsonl_batches(path, "user_id", "text")
    ]


def insert(con: Any, frames: list[Any], way: str) -> None:
    """The sentences into table ``s``; ``ids``: as ids of a dictionary grown batch by batch,
    written as table ``dictionary``."""
    import polars as pl

    kind = "VARCHAR[]" if way == "strings" else "INTEGER[]"
    con.execute(f"CREATE TABLE s (user_id VARCHAR, doc_id BIGINT, sent_id INTEGER, tokens {kind})")
    known = pl.DataFrame(schema={"token": pl.String, "tid": pl.Int32})  # the dictionary so far
    for frame in frames:
        if way == "ids":
            words = frame.get_column("tokens").explode().unique().drop_nulls()
            new = words.filter(~words.is_in(known.get_column("token").implode())).sort()
            ids = pl.int_range(known.height, known.height + new.len(), eager=True, dtype=pl.Int32)
            known = pl.concat([known, pl.DataFrame({"token": new, "tid": ids})])
            old, to = known.get_column("token"), known.get_column("tid")
            frame = frame.with_columns(
                pl.col("tokens").list.eval(pl.element().replace_strict(old, to, return_dtype=pl.Int32))
            )
        con.register("batch", frame)
        con.execute("INSERT INTO s SELECT user_id, doc_id, sent_id, tokens FROM batch")
        con.unregister("batch")
    if way == "ids":
        con.register("words", known)
        con.execute("CREATE TABLE dictionary AS SELECT tid, token FROM words")
        con.unregister("words")
    con.execute("CHECKPOINT")


def vocabulary(con: Any, way: str, released: list[str]) -> None:
    """Table ``vocab``: the released stand-in with word ids gid in word order, and (``ids``) each
    word's token id."""
    import polars as pl

    con.register("released", pl.DataFrame({"token": released}))
    if way == "strings":
        con.execute(
            "CREATE OR REPLACE TABLE vocab AS "
            "SELECT token, row_number() OVER (ORDER BY token) AS gid FROM released"
        )
    else:
        con.execute(
            "CREATE OR REPLACE TABLE vocab AS SELECT d.tid, row_number() OVER (ORDER BY r.token) AS gid "
            "FROM released AS r JOIN dictionary AS d ON d.token = r.token"
        )
    con.unregister("released")


def main() -> None:
    import duckdb

    from dpngram.text.sample import write_sample

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="token-ids-") as tmp:
        write_sample(Path(tmp) / "corpus", n_users=args.users, seed=SEED, vocab_size=VOCAB)
        frames = sentence_frames(Path(tmp) / "corpus" / "users.jsonl.gz")
        counts: dict[str, int] = {}
        for frame in frames:
            for word, n in frame.get_column("tokens").explode().value_counts().iter_rows():
                counts[word] = counts.get(word, 0) + n
        ranked = sorted(counts, key=lambda w: (-counts[w], w))
        released = ranked[: int(len(ranked) * RELEASED_SHARE)]
        seconds: dict[str, dict[str, list[float]]] = {
            s: {"strings": [], "ids": []} for s in ("insert", *STEPS)
        }
        checks: dict[str, dict[str, Any]] = {}
        load_before = load_average()
        for repeat in range(args.repeats):
            for way in ("strings", "ids"):
                con = duckdb.connect(str(Path(tmp) / f"{way}{repeat}.duckdb"))
                con.execute("SET threads = 2; SET memory_limit = '4GB'")
                started = time.perf_counter()
                insert(con, frames, way)
                seconds["insert"][way].append(round(time.perf_counter() - started, 3))
                vocabulary(con, way, released)
                for step, sql in STEPS.items():
                    started = time.perf_counter()
                    con.execute(sql.format(key=KEY[way]))
                    seconds[step][way].append(round(time.perf_counter() - started, 3))
                    checks.setdefault(step, {})[way] = [int(v) for v in con.execute(CHECKS[step]).fetchone()]
                con.close()
                (Path(tmp) / f"{way}{repeat}.duckdb").unlink()
        rows = {}
        for step, ways in seconds.items():
            medians = {way: statistics.median(values) for way, values in ways.items()}
            rows[step] = {
                "seconds": ways,
                "median_seconds": medians,
                "ids_over_strings": round(medians["ids"] / medians["strings"], 3),
                "same_result": step == "insert" or checks[step]["strings"] == checks[step]["ids"],
                "checks": checks.get(step),
            }
            print(
                f"{step:<11} strings {medians['strings']:6.2f} s   ids {medians['ids']:6.2f} s   "
                f"ratio {rows[step]['ids_over_strings']:.2f}   same {rows[step]['same_result']}"
            )
        total = {
            way: round(sum(r["median_seconds"][way] for r in rows.values()), 3) for way in ("strings", "ids")
        }
        print(f"{'all four':<11} strings {total['strings']:6.2f} s   ids {total['ids']:6.2f} s")
        write_result(
            "token_ids.json",
            {
                "benchmark": "token_ids_study",
                "date": now(),
                "git_commit": git_commit(),
                "machine": machine(),
                "parameters": {
                    "users": args.users,
                    "repeats": args.repeats,
                    "corpus": f"write_sample(n_users, seed={SEED}, vocab_size={VOCAB})",
                    "sentences": sum(f.height for f in frames),
                    "distinct_words": len(ranked),
                    "released_stand_in": len(released),
                    "duckdb_threads": 2,
                },
                "load_average_before": load_before,
                "load_average_after": load_average(),
                "steps": rows,
                "median_seconds_all_four": total,
            },
        )


if __name__ == "__main__":
    main()
