"""Great Expectations harness: suites pass on good tables and fail, readably, on bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpngram.config import RunConfig
from dpngram.core.errors import ValidationFailed
from dpngram.release.context import RunContext, read_parts, record_part
from dpngram.release.layout import DATA_DOCS_DIR, KGRAMS, VALIDATION_RESULTS, VOCABULARY
from dpngram.stages.validate import validate_run
from dpngram.validation import SUITES

RELEASED = ["released.vocabulary", "released.kgrams"]
VOCAB = ["a", "b", "c", "d"]
GOOD_KGRAMS = [(2, "a b"), (2, "b c"), (2, "c d"), (3, "a b c"), (3, "b c d")]


def make_ctx(tmp_path: Path, **overrides) -> RunContext:
    values = {
        "input": str(tmp_path / "input.jsonl"),
        "out": str(tmp_path / "out"),
        "warehouse": str(tmp_path / "wh.duckdb"),
        "run_id": "validate-test",
        "max_n": 3,
        "max_quarantine_fraction": 1,  # the inputs here hold malformed rows on purpose
        **overrides,
    }
    return RunContext(RunConfig.build(**values))


def write_release(ctx: RunContext, vocab=VOCAB, kgrams=GOOD_KGRAMS, extra: dict | None = None) -> None:
    vocab_path = ctx.release.path(VOCABULARY)
    seeds = pa.array([True] * len(vocab), pa.bool_())
    pq.write_table(pa.table({"token": pa.array(vocab, pa.string()), "kgram_seed": seeds}), vocab_path)
    columns = {
        "k": pa.array([k for k, _ in kgrams], pa.int32()),
        "ngram": pa.array([g for _, g in kgrams], pa.string()),
    }
    columns.update(extra or {})
    pq.write_table(pa.table(columns), ctx.release.path(KGRAMS))


def failures_of(ctx: RunContext, **kw) -> list[str]:
    with pytest.raises(ValidationFailed) as info:
        validate_run(ctx, **kw)
    message = str(info.value)
    assert "Traceback" not in message
    assert len(message.splitlines()) == len(info.value.failures) + 1  # header + one line per failure
    return info.value.failures


def test_registry_holds_the_built_in_suites():
    assert {"ingest", "released.vocabulary", "released.kgrams"} <= set(SUITES)
    assert SUITES["ingest"].private and not SUITES["released.kgrams"].private


def test_good_release_passes_and_writes_results_and_docs(tmp_path):
    ctx = make_ctx(tmp_path)
    write_release(ctx)
    part = validate_run(ctx, suites=RELEASED)
    assert part["success"] is True
    assert part["suites_run"] == RELEASED
    assert {s["suite"] for s in part["suites"]} == {
        "released.vocabulary.rows",
        "released.vocabulary.table",
        "released.kgrams.rows",
        "released.kgrams.table",
    }
    assert all(s["failed"] == 0 and s["evaluated"] > 0 for s in part["suites"])
    results = json.loads((ctx.release.root / VALIDATION_RESULTS).read_text())
    assert results["success"] is True
    assert (ctx.release.root / DATA_DOCS_DIR / "index.html").is_file()
    assert read_parts(ctx)["validation"]["success"] is True


def test_downward_closure_violation_fails_with_one_readable_line(tmp_path):
    ctx = make_ctx(tmp_path)
    # "c d a": its suffix "d a" was never released at level 2 (its prefix "c d" was).
    write_release(ctx, kgrams=[*GOOD_KGRAMS, (3, "c d a")])
    failures = failures_of(ctx, suites=RELEASED)
    assert failures == [
        "released.kgrams.table: expect_column_values_to_be_between on column not_downward_closed (expected 0)"
    ]
    assert read_parts(ctx)["validation"]["success"] is False
    assert (ctx.release.root / DATA_DOCS_DIR / "index.html").is_file()  # inspectable, not published


def test_single_side_pruning_needs_only_the_prefix(tmp_path):
    ctx = make_ctx(tmp_path, pruning="single")
    write_release(ctx, kgrams=[*GOOD_KGRAMS, (3, "c d a")])
    assert validate_run(ctx, suites=RELEASED)["success"] is True
    # ... but a missing prefix still fails: "d a b" has prefix "d a", not released.
    ctx2 = make_ctx(tmp_path / "2", pruning="single")
    write_release(ctx2, kgrams=[*GOOD_KGRAMS, (3, "d a b")])
    assert any("not_downward_closed" in f for f in failures_of(ctx2, suites=RELEASED))


def test_extra_column_fails(tmp_path):
    ctx = make_ctx(tmp_path)
    write_release(ctx, extra={"count": pa.array([5] * len(GOOD_KGRAMS), pa.int64())})
    failures = failures_of(ctx, suites=RELEASED)
    assert failures == ["released.kgrams.rows: expect_table_columns_to_match_set on columns ['k', 'ngram']"]


def test_token_outside_vocabulary_fails(tmp_path):
    ctx = make_ctx(tmp_path)
    write_release(ctx, kgrams=[*GOOD_KGRAMS, (2, "d zebra")])
    failures = failures_of(ctx, suites=RELEASED)
    assert (
        "released.kgrams.table: expect_column_values_to_be_between on column tokens_outside_vocabulary "
        "(expected 0)" in failures
    )
    # "zebra" is not a released 1-gram either, so the 2-gram is not downward closed.
    assert any("not_downward_closed" in f for f in failures)


def test_wrong_k_duplicates_and_range(tmp_path):
    ctx = make_ctx(tmp_path)
    write_release(ctx, vocab=[*VOCAB, "a"], kgrams=[*GOOD_KGRAMS, (3, "a b"), (2, "a b"), (4, "a b c d")])
    failures = "\n".join(failures_of(ctx, suites=RELEASED))
    for name in (
        "duplicate_tokens",
        "duplicate_ngrams",
        "wrong_token_count",
        "expect_column_values_to_be_between on column k (min_value=2, max_value=3)",
        "expect_column_values_to_be_unique on column ngram",
        "expect_column_values_to_be_unique on column token",
    ):
        assert name in failures, name


def test_promised_but_missing_file_fails(tmp_path):
    ctx = make_ctx(tmp_path)
    pq.write_table(
        pa.table({"token": pa.array(VOCAB), "kgram_seed": pa.array([True] * len(VOCAB))}),
        ctx.release.path(VOCABULARY),
    )
    record_part(ctx, "dpne.k2", {"outputs": [KGRAMS]})
    assert failures_of(ctx, suites=RELEASED) == [f"released.kgrams: {KGRAMS} is missing"]


def test_suites_not_applicable_are_skipped(tmp_path):
    ctx = make_ctx(tmp_path)
    pq.write_table(
        pa.table({"token": pa.array(VOCAB), "kgram_seed": pa.array([True] * len(VOCAB))}),
        ctx.release.path(VOCABULARY),
    )
    part = validate_run(ctx)  # no ingest part, no kgrams promised: only the vocabulary suite runs
    assert part["suites_run"] == ["released.vocabulary"]


# -- private ingest suite ----------------------------------------------------------------------
SECRET = "zyzzyvaquux"


def ingested_ctx(tmp_path: Path) -> RunContext:
    from dpngram.stages.ingest import run_ingest

    lines = [
        json.dumps({"user_id": f"u{i}", "text": f"The {SECRET} said hello. Then it left {i}."})
        for i in range(30)
    ]
    lines += ["not json at all", json.dumps({"user_id": "u99", "text": "   "})]
    src = tmp_path / "input.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ctx = make_ctx(tmp_path, delta=1e-3)
    run_ingest(ctx)
    return ctx


def test_ingest_suite_passes_and_publishes_no_private_values(tmp_path):
    ctx = ingested_ctx(tmp_path)
    part = validate_run(ctx, suites=["ingest"])
    assert part["success"] is True
    assert {s["suite"] for s in part["suites"]} == {"ingest.tokens_sample", "ingest.consistency"}
    results = json.loads((ctx.release.root / VALIDATION_RESULTS).read_text())
    for suite in results["suites"]:
        assert suite["private"] is True
        assert all("result" not in e for e in suite["expectations"])  # BOOLEAN_ONLY: pass/fail only
    published = [p for p in (ctx.release.root / "validation").rglob("*") if p.is_file()]
    assert any(p.name == "index.html" for p in published)
    for path in published:
        if path.suffix in (".html", ".json"):
            body = path.read_text(encoding="utf-8", errors="replace")
            assert SECRET not in body and "u17" not in body, path
            assert "pandas_data_fingerprint" not in body, path


def test_ingest_suite_detects_broken_row_identity(tmp_path):
    ctx = ingested_ctx(tmp_path)
    with ctx.warehouse() as wh:
        wh.con.execute(
            f"DELETE FROM {ctx.schema}.quarantine"
        )  # a row read but neither loaded nor quarantined
        # DuckDB stores the sentences as ids (sentences is a view over sentence_ids)
        wh.con.execute(f"DELETE FROM {ctx.schema}.sentence_ids WHERE user_id = 'u3'")
    failures = failures_of(ctx, suites=["ingest"])
    expect = "ingest.consistency: expect_column_values_to_be_between on column"
    assert failures == [
        f"{expect} read_identity_broken (expected 0)",
        f"{expect} document_without_sentence (expected 0)",
    ]


@pytest.mark.parametrize("damage", ["gap", "repeat"])
def test_ingest_suite_detects_a_token_dictionary_that_is_not_numbered_one_to_n(tmp_path, damage):
    """The stages look token ids up by position in the dictionary, so ids must be exactly 1..n:
    a gap (one id moved past n) or a repeated id fails the ingest suite, nothing else does."""
    ctx = ingested_ctx(tmp_path)
    assert validate_run(ctx, suites=["ingest"])["success"] is True
    with ctx.warehouse() as wh:
        if damage == "gap":
            wh.con.execute(f"UPDATE {ctx.schema}.token_ids SET tid = tid + 1000 WHERE tid = 1")
        else:
            wh.con.execute(f"UPDATE {ctx.schema}.token_ids SET tid = 1 WHERE tid = 2")
    failures = failures_of(ctx, suites=["ingest"])
    expect = "ingest.consistency: expect_column_values_to_be_between on column"
    assert f"{expect} token_dictionary_broken (expected 0)" in failures
    assert all("consistency" not in f or "token_dictionary_broken" in f for f in failures)


def test_nothing_to_validate_is_a_failure(tmp_path):
    ctx = make_ctx(tmp_path)
    assert failures_of(ctx) == [f"no validation suite applies to run {ctx.run_id} (nothing was released?)"]


def test_gx_is_imported_without_its_unloaded_integrations_which_stay_importable():
    """validation._import_gx hides pyspark and SQLAlchemy from GX's import only when the process
    has not loaded them, and leaves both importable afterwards (a fresh interpreter, so the test
    does not depend on what other tests imported)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dpngram.validation import _import_gx\n"
        "gx = _import_gx()\n"
        "hidden = [m for m in ('pyspark', 'sqlalchemy') if m in sys.modules]\n"
        "import sqlalchemy, pyspark\n"
        "assert sqlalchemy.__version__ and pyspark.__version__\n"
        "assert _import_gx() is gx\n"
        "print('hidden-ok' if not hidden else f'loaded: {hidden}')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "hidden-ok"


