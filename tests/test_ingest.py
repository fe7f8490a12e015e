"""Ingest: every format, every bad-input case (quarantine reason or a one-line IngestError, never a
traceback), the row identity read = loaded + quarantined, streaming across batches, and the
privacy of the stage's published outputs (no counts in the report part, XCom dict, logs or errors)."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError, IngestError
from dpngram.engines.duckdb import Warehouse
from dpngram.engines.ingest import ingest_file
from dpngram.engines.ingest_stats import ingest_stats
from dpngram.release.context import RunContext, read_parts
from dpngram.release.publish import prepare
from dpngram.stages.ingest import run_ingest
from dpngram.text import records as ingest
from dpngram.text import tokenizer as tokenizer
from dpngram.text.records import detect_format
from dpngram.text.tokenizer import tokenize_texts

SECRET = "zebra-quokka-7731"  # a marker that must never reach logs, errors or published files


def _config(path: Path, **kw: Any) -> RunConfig:
    return RunConfig.build(input=str(path), out=str(path.parent / "out"), **kw)


def _ingest(path: Path, **kw: Any) -> tuple[ingest.IngestStats, list[tuple], list[tuple]]:
    """Ingest into an in-memory warehouse; returns stats, quarantine rows, sentence rows."""
    with Warehouse(":memory:") as wh:
        wh.con.execute("CREATE SCHEMA s")
        stats = ingest_file(wh, "s", _config(path, **kw))
        quarantine = wh.con.execute(
            "SELECT source, line_no, reason, raw FROM s.quarantine ORDER BY line_no"
        ).fetchall()
        sentences = wh.con.execute(
            "SELECT user_id, doc_id, sent_id, tokens FROM s.sentences ORDER BY doc_id, sent_id"
        ).fetchall()
        assert stats.rows_read == stats.rows_loaded + stats.rows_quarantined
        assert stats.rows_quarantined == len(quarantine)
        assert sum(stats.quarantine_reasons.values()) == stats.rows_quarantined
        assert stats.as_dict() | {"seconds": 0} == {**ingest_stats(wh, "s"), "seconds": 0}
    return stats, quarantine, sentences


def _jsonl(path: Path, lines: list[bytes | str | dict[str, Any]]) -> Path:
    data = b"".join(
        (json.dumps(x).encode() if isinstance(x, dict) else x.encode() if isinstance(x, str) else x) + b"\n"
        for x in lines
    )
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


GOOD = {"user_id": "alice", "text": "Hello there. Fine day!"}


# -- JSON Lines ------------------------------------------------------------------------------------
def test_jsonl_loads_tables_and_tokens_view(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "in.jsonl", [GOOD, {"user_id": 42, "text": "Bye\nnow"}, {"user_id": "alice", "text": "x"}]
    )
    with Warehouse(":memory:") as wh:
        wh.con.execute("CREATE SCHEMA s")
        stats = ingest_file(wh, "s", _config(path))
        raw = wh.con.execute("SELECT user_id, doc_id, text FROM s.raw_text ORDER BY doc_id").fetchall()
        toks = wh.con.execute(
            "SELECT user_id, doc_id, sent_id, pos, token FROM s.tokens ORDER BY doc_id, sent_id, pos"
        ).fetchall()
        types = dict(
            wh.con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 's' AND table_name = 'sentences'"
            ).fetchall()
        )
    assert raw == [("alice", 1, GOOD["text"]), ("42", 2, "Bye\nnow"), ("alice", 3, "x")]
    assert toks == [
        ("alice", 1, 0, 0, "hello"),
        ("alice", 1, 0, 1, "there"),
        ("alice", 1, 0, 2, "."),
        ("alice", 1, 1, 0, "fine"),
        ("alice", 1, 1, 1, "day"),
        ("alice", 1, 1, 2, "!"),
        ("42", 2, 0, 0, "bye"),
        ("42", 2, 1, 0, "now"),
        ("alice", 3, 0, 0, "x"),
    ]
    assert types == {
        "user_id": "VARCHAR",
        "doc_id": "BIGINT",
        "sent_id": "INTEGER",
        "tokens": "VARCHAR[]",
        "tids": "INTEGER[]",
    }
    assert (stats.rows_read, stats.rows_loaded, stats.rows_quarantined) == (3, 3, 0)
    assert (stats.users, stats.documents, stats.sentences, stats.tokens) == (2, 3, 5, 9)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"", "blank_line"),
        (b"   \t", "blank_line"),
        (b'{"user_id": "a", "text": "caf\xe9"}', "invalid_utf8"),
        (b"\xff\xfe\x00", "invalid_utf8"),
        (b"not json", "malformed_json"),
        (b'{"user_id": "a", "text": "unterminated}', "malformed_json"),
        (b"[" * 100_000 + b"]" * 100_000, "malformed_json"),  # recursion limit
        (b'{"user_id": 1' + b"1" * 5000 + b', "text": "x"}', "malformed_json"),  # int digit limit
        (b'["a", "b"]', "not_an_object"),
        (b'"just a string"', "not_an_object"),
        (b"42", "not_an_object"),
        (b'{"text": "no user"}', "missing_user_id"),
        (b'{"user_id": null, "text": "x"}', "empty_user_id"),
        (b'{"user_id": "", "text": "x"}', "empty_user_id"),
        (b'{"user_id": " \\t", "text": "x"}', "empty_user_id"),
        (b'{"user_id": true, "text": "x"}', "invalid_user_id"),
        (b'{"user_id": ["a"], "text": "x"}', "invalid_user_id"),
        (b'{"user_id": {"a": 1}, "text": "x"}', "invalid_user_id"),
        (b'{"user_id": NaN, "text": "x"}', "invalid_user_id"),
        (b'{"user_id": "a"}', "missing_text"),
        (b'{"user_id": "a", "text": null}', "null_text"),
        (b'{"user_id": "a", "text": 5}', "text_not_string"),
        (b'{"user_id": "a", "text": ["x"]}', "text_not_string"),
        (b'{"user_id": "a", "text": ""}', "empty_text"),
        (b'{"user_id": "a", "text": " \\n\\t "}', "empty_text"),
        (b'{"user_id": "a", "text": "bad \\ud800 surrogate"}', "invalid_unicode"),
        (b'{"user_id": "\\udfff", "text": "x"}', "invalid_unicode"),
        (b'{"user_id": "a", "text": "\\u200d\\u2060"}', "no_tokens"),
    ],
)
def test_jsonl_bad_line_is_quarantined_with_its_reason(tmp_path: Path, line: bytes, reason: str) -> None:
    path = _jsonl(tmp_path / "in.jsonl", [GOOD, line, GOOD])
    stats, quarantine, sentences = _ingest(path)
    assert (stats.rows_read, stats.rows_loaded, stats.rows_quarantined) == (3, 2, 1)
    assert stats.quarantine_reasons == {reason: 1}
    ((source, line_no, got, raw),) = quarantine
    assert (source, line_no, got) == (str(path), 2, reason)
    assert len(raw) <= ingest.QUARANTINE_RAW_MAX_CHARS
    assert {doc for _, doc, _, _ in sentences} == {1, 3}


def test_jsonl_numbers_as_user_ids_and_unicode_escapes(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "in.jsonl",
        [
            b'{"user_id": 7, "text": "a"}',
            b'{"user_id": 2.5, "text": "b"}',
            b'{"user_id": "\\u00e9", "text": "smile \\ud83d\\ude00"}',  # valid surrogate pair
        ],
    )
    stats, quarantine, sentences = _ingest(path)
    assert quarantine == []
    assert [(u, t) for u, _, _, t in sentences] == [
        ("7", ["a"]),
        ("2.5", ["b"]),
        ("\u00e9", ["smile", "\U0001f600"]),
    ]


def test_jsonl_gzip_bom_crlf_and_extra_fields(tmp_path: Path) -> None:
    data = (
        b"\xef\xbb\xbf"
        + json.dumps({**GOOD, "lang": "en"}).encode()
        + b"\r\n"
        + json.dumps(GOOD).encode()
        + b"\r\n"
    )
    path = tmp_path / "in.ndjson.gz"
    path.write_bytes(gzip.compress(data))
    stats, quarantine, _ = _ingest(path)
    assert (stats.rows_loaded, quarantine) == (2, [])


def test_custom_field_names(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "in.jsonl", [{"author": "a", "body": "hi"}, {"user_id": "b", "text": "hi"}])
    stats, quarantine, _ = _ingest(path, user_field="author", text_field="body")
    assert stats.rows_loaded == 1 and [q[2] for q in quarantine] == ["missing_user_id"]


def test_json_array_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_text('[\n{"user_id": "a", "text": "x"}\n]\n')
    with pytest.raises(IngestError, match="JSON array"):
        _ingest(path)


def test_truncated_gzip_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl.gz"
    payload = gzip.compress(b"".join(json.dumps(GOOD).encode() + b"\n" for _ in range(2000)))
    path.write_bytes(payload[: len(payload) // 2])
    with pytest.raises(IngestError, match="truncated or corrupt") as err:
        _ingest(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_many_batches_equal_one_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[bytes | str | dict[str, Any]] = []
    for i in range(300):
        lines.append({"user_id": f"u{i % 37}", "text": f"Sentence {i}. Another one!\nLine {i}"})
        if i % 17 == 0:
            lines.append(b"broken {")
    path = _jsonl(tmp_path / "in.jsonl", lines)
    one = _ingest(path)
    monkeypatch.setattr(ingest, "BATCH_BYTES", 600)  # ~10 lines per batch
    calls: list[int] = []
    with Warehouse(":memory:") as wh:
        wh.con.execute("CREATE SCHEMA s")
        stats = ingest_file(wh, "s", _config(path), progress=calls.append)
    many = _ingest(path)
    assert many[0].as_dict() | {"seconds": 0} == one[0].as_dict() | {"seconds": 0}
    assert many[1:] == one[1:]
    assert len(calls) > 20 and calls == sorted(calls) and calls[-1] == stats.rows_read == len(lines)


# -- CSV -------------------------------------------------------------------------------------------
def test_csv_good_and_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(
        b"id,user_id,text\r\n"
        b'1,alice,"Hello, world. Two"\r\n'  # line 2
        b'2,bob,"multi\r\nline ""quoted"""\r\n'  # lines 3-4
        b"\r\n"  # line 5: blank
        b"3,carol\r\n"  # line 6: wrong field count
        b"4,dave,ok,extra\r\n"  # line 7: wrong field count
        b"5,,text\r\n"  # line 8: empty user
        b"6,erin,   \r\n"  # line 9: empty text
        b"7,frank,caf\xe9\r\n"  # line 10: invalid utf-8
        b"8,gina,\xe2\x80\x8d\r\n"  # line 11: no tokens
        b"9,hank,last"  # line 12, no final newline
    )
    stats, quarantine, sentences = _ingest(path)
    assert [(q[1], q[2]) for q in quarantine] == [
        (5, "blank_line"),
        (6, "wrong_field_count"),
        (7, "wrong_field_count"),
        (8, "empty_user_id"),
        (9, "empty_text"),
        (10, "invalid_utf8"),
        (11, "no_tokens"),
    ]
    assert quarantine[5][3] == "7,frank,caf\ufffd"
    assert [(u, d, t) for u, d, _, t in sentences] == [
        ("alice", 2, ["hello", ",", "world", "."]),
        ("alice", 2, ["two"]),
        ("bob", 3, ["multi"]),
        ("bob", 3, ["line", '"', "quoted", '"']),
        ("hank", 12, ["last"]),
    ]
    assert (stats.rows_read, stats.rows_loaded) == (10, 3)


