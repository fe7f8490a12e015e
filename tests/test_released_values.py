"""A refactor leaves the released values as they were: a whole default release on a small sample
corpus, with seeded noise, gives exactly the values recorded in tests/data/released_values.json.

tests/test_release_layout.py checks the release's shape (files, columns, report sections, flags,
Params); this checks what is in it. The run is the CLI's default run (every stage of the default
split: vocabulary and DPNE levels, lm_counts, bayes, synth, validation, lm, report, then publish),
its steps taken one by one as :func:`dpngram.orchestration.plan.run_release` takes them, with one
difference: each step that draws noise gets a seeded source of its own
(:meth:`NoiseSource.seeded_for_tests`, seeded from the step's name, so a change in one stage's draws
does not shift every later stage's), and synth's post-processing generator (``simulation_rng(None)``,
not DP noise) a fixed seed. Nothing in the product changes: the CLI and the DAG cannot seed a run;
this test can only because it passes the source to each step itself, as tests/dpne_steps.py does.
``NoiseSource.secure()`` refuses to run while the release runs, so a stage that drew unseeded noise
fails here by name instead of making the test flaky.

What is recorded, per released file (:func:`file_record`): its rows in a canonical order (sorted;
floats as ``repr``, so exact), a sha256 of them, the row count and each column's digest; a small
file's rows verbatim (a re-record's diff shows the changed values), a larger one's digests of
buckets of about 32 rows keyed by the row's key columns (its non-float columns), so that a
mismatch names the rows around the change. Parquet tables are rows; JSON files (report.json, the
report parts, validation results) are their leaves (path, value), with the wall-clock timestamps
removed; the ARPA model is its n-grams (order, n-gram, log10 p, backoff); the model card its lines.
Renderings of those values are not compared (their bytes depend on fonts and library versions):
:data:`NOT_VALUES`. The input corpus is recorded too, so a change of the sample generator is told
apart from a change of the release.

Re-recording: ``DPNGRAM_RECORD_RELEASED_VALUES=1 pytest tests/test_released_values.py`` rewrites the
fixture instead of comparing. A commit that re-records must say in its body why the released values
changed on purpose (a stated default or model change); a refactor never re-records. Set the variable
to a file path instead of ``1`` to write the recording there, e.g. to record another commit's code
(``PYTHONPATH=<that worktree>/src``) and compare the two with :func:`compare` (how issue 53's
refactors were checked against e539b2f).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import dpngram
from dpngram.config import RunConfig
from dpngram.core.noise import NoiseSource
from dpngram.orchestration.plan import release_steps
from dpngram.release.context import RunContext, stage_timer
from dpngram.release.publish import prepare, publish_run
from dpngram.text.sample import write_sample

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "released_values.json"
RECORD_ENV = "DPNGRAM_RECORD_RELEASED_VALUES"

#: The sample corpus: every released table has rows (vocabulary ~140 words, k-grams up to k = 5).
SAMPLE = {"n_users": 1000, "seed": 11, "vocab_size": 300, "public_sentences": 3000}
RUN_ID = "released-values"
#: Steps that draw noise, besides the DPNE levels ``dpne.k1`` .. ``dpne.kT``.
NOISY_STEPS = {"triehh", "lm_counts", "bayes", "synth"}
#: The seed synth's post-processing generator gets (``simulation_rng(None)`` in a real run).
SIMULATION_SEED = 20261206

#: Released files whose bytes are renderings of values recorded elsewhere: not compared.
NOT_VALUES = {
    "plots/": "PNG renderings of report.json's numbers (bytes depend on fonts and matplotlib)",
    "report.html": "the HTML rendering of report.json",
    "validation/data_docs/": "Great Expectations' HTML pages (timestamped paths) of validation/results.json",
    "model/model.binary": "KenLM's binary form of model/model.arpa, compared line by line",
}
#: JSON keys whose values are wall-clock times of the run, not released values.
TIMESTAMP_KEYS = {"generated_at", "published_at"}
#: A file with at most this many rows is recorded verbatim; a larger one as buckets of ~32 rows.
VERBATIM_ROWS = 200
ROWS_PER_BUCKET = 32


# -- the seeded run -----------------------------------------------------------------------------
def _seed(step_name: str) -> int:
    return int.from_bytes(hashlib.sha256(step_name.encode()).digest()[:8], "big")


def _draws_noise(step_name: str) -> bool:
    return step_name in NOISY_STEPS or (step_name.startswith("dpne.k") and step_name != "dpne.kgrams")


def _refuse_secure(cls):
    raise AssertionError("a step drew unseeded noise (NoiseSource.secure()): give it a seeded source here")


def _seed_simulation_rngs(patch: pytest.MonkeyPatch) -> None:
    """Every stage module's ``simulation_rng`` with a fixed seed where the stage passes none."""
    import importlib
    import pkgutil

    import dpngram.stages
    from dpngram.core import noise

    original = noise.simulation_rng

    def seeded(seed: int | None = None):
        return original(SIMULATION_SEED if seed is None else seed)

    for module in pkgutil.iter_modules(dpngram.stages.__path__):
        stage = importlib.import_module(f"dpngram.stages.{module.name}")
        if getattr(stage, "simulation_rng", None) is original:
            patch.setattr(stage, "simulation_rng", seeded)