def test_narrow_numbers_are_widened_for_gx_with_the_same_values_and_verdicts():
    """validation.widened: numpy int8/16/32, uint and float32 columns become int64 / float64 (GX
    compares only those as arrays), values unchanged; strings, bools, 64-bit and nullable columns
    are left as they are; and a range expectation gives the same verdict either way."""
    import numpy as np
    import pandas as pd

    from dpngram.validation import Batch, Expect, gx_context, run_batch, widened

    frame = pd.DataFrame(
        {
            "i8": np.array([-3, 0, 7], np.int8),
            "i32": np.array([0, 5, 2**31 - 1], np.int32),
            "u16": np.array([0, 1, 65535], np.uint16),
            "f32": np.array([0.5, -1.25, 3.0], np.float32),
            "i64": np.array([1, 2, 3], np.int64),
            "flag": [True, False, True],
            "word": ["a", "b", "c"],
            "nullable": pd.array([1, None, 3], dtype="Int32"),
        }
    )
    wide = widened(frame)
    widened_to = {"i8": "int64", "i32": "int64", "u16": "int64", "f32": "float64"}
    assert {c: str(t) for c, t in wide.dtypes.items()} == {
        c: widened_to.get(c, str(t)) for c, t in frame.dtypes.items()
    }
    assert str(wide["nullable"].dtype) == "Int32"
    for column in frame.columns:
        assert wide[column].astype(object).tolist() == frame[column].astype(object).tolist()
    assert widened(wide) is wide  # nothing narrow left: the frame itself

    def verdicts(max_value: int) -> list[bool]:
        batch = Batch(
            "test.widened",
            frame,
            [
                Expect("ExpectColumnValuesToBeBetween", {"column": c, "max_value": max_value})
                for c in ("i8", "i32")
            ],
            False,
        )
        with gx_context() as (gx, context, _docs):
            return [e["success"] for e in run_batch(gx, context, batch)["expectations"]]

    assert verdicts(2**31 - 1) == [True, True]
    assert verdicts(6) == [False, False]  # 7 in i8, 2**31 - 1 and 5 in i32