def test_csv_oversized_field_is_quarantined_and_reading_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest, "CSV_FIELD_LIMIT", 100)
    path = tmp_path / "in.csv.gz"
    path.write_bytes(gzip.compress(b"user_id,text\n" + b"a,ok\n" + b"b," + b"x" * 500 + b"\n" + b"c,fine\n"))
    stats, quarantine, sentences = _ingest(path)
    assert [(q[1], q[2]) for q in quarantine] == [(3, "csv_error")]
    assert [u for u, *_ in sentences] == ["a", "c"] and stats.rows_read == 3
    monkeypatch.undo()
    stats, quarantine, _ = _ingest(path)
    assert quarantine == [] and stats.rows_loaded == 3


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "is empty"),
        (b"user,text\na,b\n", "has no column 'user_id'"),
        (b"user_id,body\na,b\n", "has no column 'text'"),
        (b"user_id,text,user_id\na,b,c\n", "more than one column 'user_id'"),
        (b"alice,\xff secret text\n", "not valid UTF-8"),
    ],
)
def test_csv_header_problems_are_one_line_errors(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(content)
    with pytest.raises(IngestError, match=match) as err:
        _ingest(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert "secret" not in str(err.value) and "alice" not in str(err.value)


# -- Parquet ---------------------------------------------------------------------------------------
def test_parquet_good_null_and_integer_ids(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    table = pa.table(
        {
            "user_id": pa.array([1, 2, None, 4, 5, 6], pa.int64()),
            "text": pa.array(["Hi there.", None, "x", "  ", "\u200d", "Yo"], pa.large_string()),
            "other": pa.array([0] * 6),
        }
    )
    pq.write_table(table, path, row_group_size=2)
    stats, quarantine, sentences = _ingest(path)
    assert [(q[1], q[2]) for q in quarantine] == [
        (2, "null_text"),
        (3, "empty_user_id"),
        (4, "empty_text"),
        (5, "no_tokens"),
    ]
    assert json.loads(quarantine[0][3]) == {"user_id": "2", "text": None}
    assert [(u, d, t) for u, d, _, t in sentences] == [("1", 1, ["hi", "there", "."]), ("6", 6, ["yo"])]
    assert (stats.rows_read, stats.rows_loaded, stats.rows_quarantined) == (6, 2, 4)


@pytest.mark.parametrize(
    ("table", "match"),
    [
        (pa.table({"user": ["a"], "text": ["x"]}), "no column 'user_id'"),
        (pa.table({"user_id": ["a"], "text": [1]}), "column 'text' has type int64"),
        (pa.table({"user_id": [1.5], "text": ["x"]}), "column 'user_id' has type double"),
    ],
)
def test_parquet_schema_problems_are_one_line_errors(tmp_path: Path, table: pa.Table, match: str) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    with pytest.raises(IngestError, match=match):
        _ingest(path)


def test_corrupt_parquet_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 64)
    with pytest.raises(IngestError, match="not a readable Parquet file"):
        _ingest(path)


# -- text directory --------------------------------------------------------------------------------
def test_textdir_one_user_per_file(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "team" / "sub").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "alice.txt").write_text("Hello. World!", encoding="utf-8")
    (root / "bob").write_text("no suffix", encoding="utf-8")
    (root / "team" / "carol.md").write_text("Line one\nLine two", encoding="utf-8")
    (root / "team" / "sub" / "dave.txt.gz").write_bytes(gzip.compress(b"zipped text"))
    (root / "team" / "bad.txt").write_bytes(b"caf\xe9")
    (root / "team" / "empty.txt").write_bytes(b"  \n")
    (root / ".DS_Store").write_bytes(b"\x00\x01")
    (root / ".hidden" / "x.txt").write_text("ignored")
    stats, quarantine, sentences = _ingest(root)
    # Only the declared extensions are read (default .txt, issue 26): the rest is quarantined unread.
    assert sorted((q[0], q[1], q[2], q[3]) for q in quarantine) == [
        ("bob", None, "unsupported_extension", ""),
        ("team/bad.txt", None, "invalid_utf8", "caf\ufffd"),
        ("team/carol.md", None, "unsupported_extension", ""),
        ("team/empty.txt", None, "empty_text", "  \n"),
    ]
    assert [(u, t) for u, _, _, t in sentences] == [
        ("alice", ["hello", "."]),
        ("alice", ["world", "!"]),
        ("team/sub/dave", ["zipped", "text"]),
    ]
    assert (stats.rows_read, stats.users) == (6, 2)
    # Declaring .md reads carol's file as user team/carol.
    stats, quarantine, sentences = _ingest(root, input_extensions=".txt,.md")
    assert ("team/carol", ["line", "one"]) in [(u, t) for u, _, _, t in sentences]
    assert [q[0] for q in quarantine if q[2] == "unsupported_extension"] == ["bob"]


def test_textdir_unreadable_files_are_quarantined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.txt").write_text("fine")
    (root / "b.txt").write_text("locked")
    (root / "c.txt.gz").write_bytes(b"\x1f\x8b" + b"not really gzip")
    from dpngram.text import textdir

    real_read = textdir._read_no_follow

    def read_bytes(path: Path) -> bytes:
        if path.name == "b.txt":
            raise PermissionError(13, "Permission denied")
        return real_read(path)

    monkeypatch.setattr(textdir, "_read_no_follow", read_bytes)
    stats, quarantine, _ = _ingest(root)
    assert sorted((q[0], q[2]) for q in quarantine) == [
        ("b.txt", "unreadable_file"),
        ("c.txt.gz", "unreadable_file"),
    ]
    assert stats.rows_loaded == 1


def test_textdir_without_files_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("x")
    with pytest.raises(IngestError, match="contains no"):
        _ingest(root)


# -- paths and formats -----------------------------------------------------------------------------
def test_detect_format(tmp_path: Path) -> None:
    for name, fmt in [
        ("a.jsonl", "jsonl"),
        ("a.JSON.gz", "jsonl"),
        ("a.ndjson", "jsonl"),
        ("a.csv.gz", "csv"),
        ("a.parquet", "parquet"),
        ("a.pq", "parquet"),
    ]:
        (tmp_path / name).write_bytes(b"")
        assert detect_format(tmp_path / name) == fmt
    (tmp_path / "a.txt").write_bytes(b"")
    assert detect_format(tmp_path / "a.txt", "csv") == "csv"
    assert detect_format(tmp_path) == "textdir"


@pytest.mark.parametrize(
    ("name", "fmt", "match"),
    [
        ("missing.jsonl", "auto", "does not exist"),
        ("a.txt", "auto", "cannot tell the format"),
        ("a.jsonl", "textdir", "needs a directory"),
        (".", "csv", "is a directory"),
        ("a.jsonl", "xml", "unknown input_format"),
    ],
)
def test_bad_paths_and_formats_are_one_line_errors(tmp_path: Path, name: str, fmt: str, match: str) -> None:
    for existing in ("a.txt", "a.jsonl"):
        (tmp_path / existing).write_text("{}\n")
    with pytest.raises(IngestError, match=match) as err:
        detect_format(tmp_path / name, fmt)
    assert str(tmp_path) in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, ValueError)