def seeded_release(workdir: Path) -> Path:
    """A whole default release of the sample corpus with seeded noise; returns the published release."""
    sample = write_sample(workdir / "sample", **SAMPLE)
    config = RunConfig.build(
        input=str(sample["users"]),
        public=str(sample["public"]),
        out=str(workdir / "out"),
        warehouse=str(workdir / "warehouse"),
        run_id=RUN_ID,
        memory_limit="1GB",
    )
    patch = pytest.MonkeyPatch()
    try:
        _seed_simulation_rngs(patch)
        patch.setattr(NoiseSource, "secure", classmethod(_refuse_secure))
        config = prepare(config)
        ctx = RunContext(config)
        for step in release_steps(config):
            noise = (
                {"noise": NoiseSource.seeded_for_tests(_seed(step.name))} if _draws_noise(step.name) else {}
            )
            with stage_timer(ctx, step.name):
                step.run(ctx, **noise)
        return Path(publish_run(ctx))
    finally:
        patch.undo()


# -- canonical rows -----------------------------------------------------------------------------
def _canonical(value: Any) -> Any:
    """A JSON-able value with every float as its ``repr`` (exact, and the same on every platform)."""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items())}
    return value


def _line(row: list[Any]) -> str:
    return json.dumps(_canonical(row), ensure_ascii=False, sort_keys=True)


def _parquet_rows(path: Path) -> tuple[list[list[str]], int, list[list[Any]]]:
    """(columns with types, key-column count, rows): key columns (the non-float ones) first."""
    table = pq.read_table(path, partitioning=None)
    fields = sorted(table.schema, key=lambda f: str(f.type) in ("double", "float"))
    keys = sum(str(f.type) not in ("double", "float") for f in fields)
    columns = [[f.name, str(f.type)] for f in fields]
    data = table.select([f.name for f in fields]).to_pylist()
    return columns, keys, [[row[f.name] for f in fields] for row in data]


