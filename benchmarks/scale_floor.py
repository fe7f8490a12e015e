"""The machine floor of the scale benchmark: DPNE's data work in bare DuckDB SQL, nothing else.

``scale_bench.py`` divides each stage's seconds of a ``dpngram run`` by the seconds this floor
takes for the same data work on the same corpus in the same session (issue "speed close to the
machine's floor", item 1). Seconds differ by 2x between machine types and with the load of other
jobs; the ratio of product to floor on one machine, measured minutes apart, is the figure meant
to hold on every machine type.

:func:`run_floor` runs one fresh Python process that holds only an in-memory DuckDB database
(DuckDB's default threads; ``memory_limit`` = the run's whole ``--memory-limit``, where the product
keeps 30% of it for its Python side; ``preserve_insertion_order=false`` as the product sets it;
spill to a scratch folder), so its time and peak RSS are its own. It times, each on its own:

* ``read_tokenize`` — DuckDB's JSON reader over ``users.jsonl.gz`` and the tokenizer as SQL string
  functions, in one statement, into ``sentences(uid, tokens VARCHAR[])`` (uid = ``hash(user_id)``,
  a 64-bit integer id; a sentence's id is its ``rowid``);
* ``hist_1`` — the per-user-distinct unigram histogram (users holding each token);
* ``hist_K`` for K = 2..T — the per-user-distinct histogram of the K-grams whose (K-1)-prefix and
  (K-1)-suffix are both in the product's released S_(K-1) (both-side pruning, the candidate
  restriction DPNE applies; S_1 = the released words with ``kgram_seed``). Level 2 reads the
  sentences' token lists; level K > 2 keeps the level K-1 candidates whose (K-1)-gram was
  released (a semi-join with S_(K-1)) and joins each to its right neighbour, so like the
  product the cost follows the released sets, not all K-grams of the text. A K-gram is keyed by
  the ids of its prefix and suffix in S_(K-1), as in the product: integers, not growing strings
  (at 100k users hist_3 took 5 s on the text of the n-grams, 1.5 s on keys).

Not timed: loading S_1 .. S_(T-1) from the release (small; the product reads them as it makes
them) and the process's start-up. The histograms were checked against a naive one (every K-gram
of every sentence, prefix and suffix looked up as text): the same counts at 20k users.

Left out, all of which the product does: the DP (user numbering, contribution bounding beyond
DISTINCT, noise, thresholds, the ledger), the quarantine and row-identity bookkeeping of ingest,
the raw text kept in the warehouse, exact statistics, validation, the report, writing files,
and the Python interpreter's start-up and imports. The floor's tokenizer differs from the product's
(:mod:`dpngram.text.tokenizer`, polars/Rust regex) only where plain DuckDB cannot follow it:
no Unicode NFKC (DuckDB has NFC only; the product skips NFKC on ASCII text anyway), and
lower-casing is DuckDB's ``lower`` (per code point; Rust's also handles the final sigma). RE2's
``\\s`` is ASCII whitespace, so Unicode whitespace is spelled out as a class below. On the
generated ASCII corpora the tokens are the same.

Usage: ``python benchmarks/scale_floor.py USERS.jsonl.gz RELEASE_DIR [--max-n 5]
[--memory-limit 4GB] [--threads N]`` prints the phases' seconds as JSON. Not a ``*_bench.py``:
``make bench`` does not run it on its own.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: Unicode White_Space (what the product's Rust regex means by \s); RE2's \s is ASCII only.
_WS = r"\t\n\x{0B}\f\r\x{85}\p{Z}"

#: The product's sentence break (dpngram.text.tokenizer): a run of . ! ? with closing quotes or
#: brackets followed by whitespace, or a line break with the whitespace around it; both -> "\n".
SENTENCE_BREAK = (
    rf"([.!?]+[\"')\]}}\x{{00BB}}\x{{201D}}]*)[{_WS}]+"
    rf"|[{_WS}]*(?:\r\n|[\n\r\x{{0B}}\x{{0C}}\x{{85}}\x{{2028}}\x{{2029}}])[{_WS}]*"
)

#: The product's TOKEN_PATTERN, with \S spelled as "not Unicode whitespace".
_WORD = r"\p{L}\p{M}\p{N}"
TOKEN = rf"[{_WORD}]*\p{{L}}[{_WORD}]*(?:['\-][{_WORD}]+)*|\p{{N}}+(?:[.,]\p{{N}}+)*|[^{_WS}]\p{{M}}*"

#: What becomes a space: the zero-width space (a word separator) and control characters that are
#: not whitespace. One regex pass: it is applied before the format characters are deleted.
_SPACE_LIKE = rf"\x{{200B}}|[^\P{{Cc}}{_WS}]"

#: Format characters (soft hyphen, zero-width joiner, BOM, ...): deleted.
_FORMAT = r"\p{Cf}"

#: Typographic apostrophes and hyphens -> ASCII (the product's character map). Five ``replace``
#: calls: DuckDB's ``translate`` took 9x longer on the 100k-user corpus.
_TYPOGRAPHIC = {"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2010": "-", "\u2011": "-"}

#: Sentence ids are spread by this stride so that loc = sentence * stride + position is one
#: integer whose "next position" is loc + 1 (the product's SENTENCE_STRIDE).
STRIDE = 1 << 24


def _lit(text: str) -> str:
    """A SQL string literal (regexes are inlined: DuckDB compiles a constant pattern once)."""
    return "'" + text.replace("'", "''") + "'"


def _tokenized_text(column: str) -> str:
    """SQL: ``column`` lower-cased, cleaned as the product cleans it, and with every sentence break
    turned into "\\n". Space-like characters go before format characters are deleted (the product
    deletes first): the same text, as U+200B, the one format character kept, became a space."""
    expr = f"regexp_replace(lower({column}), {_lit(_SPACE_LIKE)}, ' ', 'g')"
    expr = f"regexp_replace({expr}, {_lit(_FORMAT)}, '', 'g')"
    for typographic, ascii_char in _TYPOGRAPHIC.items():
        expr = f"replace({expr}, {_lit(typographic)}, {_lit(ascii_char)})"
    return f"regexp_replace({expr}, {_lit(SENTENCE_BREAK)}, '\\1' || chr(10), 'g')"


def read_tokenize_sql(users: Path) -> str:
    """One statement: read the JSONL, tokenize, keep the sentences with a token. A sentence has a
    token exactly when it has a non-whitespace character (TOKEN's last branch matches any): testing
    that on the text is cheap, where a filter on the token list had DuckDB extract the tokens twice
    (4.9 s against 3.3 s for the statement on the 100k-user corpus)."""
    source = (
        f"read_json({_lit(str(users))}, format = 'newline_delimited', "
        "columns = {user_id: 'VARCHAR', text: 'VARCHAR'})"
    )
    visible = _lit(f"[^{_WS}]")
    return f"""
CREATE TABLE sentences AS
SELECT uid, regexp_extract_all(sentence, {_lit(TOKEN)}) AS tokens
FROM (
    SELECT hash(user_id) AS uid, unnest(string_split({_tokenized_text("text")}, chr(10))) AS sentence
    FROM {source}
    WHERE regexp_matches(user_id, {visible}) AND regexp_matches(text, {visible})
)
WHERE regexp_matches(sentence, {visible})
"""


HIST_1 = """
CREATE TABLE hist_1 AS
SELECT token, count(*) AS users
FROM (SELECT DISTINCT uid, token FROM (SELECT uid, unnest(tokens) AS token FROM sentences))
GROUP BY token
"""

#: A k-gram's key from the ids of its (k-1)-prefix and (k-1)-suffix in S_(k-1) (the product's
#: key, so the level tables hold integers, not growing strings).
SHIFT = 4294967296


def level_table_sql(k: int, released: str) -> str:
    """S_k as ``s_K(gid, key, ngram)`` from the released n-grams (``released`` selects a column
    ngram): ids in n-gram order; for k > 1 the key from the prefix's and suffix's ids in
    S_(k-1). Setup, not timed: the released sets are small inputs of the floor."""
    if k == 1:
        return f"""
CREATE TABLE s_1 AS
SELECT CAST(row_number() OVER (ORDER BY ngram) AS INTEGER) AS gid, CAST(0 AS BIGINT) AS key, ngram
FROM ({released})
"""
    return f"""
CREATE TABLE s_{k} AS
SELECT CAST(row_number() OVER (ORDER BY g.ngram) AS INTEGER) AS gid,
       CAST(a.gid AS BIGINT) * {SHIFT} + b.gid AS key,
       g.ngram
FROM (SELECT ngram, string_split(ngram, ' ') AS t FROM ({released})) AS g
JOIN s_{k - 1} AS a ON a.ngram = array_to_string(g.t[1:{k - 1}], ' ')
JOIN s_{k - 1} AS b ON b.ngram = array_to_string(g.t[2:{k}], ' ')
"""


#: Level-2 candidates straight from the token lists: both tokens in S_1. loc = sentence * stride
#: + position (the sentence is the row's rowid).
CANDIDATES_2 = f"""
CREATE TABLE cand_2 AS
SELECT s.uid, s.sid * {STRIDE} + s.p AS loc, CAST(a.gid AS BIGINT) * {SHIFT} + b.gid AS key
FROM (
    SELECT rowid AS sid, uid, tokens, unnest(generate_series(1, len(tokens) - 1)) AS p
    FROM sentences
    WHERE len(tokens) > 1
) AS s
JOIN s_1 AS a ON a.ngram = s.tokens[s.p]
JOIN s_1 AS b ON b.ngram = s.tokens[s.p + 1]
WHERE s.p + 1 < {STRIDE}
"""


def candidates_sql(k: int) -> str:
    """Level-k candidates (k > 2): the level k-1 candidates whose (k-1)-gram is in S_(k-1), each
    joined to its right neighbour (also kept): prefix and suffix both released. A self-join on
    loc + 1: on the 100k-user corpus half the time of the product's lead() window over each
    user's positions (which the product uses to keep the build side small at 1M users)."""
    return f"""
CREATE TABLE kept_{k - 1} AS
SELECT c.uid, c.loc, s.gid
FROM cand_{k - 1} AS c
JOIN s_{k - 1} AS s ON s.key = c.key;
DROP TABLE cand_{k - 1};
CREATE TABLE cand_{k} AS
SELECT a.uid, a.loc, CAST(a.gid AS BIGINT) * {SHIFT} + b.gid AS key
FROM kept_{k - 1} AS a
JOIN kept_{k - 1} AS b ON b.loc = a.loc + 1;
DROP TABLE kept_{k - 1};
"""


def histogram_sql(k: int) -> str:
    """The per-user-distinct histogram of the level-k candidates: users holding each key."""
    return f"""
CREATE TABLE hist_{k} AS
SELECT key, count(*) AS users
FROM (SELECT DISTINCT uid, key FROM cand_{k})
GROUP BY key
"""


def released_sets(release: Path, max_n: int) -> dict[int, str]:
    """SQL per k = 1..T-1 selecting S_k's n-grams (column ``ngram``) from the release's files
    (dpngram.release.layout: ``released/vocabulary.parquet`` token + kgram_seed, S_1 being the
    seed words; ``released/kgrams/k=K.parquet``, else ``released/kgrams.parquet``: k, ngram)."""
    import duckdb

    released = release / "released"
    vocabulary = f"read_parquet({_lit(str(released / 'vocabulary.parquet'))})"
    columns = {row[0] for row in duckdb.sql(f"DESCRIBE SELECT * FROM {vocabulary}").fetchall()}
    seeds = " WHERE kgram_seed" if "kgram_seed" in columns else ""
    sets = {1: f"SELECT token AS ngram FROM {vocabulary}{seeds}"}
    for k in range(2, max_n):
        level = released / "kgrams" / f"k={k}.parquet"
        if level.exists():
            sets[k] = f"SELECT ngram FROM read_parquet({_lit(str(level))})"
        else:
            merged = _lit(str(released / "kgrams.parquet"))
            sets[k] = f"SELECT ngram FROM read_parquet({merged}) WHERE k = {k}"
    return sets


def measure(
    users: Path, release: Path, max_n: int, memory_limit: str, threads: int | None, spill: Path
) -> dict[str, Any]:
    """In this process: time each phase on a fresh in-memory DuckDB database (see the module
    docstring). Returns ``{"seconds": {phase: s}, "total_seconds", "rows": {table: n},
    "peak_rss_bytes", "threads", "duckdb"}``."""
    import duckdb

    config: dict[str, Any] = {
        "memory_limit": memory_limit,
        "preserve_insertion_order": False,
        "temp_directory": str(spill),
    }
    if threads:
        config["threads"] = threads
    con = duckdb.connect(":memory:", config=config)
    con.execute("SET enable_progress_bar = false")
    # S_1 .. S_(T-1): small released inputs, loaded before the clock starts
    for k, select in released_sets(release, max_n).items():
        con.execute(level_table_sql(k, select))
    phases = [("read_tokenize", read_tokenize_sql(users), "sentences"), ("hist_1", HIST_1, "hist_1")]
    for k in range(2, max_n + 1):
        build = CANDIDATES_2 if k == 2 else candidates_sql(k)
        phases.append((f"hist_{k}", build + ";\n" + histogram_sql(k), f"hist_{k}"))
    seconds: dict[str, float] = {}
    rows: dict[str, int] = {}
    for name, sql, table in phases:
        started = time.perf_counter()
        con.execute(sql)
        seconds[name] = round(time.perf_counter() - started, 3)
        rows[table] = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    threads_used = con.execute("SELECT current_setting('threads')").fetchone()[0]
    con.close()
    return {
        "seconds": seconds,
        "total_seconds": round(sum(seconds.values()), 3),
        "rows": rows,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "threads": threads_used,
        "duckdb": duckdb.__version__,
    }


def run_floor(
    users: Path,
    release: Path,
    max_n: int,
    memory_limit: str,
    threads: int | None = None,
    scratch: Path | None = None,
) -> dict[str, Any]:
    """The floor for one corpus, measured in a fresh process (its own time and peak RSS): the
    seconds per phase (``read_tokenize``, ``hist_1`` .. ``hist_T``), their total, the rows of each
    phase's table, the process's peak RSS. ``release``: the product run's release directory (for
    S_1 .. S_(T-1)); ``scratch``: where DuckDB may spill (a temporary folder by default, removed)."""
    spill = Path(tempfile.mkdtemp(prefix="scale_floor_", dir=scratch))
    args = [sys.executable, __file__, str(users), str(release), "--max-n", str(max_n)]
    args += ["--memory-limit", memory_limit, "--spill", str(spill)]
    if threads:
        args += ["--threads", str(threads)]
    try:
        proc = subprocess.run(args, capture_output=True, text=True)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"scale_floor failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("users", type=Path, help="the corpus's users.jsonl.gz")
    parser.add_argument("release", type=Path, help="the product run's release directory")
    parser.add_argument("--max-n", type=int, default=5, help="T, the longest n-gram")
    parser.add_argument("--memory-limit", default="4GB", help="DuckDB's memory_limit")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB's threads (default: its own)")
    parser.add_argument("--spill", type=Path, default=None, help="DuckDB's temp_directory")
    args = parser.parse_args()
    if args.spill is None:
        print(json.dumps(run_floor(args.users, args.release, args.max_n, args.memory_limit, args.threads)))
        return
    result = measure(args.users, args.release, args.max_n, args.memory_limit, args.threads, args.spill)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