def test_unreadable_input_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _jsonl(tmp_path / "in.jsonl", [GOOD])
    monkeypatch.setattr(ingest.os, "access", lambda *_a, **_k: False)
    with pytest.raises(IngestError, match="not readable"):
        detect_format(path)


def test_reingest_replaces_previous_tables(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "in.jsonl", [GOOD, b"oops", GOOD])
    with Warehouse(":memory:") as wh:
        wh.con.execute("CREATE SCHEMA s")
        first = ingest_file(wh, "s", _config(path))
        second = ingest_file(wh, "s", _config(path))
        assert wh.scalar("SELECT count(*) FROM s.quarantine") == 1
    assert first.as_dict() | {"seconds": 0} == second.as_dict() | {"seconds": 0}


# -- the stage entry point and privacy of its outputs ----------------------------------------------
def _context(tmp_path: Path, input_path: Path, **kw: Any) -> RunContext:
    config = RunConfig.build(
        input=str(input_path),
        out=str(tmp_path / "out"),
        warehouse=str(tmp_path / "wh" / "w.duckdb"),
        memory_limit="512MB",
        **kw,
    )
    return RunContext(prepare(config))


def _all_numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _all_numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _all_numbers(v)]
    return []


def test_run_ingest_publishes_no_counts_and_logs_nothing_private(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines: list[bytes | str | dict[str, Any]] = [
        {"user_id": f"user{i}", "text": f"{SECRET} number {i}. More text!"} for i in range(57)
    ]
    lines += [f"{SECRET} not json", {"user_id": "x", "text": 3}]
    path = _jsonl(tmp_path / "in.jsonl", lines)
    ctx = _context(tmp_path, path)
    seen: list[int] = []
    with caplog.at_level(logging.DEBUG):
        result = run_ingest(ctx, progress=seen.append)
    assert result == {"stage": "ingest", "schema": ctx.schema, "ok": True}
    part = read_parts(ctx)["ingest"]
    # the input's path is operator-only (issue 17): not in the published part
    assert "input" not in part and part["input_format"] == "jsonl"
    assert part["tokenizer"]["lowercase"] is True and part["row_identity_checked"] is True
    # nothing data-derived: the tokenizer's version and the max_quarantine_fraction parameter
    assert sorted(_all_numbers(part)) == sorted(
        [tokenizer.TOKENIZER_VERSION, ctx.config.max_quarantine_fraction]
    )
    published = "".join(p.read_text() for p in ctx.release.root.rglob("*") if p.is_file())
    assert SECRET not in published
    # the log holds the quarantine summary (issue 28: the Airflow ingest task's log shows it; the one
    # deliberate exception to "no exact statistic in logs", docs/faults.md) and no other count
    assert SECRET not in caplog.text and "57" not in caplog.text
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith(("quarantine:", "  "))]
    assert logged == [
        "quarantine: 2 of 59 rows read were quarantined (3.4%), by reason (exact counts: operator only, "
        "never released):",
        "  1  malformed_json   the line is not valid JSON",
        "  1  text_not_string  the text is not a string",
    ]
    assert seen[-1] == 59
    with ctx.warehouse(read_only=True) as wh:
        stats = ingest_stats(wh, ctx.schema)
    assert stats["rows_read"] == 59 and stats["users"] == 57
    assert stats["quarantine_reasons"] == {"malformed_json": 1, "text_not_string": 1}