def _json_leaves(value: Any, path: str = "") -> Iterator[list[Any]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            if key not in TIMESTAMP_KEYS:
                yield from _json_leaves(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            yield from _json_leaves(item, f"{path}[{i}]")
    else:
        yield [path, value]


def _manifest_rows(manifest: dict[str, Any]) -> list[list[Any]]:
    """MANIFEST.json without each file's size and hash (those of report.json and the renderings
    change with the clock and the fonts; each file's values are compared on their own)."""
    files = [[f"files.{name}", "listed"] for name in manifest.get("files", {}) if _compared(name)]
    rest = {k: v for k, v in manifest.items() if k != "files"}
    return files + list(_json_leaves(rest))


def _arpa_rows(path: Path) -> list[list[Any]]:
    """An ARPA file's n-grams: (order, n-gram, log10 p, backoff), the numbers as written."""
    rows, order = [], 0
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("\\") and line.endswith("-grams:"):
            order = int(line[1:].split("-")[0])
        elif line.startswith("ngram ") and "=" in line:
            rows.append([0, line, "header", ""])
        elif order and line and not line.startswith("\\"):
            fields = line.split("\t")
            rows.append([order, fields[1], fields[0], fields[2] if len(fields) > 2 else ""])
    return rows


def _file_rows(
    path: Path, relative: str, workdir: Path
) -> tuple[list[list[str]] | None, int, list[list[Any]]]:
    """(columns, key-column count, rows) of one released file."""
    if path.suffix == ".parquet":
        return _parquet_rows(path)
    if relative == "MANIFEST.json":
        return [["path", "text"], ["value", "json"]], 1, _manifest_rows(json.loads(path.read_text()))
    if path.suffix == ".json":
        text = path.read_text(encoding="utf-8").replace(str(workdir), "<workdir>")
        return [["path", "text"], ["value", "json"]], 1, list(_json_leaves(json.loads(text)))
    if path.suffix == ".arpa":
        return (
            [["order", "int"], ["ngram", "text"], ["log10_p", "text"], ["backoff", "text"]],
            2,
            _arpa_rows(path),
        )
    text = path.read_text(encoding="utf-8").replace(str(workdir), "<workdir>")
    return [["line", "int"], ["text", "text"]], 1, [[i + 1, t] for i, t in enumerate(text.splitlines())]


def _sha(lines: list[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8") + b"\n")
    return digest.hexdigest()


def _bucket(key_line: str, buckets: int) -> int:
    return int.from_bytes(hashlib.sha256(key_line.encode("utf-8")).digest()[:4], "big") % buckets


def _bucket_count(rows: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(rows, 1) / ROWS_PER_BUCKET)))


def file_record(columns: list[list[str]] | None, keys: int, rows: list[list[Any]]) -> dict[str, Any]:
    """One file's record (:func:`_file_rows`): its columns, row count, digests, and its rows or
    their buckets' digests."""
    ordered = sorted(rows, key=_line)
    lines = [_line(row) for row in ordered]
    record: dict[str, Any] = {
        "columns": columns,
        "key_columns": keys,
        "rows": len(lines),
        "sha256": _sha(lines),
    }
    record["column_sha256"] = {
        name: _sha([_line([row[i]]) for row in ordered])[:16] for i, (name, _) in enumerate(columns or [])
    }
    if len(lines) <= VERBATIM_ROWS:
        record["lines"] = lines
        return record
    record["buckets"] = [_sha(b)[:10] for b in _buckets(lines, keys, _bucket_count(len(lines)))]
    return record


def _compared(relative: str) -> bool:
    return not any(relative == p or (p.endswith("/") and relative.startswith(p)) for p in NOT_VALUES)


def released_rows(
    release: Path, workdir: Path
) -> dict[str, tuple[list[list[str]] | None, int, list[list[Any]]]]:
    """Every compared released file's (columns, key-column count, rows), by its path in the release."""
    files = sorted(p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file())
    return {f: _file_rows(release / f, f, workdir) for f in files if _compared(f)}


def input_digests(workdir: Path) -> dict[str, str]:
    """The sample corpus's files, so that a change of the generator is not taken for the release's."""
    sample = workdir / "sample"
    return {
        p.relative_to(sample).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(sample.rglob("*"))
        if p.is_file()
    }


# -- comparison ---------------------------------------------------------------------------------
def _key(line: str, keys: int) -> str:
    return _line(json.loads(line)[:keys])


def _text_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """A text file's lines (recorded sorted as JSON) back in order, as a unified diff."""
    import difflib

    def text(record: dict[str, Any]) -> list[str]:
        return [t for _, t in sorted(json.loads(line) for line in record.get("lines", []))]

    diff = difflib.unified_diff(text(old), text(new), "recorded", "now", n=0, lineterm="")
    return [f"    {line}" for line in diff]


def _verbatim_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    if old["columns"] and old["columns"][0] == ["line", "int"]:
        return _text_differences(old, new)
    keys = old["key_columns"]
    before = {_key(line, keys): line for line in old["lines"]}
    after = {_key(line, keys): line for line in new["lines"]}
    out = [f"    changed {before[k]} -> {after[k]}" for k in before if k in after and before[k] != after[k]]
    out += [f"    removed {before[k]}" for k in before if k not in after]
    out += [f"    added   {after[k]}" for k in after if k not in before]
    return out


def _buckets(lines: list[str], keys: int, count: int) -> list[list[str]]:
    """The rows (canonical lines, sorted) in ``count`` buckets by their key columns' hash."""
    buckets: list[list[str]] = [[] for _ in range(count)]
    for line in lines:
        buckets[_bucket(_key(line, keys), count)].append(line)
    return buckets


def _bucket_differences(old: dict[str, Any], new_rows: list[str] | None, new: dict[str, Any]) -> list[str]:
    """The buckets that differ and the rows the first of them holds now. The fresh rows are put in
    the recorded number of buckets, so a table that grew past a power of two still compares."""
    count = len(old["buckets"])
    if new_rows is not None:
        fresh = _buckets(new_rows, old["key_columns"], count)
        digests = [_sha(bucket)[:10] for bucket in fresh]
    elif len(new.get("buckets", [])) == count:
        fresh, digests = None, new["buckets"]
    else:
        return [f"    {new['rows']} rows now in other buckets than the recorded {count}"]
    changed = [i for i, (a, b) in enumerate(zip(old["buckets"], digests, strict=True)) if a != b]
    out = [f"    {len(changed)} of {count} buckets of rows differ: {changed[:20]}"]
    if fresh is not None:
        rows = fresh[changed[0]]
        out.append(
            f"    bucket {changed[0]} now holds these {len(rows)} rows (one or more changed, added or gone):"
        )
        out += [f"      {line}" for line in rows[: ROWS_PER_BUCKET * 2]]
    return out


def describe_difference(
    name: str, old: dict[str, Any], new: dict[str, Any], new_lines: list[str] | None
) -> list[str]:
    """What differs in one file, for a reviewer: row counts, the columns that changed, and the first
    differing rows (old and new for a verbatim file, the new rows around the change otherwise)."""
    out = [f"  {name}:"]
    if old["columns"] != new["columns"]:
        out.append(f"    columns {old['columns']} -> {new['columns']}")
    if old["rows"] != new["rows"]:
        out.append(f"    rows {old['rows']} -> {new['rows']}")
    columns = sorted(
        c for c in old["column_sha256"] if old["column_sha256"][c] != new["column_sha256"].get(c)
    )
    out.append(f"    columns whose values differ: {', '.join(columns) or 'none (row order only)'}")
    if "lines" in old:
        out += _verbatim_differences(old, {**new, "lines": new.get("lines", new_lines or [])})[:20]
    else:
        out += _bucket_differences(old, new_lines, new)
    return out


def compare(
    recorded: dict[str, Any], fresh: dict[str, Any], fresh_lines: dict[str, list[str]] | None = None
) -> list[str]:
    """Lines describing every difference between two recordings (empty when they agree)."""
    out: list[str] = []
    if recorded["input"] != fresh["input"]:
        out.append("the sample corpus itself differs (the generator changed): re-record, and say so")
    old, new = recorded["files"], fresh["files"]
    for name in sorted(set(old) - set(new)):
        out.append(f"  {name}: recorded, not released now")
    for name in sorted(set(new) - set(old)):
        out.append(f"  {name}: released now, not recorded")
    for name in sorted(set(old) & set(new)):
        if old[name]["sha256"] != new[name]["sha256"]:
            out += describe_difference(name, old[name], new[name], (fresh_lines or {}).get(name))
    return out


def _commit() -> str:
    """The commit of the dpngram code this process runs (``-dirty`` with uncommitted changes)."""
    where = str(Path(dpngram.__file__).parent)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", where, *args], capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        "-dirty" if git("status", "--porcelain", "--", "src", "sql") else ""
    )


def test_a_default_release_releases_the_recorded_values(tmp_path: Path) -> None:
    """The fixture's values, or (with DPNGRAM_RECORD_RELEASED_VALUES set) a new recording."""
    rows = released_rows(seeded_release(tmp_path), tmp_path)
    fresh = {"input": input_digests(tmp_path), "files": {name: file_record(*r) for name, r in rows.items()}}
    target = os.environ.get(RECORD_ENV)
    if target:
        path = FIXTURE if target == "1" else Path(target)
        header = {
            "recorded_at_commit": _commit(),
            "how_to_re_record": f"{RECORD_ENV}=1 pytest tests/test_released_values.py; the commit body "
            "says why the released values changed on purpose (see the test module's docstring)",
            "sample": SAMPLE,
            "python": sys.version.split()[0],
        }
        path.write_text(
            json.dumps({**header, **fresh}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        pytest.skip(f"recorded the released values in {path}")
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    lines = {name: sorted(_line(row) for row in r[2]) for name, r in rows.items()}
    differences = compare(recorded, fresh, lines)
    assert not differences, (
        f"released values differ from {FIXTURE.name} (recorded at {recorded['recorded_at_commit']}):\n"
        + "\n".join(differences)
    )


def _table(path: Path, rows: int, changed_row: int | None = None) -> tuple[str, tuple]:
    """A lm_counts-like parquet file of ``rows`` rows; ``changed_row``'s count is one more."""
    import pyarrow as pa

    counts = [float(i) + 0.5 + (i == changed_row) for i in range(rows)]
    table = pa.table({"ngram": [f"w{i} x" for i in range(rows)], "noisy_count": counts})
    pq.write_table(table, path)
    return path.name, _file_rows(path, path.name, path.parent)


@pytest.mark.parametrize("rows", [5, 3 * VERBATIM_ROWS])
def test_a_difference_names_the_file_column_and_rows(tmp_path: Path, rows: int) -> None:
    """What the reviewer reads on a mismatch: the file, the column that changed, and the changed row
    (old and new for a small file; among the rows of its bucket for a large one)."""
    name, before = _table(tmp_path / "counts.parquet", rows)
    _, after = _table(tmp_path / "counts.parquet", rows, changed_row=3)
    recorded = {"input": {}, "files": {name: file_record(*before)}}
    fresh = {"input": {}, "files": {name: file_record(*after)}}
    assert compare(recorded, recorded) == []
    message = "\n".join(compare(recorded, fresh, {name: sorted(_line(r) for r in after[2])}))
    assert f"  {name}:" in message and "columns whose values differ: noisy_count" in message
    if rows <= VERBATIM_ROWS:
        assert 'changed ["w3 x", "3.5"] -> ["w3 x", "4.5"]' in message
    else:
        assert '["w3 x", "4.5"]' in message and "1 of 32 buckets of rows differ" in message