def test_run_ingest_refuses_delta_too_large_for_the_user_count(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "in.jsonl", [{"user_id": f"u{i}", "text": SECRET} for i in range(5)])
    ctx = _context(tmp_path, path, delta=0.25)
    with pytest.raises(ConfigError, match="delta") as err:
        run_ingest(ctx)
    assert SECRET not in str(err.value) and "5" not in str(err.value).split("(got")[1].split(";", 1)[1]


def test_run_ingest_with_no_usable_row_is_a_clear_error(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "in.jsonl", [f"{SECRET} 1", f"{SECRET} 2", ""])
    ctx = _context(tmp_path, path)
    with pytest.raises(IngestError, match="no usable record") as err:
        run_ingest(ctx)
    assert SECRET not in str(err.value) and "3" not in str(err.value).replace(str(path), "")


def test_errors_never_carry_record_content(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(f"{SECRET},{SECRET}\n".encode())  # data where the header should be
    with pytest.raises(IngestError) as err:
        _ingest(path)
    assert SECRET not in str(err.value)


def test_tokenize_texts_matches_ingest_on_sample_like_text(tmp_path: Path) -> None:
    texts = [f"Sentence {i}: it's 3.5% off\u2026 Really? Yes!\nNext line" for i in range(20)]
    path = _jsonl(tmp_path / "in.jsonl", [{"user_id": "u", "text": t} for t in texts])
    _, _, sentences = _ingest(path)
    by_doc: dict[int, list[list[str]]] = {}
    for _, doc, _, tokens in sentences:
        by_doc.setdefault(doc, []).append(tokens)
    assert [by_doc[i + 1] for i in range(len(texts))] == tokenize_texts(texts)


_FAST_PATH_LINES = [
    b'{"user_id": "a", "text": "plain"}',
    b'{"user_id": "a", "text": "first", "text": "last wins"}\r\n',
    b'  {"text": "tab\\tquote\\" slash\\/", "user_id": "b", "extra": {"n": [1, 2.5e999, null]}}  \n',
    b'{"user_id": "c", "text": "x", "big": 123456789012345678901234567890}',
    b'{"user_id": "c", "text": "x", "n": NaN}',  # json accepts NaN, msgspec does not
    b'{"user_id": "d", "text": "caf\xc3\xa9 \xe2\x80\x99"}',
    b'{"user_id": "d", "text": "bad \xff byte"}',
    b'{"user_id": "e", "text": "esc \\u00e9"}',
    b'{"user_id": "e", "text": "bad \\ud800"}',
    b'{"user_id": 7, "text": "number id"}',
    b'{"user_id": " ", "text": "x"}',
    b'{"user_id": "f", "text": "  "}',
    b'{"user_id": "f"}',
    b'{"user_id": "a", "text": "x"} {"user_id": "b", "text": "y"}',
    b'{"user_id": "a", "text": "x", "z": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b"",
    b"[1]",
]


@pytest.mark.parametrize("fields", [("user_id", "text"), ("text", "user_id"), ("text", "text")])
def test_jsonl_fast_path_classifies_like_the_checked_path(fields: tuple[str, str]) -> None:
    user_field, text_field = fields
    fast, checked = ingest.RecordBatch(), ingest.RecordBatch()
    classify = ingest.jsonl_line_classifier(user_field, text_field)
    decode = json.JSONDecoder().decode
    for line_no, line in enumerate(_FAST_PATH_LINES, start=1):
        classify(fast, "src", line_no, line)
        ingest.classify_jsonl_line(checked, "src", line_no, line, user_field, text_field, decode)
    assert fast == checked
    if fields == ("user_id", "text"):
        # the lines above do exercise both outcomes: records and quarantine reasons
        assert fast.texts[:3] == ["plain", "last wins", 'tab\tquote" slash/']
        assert len(fast.bad_reasons) >= 6


def test_jsonl_fast_path_is_taken_for_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain line never reaches the json-module path (else the speed-up is gone)."""
    calls: list[int] = []
    real = ingest.classify_jsonl_line
    monkeypatch.setattr(ingest, "classify_jsonl_line", lambda *a: calls.append(a[2]) or real(*a))
    batch = ingest.RecordBatch()
    classify = ingest.jsonl_line_classifier("user_id", "text")
    classify(batch, "src", 1, b'{"user_id": "a", "text": "plain"}')
    classify(batch, "src", 2, b'{"user_id": 7, "text": "number id"}')
    assert calls == [2]
    assert batch.user_ids == ["a", "7"]


def test_every_token_has_a_dense_id_that_decodes_to_it(tmp_path, monkeypatch):
    """sentences.tids are the tokens' ids in token_ids: one id per distinct token, 1..n, over
    several reader batches (the dictionary grows across them), the same ids on a second ingest of
    the same input, and every sentence's ids decode to its tokens."""
    lines = [
        json.dumps({"user_id": f"u{i % 7}", "text": f"w{i % 5} w{i % 11}. w{i % 3} w{i}"}) for i in range(40)
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = RunConfig(input=str(path), out=str(tmp_path / "out"))
    monkeypatch.setattr(ingest, "BATCH_BYTES", 400)  # several batches
    runs = []
    for attempt in range(2):
        with Warehouse(str(tmp_path / f"wh{attempt}.duckdb"), memory_limit="1GB") as wh:
            wh.con.execute("CREATE SCHEMA s")
            ingest_file(wh, "s", cfg)
            dictionary = dict(wh.con.execute("SELECT tid, token FROM s.token_ids").fetchall())
            rows = wh.con.execute("SELECT tokens, tids FROM s.sentences ORDER BY doc_id, sent_id").fetchall()
        runs.append((dictionary, rows))
    dictionary, rows = runs[0]
    assert sorted(dictionary) == list(range(1, len(dictionary) + 1))
    assert set(dictionary.values()) == {t for tokens, _ in rows for t in tokens}
    assert len(rows) == 80
    for tokens, tids in rows:
        assert [dictionary[i] for i in tids] == tokens
    assert runs[1] == runs[0]


def test_batches_tokenized_in_parallel_get_the_ids_of_a_serial_ingest(tmp_path, monkeypatch):
    """Ingest tokenizes several batches at once (engines/ingest._tokenized). The earlier batches
    are made to finish last here, yet the ids, the dictionary and the tables equal one thread's,
    because batches are coded in input order; the pool holds at most ``threads`` batches at once
    (bounded memory) and does hold that many (the batches do overlap)."""
    import threading
    import time

    from dpngram.engines import ingest as engine_ingest

    lines = [{"user_id": f"u{i % 7}", "text": f"w{i % 5} x{i % 11}. y{i % 3} z{i}"} for i in range(60)]
    path = _jsonl(tmp_path / "in.jsonl", lines)
    monkeypatch.setattr(ingest, "BATCH_BYTES", 400)  # about 8 batches
    tokenize = engine_ingest.tokenize_batch
    lock = threading.Lock()
    state = {"running": 0, "most": 0, "calls": 0}

    def slow_first(batch, lowercase, where):
        with lock:
            state["calls"] += 1
            order = state["calls"]
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
        time.sleep(0.05 if order % 2 else 0.0)  # odd batches finish after the even ones
        try:
            return tokenize(batch, lowercase, where)
        finally:
            with lock:
                state["running"] -= 1

    monkeypatch.setattr(engine_ingest, "tokenize_batch", slow_first)

    def tables(threads: int) -> tuple[list[tuple], list[tuple], list[tuple]]:
        state.update(running=0, most=0, calls=0)
        with Warehouse(":memory:") as wh:
            wh.con.execute("CREATE SCHEMA s")
            ingest_file(wh, "s", _config(path, threads=threads))
            return tuple(
                wh.con.execute(sql).fetchall()
                for sql in (
                    "SELECT tid, token FROM s.token_ids ORDER BY tid",
                    "SELECT user_id, doc_id, sent_id, tids, tokens FROM s.sentences ORDER BY doc_id, sent_id",
                    "SELECT user_id, doc_id, text FROM s.raw_text ORDER BY doc_id",
                )
            )

    serial = tables(1)
    assert state["most"] == 1 and state["calls"] > 4
    parallel = tables(3)
    assert state["most"] == 3
    assert parallel == serial
    assert [tid for tid, _ in serial[0]] == list(range(1, len(serial[0]) + 1))


def test_an_error_in_a_tokenizing_batch_reaches_the_caller_and_stops_the_pool(tmp_path, monkeypatch):
    """A batch that fails in the tokenizer pool fails the ingest with its own error (not a hang,
    not a silent gap), and no tokenizer thread outlives the ingest."""
    import threading

    from dpngram.engines import ingest as engine_ingest

    lines = [{"user_id": f"u{i % 7}", "text": f"w{i % 5} x{i}. y{i % 3}"} for i in range(60)]
    path = _jsonl(tmp_path / "in.jsonl", lines)
    monkeypatch.setattr(ingest, "BATCH_BYTES", 400)
    tokenize = engine_ingest.tokenize_batch
    calls = []

    def third_fails(batch, lowercase, where):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("tokenizer broke on batch 3")
        return tokenize(batch, lowercase, where)

    monkeypatch.setattr(engine_ingest, "tokenize_batch", third_fails)
    with Warehouse(":memory:") as wh:
        wh.con.execute("CREATE SCHEMA s")
        with pytest.raises(RuntimeError, match="tokenizer broke on batch 3"):
            ingest_file(wh, "s", _config(path, threads=2))
    for thread in threading.enumerate():
        if thread.name.startswith(("ingest-tokenizer", "ingest-reader")):
            thread.join(timeout=10)
            assert not thread.is_alive(), thread.name
