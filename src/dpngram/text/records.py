"""Raw input records: format detection, streaming readers, classification and quarantine.

Every input format is read here into batches of classified records: usable records
``(user_id, doc_id, text)`` (a "document" each) and unusable ones ``(source, line_no, reason,
raw)`` with a reason from :data:`QUARANTINE_REASONS`, so no record is silently dropped.
:func:`tokenize_batch` turns a batch into rows of the ingest tables ``raw_text``, ``sentences`` and
``quarantine`` (a document without any token is quarantined as ``no_tokens``). The DuckDB loader
(:mod:`dpngram.engines.ingest`) and the Spark one (:func:`dpngram.engines.spark_ingest.ingest_spark`,
through :func:`classify_jsonl_line`, :func:`classify_frame` and :func:`tokenize_batch` in its
workers) share this code, so both engines keep and quarantine the same records. :class:`IngestStats`
holds one ingest's exact counts: PRIVATE, for the operator only (never a report or XCom); the
quarantine summary (:func:`quarantine_summary_lines`: rows read, quarantined per reason) is the one
exception allowed in the ingest step's log and in its refusal (docs/faults.md, "Quarantine").
Exception messages name the input path and the problem, never a record's content.

Streaming and memory. Input is read in batches (JSONL: about :data:`BATCH_BYTES` / 2 of lines;
CSV and text directories: :data:`BATCH_ROWS` records or :data:`BATCH_BYTES` of text; Parquet:
:data:`BATCH_ROWS` rows). A background thread parses the next batch while the current one is
tokenized with polars and loaded into DuckDB (both release the GIL), with at most one parsed batch
waiting, so memory is bounded by a few batches regardless of corpus size. Per format:

* JSON Lines (``.jsonl/.json/.ndjson``, optionally ``.gz``): binary line batches; each line is
  decoded as strict UTF-8 and parsed on its own;
* CSV (``.csv[.gz]``): Python's ``csv`` module over strictly decoded lines; a header row naming
  the user and text columns is required;
* Parquet: ``pyarrow`` ``iter_batches`` over the two needed columns, checked vectorised;
* text directory: every regular, non-hidden file below the directory (recursively, sorted by
  path) with a declared extension (``input_extensions``, default ``.txt``; a ``.gz`` after it is
  allowed) is one document of the user named by its relative path without suffix(es)
  (``a/b.txt`` and ``a/b.txt.gz`` are user ``a/b``); ``.gz`` files are decompressed. The input
  is confined to the directory (:func:`dpngram.text.textdir.text_files`): a symbolic link that
  resolves outside it is never read unless ``follow_external_symlinks`` allows it, symlinked
  subdirectories are never descended, and files with another extension are not read; each of
  them is quarantined with its reason (no content is read for it).

Tokens come from :mod:`dpngram.text.tokenizer` (``docs/tokenizer.md``), the same polars
expression (:func:`~dpngram.text.tokenizer.sentence_tokens_expr`) that tokenizes held-out text and
public corpora, so all of them are tokenized identically.

Why one module (over 600 lines): every reader must classify and quarantine records by the same
rules with the same reasons, and both engines share the classification; one module keeps the
reasons, the readers and the classifiers from drifting apart.

Owns: input-format detection, the per-format readers and batching, record classification,
:data:`QUARANTINE_REASONS`, :class:`IngestStats`.
Imports: dpngram.text.tokenizer, dpngram.core; polars, pyarrow.
"""

from __future__ import annotations

import csv
import gzip
import json
import logging
import math
import os
import queue
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import msgspec
import polars as pl

from dpngram.core.errors import IngestError
from dpngram.text.tokenizer import explode_sentences, sentence_tokens_expr

log = logging.getLogger(__name__)


#: Records per batch (CSV records, Parquet rows, files of a text directory).
BATCH_ROWS = 50_000


#: A batch is also closed once it holds about this many bytes of text (JSONL batches: half of it).
BATCH_BYTES = 32 * 1024 * 1024


#: The ``raw`` column of ``quarantine`` keeps at most this many characters of a bad record.
QUARANTINE_RAW_MAX_CHARS = 65_536


#: Largest CSV field accepted (a runaway quote otherwise swallows the rest of the file).
CSV_FIELD_LIMIT = 16 * 1024 * 1024


#: Every reason a record can be quarantined for, with its meaning (also in docs/tokenizer.md).
QUARANTINE_REASONS: dict[str, str] = {
    "blank_line": "the line/record is empty or whitespace only",
    "invalid_utf8": "the bytes are not valid UTF-8 (raw is shown with U+FFFD replacements)",
    "invalid_unicode": "a JSON string holds a lone surrogate escape (e.g. \\ud800), not valid text",
    "malformed_json": "the line is not valid JSON",
    "not_an_object": "the JSON value is not an object",
    "missing_user_id": "the user-id field is absent",
    "empty_user_id": "the user id is null, empty or whitespace only",
    "invalid_user_id": "the user id is not a string or a finite number",
    "missing_text": "the text field is absent",
    "null_text": "the text is null",
    "text_not_string": "the text is not a string",
    "empty_text": "the text is empty or whitespace only",
    "no_tokens": "the text yields no token after normalisation (e.g. only control/format characters)",
    "wrong_field_count": "the CSV record does not have as many fields as the header",
    "csv_error": "the CSV parser rejected the record (e.g. a field over the size limit)",
    "unreadable_file": "a file of a text directory could not be read",
    "symlink_outside_input": "a file of a text directory is a symbolic link that resolves outside the "
    "directory: not read (allow with --follow-external-symlinks)",
    "symlinked_directory": "a subdirectory of a text directory is a symbolic link: not descended into",
    "unsupported_extension": "a file of a text directory does not have a declared extension "
    "(--input-extensions, default .txt): not read",
    "not_a_regular_file": "a text directory entry is not a regular file (a FIFO, socket, device or "
    "broken link): not read",
}


#: The extensions a text directory's files are read with by default (``input_extensions``).
DEFAULT_TEXT_EXTENSIONS = (".txt",)


@dataclass
class IngestStats:
    """Exact statistics of one ingest. PRIVATE: operator only (never report/XCom; of these only the
    quarantine summary may be logged, docs/faults.md)."""

    rows_read: int = 0
    rows_loaded: int = 0
    rows_quarantined: int = 0
    quarantine_reasons: dict[str, int] = field(default_factory=dict)
    users: int = 0
    documents: int = 0
    sentences: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- input detection ---------------------------------------------------------------------------
_SUFFIX_FORMATS = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def detect_format(path: str | os.PathLike[str], input_format: str = "auto") -> str:
    """Resolve the input format and check the path exists and is readable (:class:`IngestError`)."""
    src = Path(path)
    if not src.exists():
        raise IngestError(f"input {src} does not exist")
    if not os.access(src, os.R_OK):
        raise IngestError(f"input {src} is not readable (permission denied)")
    if src.is_dir():
        if input_format not in ("auto", "textdir"):
            raise IngestError(
                f"input {src} is a directory but input_format is '{input_format}' (use textdir)"
            )
        return "textdir"
    if not src.is_file():
        raise IngestError(f"input {src} is not a regular file or directory")
    if input_format == "textdir":
        raise IngestError(f"input {src} is a file but input_format is 'textdir' (which needs a directory)")
    if input_format != "auto":
        if input_format not in ("jsonl", "csv", "parquet"):
            raise IngestError(f"input {src}: unknown input_format '{input_format}'")
        return input_format
    name = src.name.lower().removesuffix(".gz")
    fmt = _SUFFIX_FORMATS.get(Path(name).suffix)
    if fmt is None:
        raise IngestError(
            f"input {src}: cannot tell the format from the name (expected .jsonl/.json/.ndjson/.csv "
            "[.gz], .parquet or a directory); set input_format"
        )
    return fmt


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def open_binary(path: Path) -> IO[bytes]:
    """Open for binary reading; gzip by magic number (so a mislabelled file still reads)."""
    try:
        if _is_gzip(path):
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return path.open("rb")
    except OSError as err:
        raise IngestError(f"cannot read input {path}: {err.strerror or type(err).__name__}") from None


def read_lines(fh: IO[bytes], path: Path) -> list[bytes]:
    """The next lines of ``fh``, about ``BATCH_BYTES / 2`` in total (at least one unless at EOF)."""
    try:
        return fh.readlines(max(1, BATCH_BYTES // 2))
    except (EOFError, zlib.error, gzip.BadGzipFile):
        raise IngestError(f"input {path}: the gzip stream is truncated or corrupt") from None
    except OSError as err:
        raise IngestError(f"cannot read input {path}: {err.strerror or type(err).__name__}") from None


# -- batches -----------------------------------------------------------------------------------
@dataclass
class RecordBatch:
    """Parsed records of one batch plus its quarantined rows."""

    read: int = 0
    user_ids: list[str] = field(default_factory=list)
    doc_ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    bad_sources: list[str] = field(default_factory=list)
    bad_lines: list[int | None] = field(default_factory=list)
    bad_reasons: list[str] = field(default_factory=list)
    bad_raw: list[str] = field(default_factory=list)
    text_bytes: int = 0

    def good(self, user_id: str, doc_id: int, text: str) -> None:
        self.user_ids.append(user_id)
        self.doc_ids.append(doc_id)
        self.texts.append(text)
        self.text_bytes += len(text)

    def bad(self, source: str, line_no: int | None, reason: str, raw: str) -> None:
        self.bad_sources.append(source)
        self.bad_lines.append(line_no)
        self.bad_reasons.append(reason)
        self.bad_raw.append(raw[:QUARANTINE_RAW_MAX_CHARS])
        self.text_bytes += min(len(raw), QUARANTINE_RAW_MAX_CHARS)


_Item = TypeVar("_Item")


_RAW_SCHEMA = {"user_id": pl.String, "doc_id": pl.Int64, "text": pl.String}


_QUARANTINE_SCHEMA = {"source": pl.String, "line_no": pl.Int64, "reason": pl.String, "raw": pl.String}


def _user_id_of(value: Any) -> tuple[str | None, str | None]:
    """(user id as text, None) or (None, quarantine reason)."""
    if isinstance(value, str):
        return (value, None) if value.strip() else (None, "empty_user_id")
    if value is None:
        return None, "empty_user_id"
    if isinstance(value, bool):
        return None, "invalid_user_id"
    if isinstance(value, int):
        return str(value), None
    if isinstance(value, float) and math.isfinite(value):
        return repr(value), None
    return None, "invalid_user_id"


def _utf8_ok(text: str) -> bool:
    """False if ``text`` holds a lone surrogate (possible via JSON ``\\udXXX`` escapes)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- JSON Lines --------------------------------------------------------------------------------
def _jsonl_reason(text_line: str, obj: Any, user_field: str, text_field: str) -> tuple[str | None, str, str]:
    """Classify one parsed JSON line: (quarantine reason or None, user id, text)."""
    if type(obj) is not dict:
        return "not_an_object", "", ""
    if user_field not in obj:
        return "missing_user_id", "", ""
    user_id, reason = _user_id_of(obj[user_field])
    if reason is not None:
        return reason, "", ""
    if text_field not in obj:
        return "missing_text", "", ""
    text = obj[text_field]
    if text is None:
        return "null_text", "", ""
    if not isinstance(text, str):
        return "text_not_string", "", ""
    if not text.strip():
        return "empty_text", "", ""
    if not (_utf8_ok(text) and _utf8_ok(user_id)):  # type: ignore[arg-type]
        return "invalid_unicode", "", ""
    return None, user_id, text  # type: ignore[return-value]


def jsonl_batches(path: Path, user_field: str, text_field: str) -> Iterator[RecordBatch]:
    source = str(path)
    line_no = 0
    classify = jsonl_line_classifier(user_field, text_field)
    with open_binary(path) as fh:
        first = True
        while True:
            lines = read_lines(fh, path)
            if not lines:
                return
            if first:
                first = False
                lines[0] = lines[0].removeprefix(b"\xef\xbb\xbf")
                if lines[0].strip() == b"[":
                    raise IngestError(
                        f"input {path} looks like one JSON array; "
                        "JSON Lines (one object per line) is required"
                    )
            batch = RecordBatch(read=len(lines))
            for line in lines:
                line_no += 1
                classify(batch, source, line_no, line)
            yield batch


def jsonl_line_classifier(user_field: str, text_field: str) -> Callable[[RecordBatch, str, int, bytes], None]:
    """``classify(batch, source, line_no, line)``: :func:`classify_jsonl_line` with a fast path.

    Most lines are an object whose user id and text are non-blank JSON strings without a
    ``\\u`` escape. msgspec decodes just those two fields of such a line, checking their types,
    about 5x faster than ``json`` into a dict. Any line msgspec rejects (or that holds a ``\\u``
    escape, or a blank field) goes to :func:`classify_jsonl_line`. So every line gets the same
    record or quarantine reason as before. Where msgspec accepts, it agrees with ``json``: the same
    UTF-8 and nesting-depth errors, and the last of duplicate keys wins (tests/test_ingest.py).
    Used by both engines' JSONL readers."""
    decode = json.JSONDecoder().decode
    fast_errors = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)

    def checked(batch: RecordBatch, source: str, line_no: int, line: bytes) -> None:
        classify_jsonl_line(batch, source, line_no, line, user_field, text_field, decode)

    if user_field == text_field:  # one field as both: msgspec cannot map it twice
        return checked
    fields = msgspec.defstruct(
        "JsonlRecord", [("user_id", str), ("text", str)], rename={"user_id": user_field, "text": text_field}
    )
    fast = msgspec.json.Decoder(fields).decode

    def classify(batch: RecordBatch, source: str, line_no: int, line: bytes) -> None:
        if b"\\u" not in line:
            try:
                record = fast(line)
            except fast_errors:
                pass
            else:
                if record.user_id.strip() and record.text.strip():
                    batch.good(record.user_id, line_no, record.text)
                    return
        checked(batch, source, line_no, line)

    return classify


def classify_jsonl_line(
    batch: RecordBatch,
    source: str,
    line_no: int,
    line: bytes,
    user_field: str,
    text_field: str,
    decode: Callable[[str], Any],
) -> None:
    """One JSON line (raw bytes, BOM already removed) into ``batch``: a record, or a quarantine
    row with its reason (invalid_utf8, blank_line, malformed_json, or :func:`_jsonl_reason`'s).
    Used by the DuckDB reader and, in the Python workers, by the Spark engine's ingest, so both
    engines classify every line the same way."""
    try:
        text_line = line.decode("utf-8")
    except UnicodeDecodeError:
        batch.bad(source, line_no, "invalid_utf8", line.rstrip(b"\r\n").decode("utf-8", "replace"))
        return
    try:
        obj = decode(text_line)
    except (ValueError, RecursionError):
        raw = text_line.rstrip("\r\n")
        batch.bad(source, line_no, "malformed_json" if raw.strip() else "blank_line", raw)
        return
    # Fast path: an object with a non-blank string user id and text, no surrogate escape.
    if type(obj) is dict:
        user_id = obj.get(user_field)
        text = obj.get(text_field)
        if (
            type(user_id) is str
            and type(text) is str
            and "\\u" not in text_line
            and user_id.strip()
            and text.strip()
        ):
            batch.good(user_id, line_no, text)
            return
    reason, user_id, text = _jsonl_reason(text_line, obj, user_field, text_field)
    if reason is None:
        batch.good(user_id, line_no, text)
    else:
        batch.bad(source, line_no, reason, text_line.rstrip("\r\n"))


# -- CSV ---------------------------------------------------------------------------------------
class _LineTracker:
    """Feeds decoded lines to ``csv.reader`` and remembers the raw bytes of the current record."""

    def __init__(self, fh: IO[bytes], path: Path) -> None:
        self.fh = fh
        self.path = path
        self.line_no = 0
        self.raw: list[bytes] = []
        self.bad_utf8 = False

    def start_record(self) -> int:
        self.raw = []
        self.bad_utf8 = False
        return self.line_no + 1

    def raw_text(self) -> str:
        return b"".join(self.raw).rstrip(b"\r\n").decode("utf-8", "replace")

    def __iter__(self) -> Iterator[str]:
        while True:
            try:
                line = self.fh.readline()
            except (EOFError, zlib.error, gzip.BadGzipFile):
                raise IngestError(f"input {self.path}: the gzip stream is truncated or corrupt") from None
            except OSError as err:
                raise IngestError(
                    f"cannot read input {self.path}: {err.strerror or type(err).__name__}"
                ) from None
            if not line:
                return
            self.line_no += 1
            if self.line_no == 1:
                line = line.removeprefix(b"\xef\xbb\xbf")
            if sum(len(r) for r in self.raw) < QUARANTINE_RAW_MAX_CHARS:
                self.raw.append(line)
            try:
                yield line.decode("utf-8")
            except UnicodeDecodeError:
                self.bad_utf8 = True
                yield line.decode("utf-8", "replace")


def csv_batches(path: Path, user_field: str, text_field: str) -> Iterator[RecordBatch]:
    source = str(path)
    csv.field_size_limit(CSV_FIELD_LIMIT)  # process-wide setting of the csv module
    with open_binary(path) as fh:
        lines = _LineTracker(fh, path)
        reader = csv.reader(lines)
        try:
            lines.start_record()
            header = next(reader)
        except StopIteration:
            raise IngestError(
                f"input {path} is empty (a CSV header naming the columns is required)"
            ) from None
        except csv.Error:
            raise IngestError(f"input {path}: the CSV header cannot be parsed") from None
        if lines.bad_utf8:
            raise IngestError(f"input {path}: the CSV header is not valid UTF-8")
        header = [h.strip() for h in header]
        for name in (user_field, text_field):
            if header.count(name) != 1:
                problem = "has no" if name not in header else "has more than one"
                raise IngestError(
                    f"input {path}: the CSV header {problem} column '{name}' (the first line must be a "
                    "header naming the user and text columns; see user_field/text_field)"
                )
        n_fields = len(header)
        user_idx, text_idx = header.index(user_field), header.index(text_field)
        done = False
        while not done:
            batch = RecordBatch()
            while batch.read < BATCH_ROWS and batch.text_bytes < BATCH_BYTES:
                start = lines.start_record()
                try:
                    record = next(reader)
                except StopIteration:
                    done = True
                    break
                except csv.Error:
                    batch.read += 1
                    batch.bad(source, start, "csv_error", lines.raw_text())
                    continue
                batch.read += 1
                if lines.bad_utf8:
                    batch.bad(source, start, "invalid_utf8", lines.raw_text())
                elif not record or (len(record) == 1 and not record[0].strip() and n_fields > 1):
                    batch.bad(source, start, "blank_line", lines.raw_text())
                elif len(record) != n_fields:
                    batch.bad(source, start, "wrong_field_count", lines.raw_text())
                else:
                    user_id, text = record[user_idx], record[text_idx]
                    if not user_id.strip():
                        batch.bad(source, start, "empty_user_id", lines.raw_text())
                    elif not text.strip():
                        batch.bad(source, start, "empty_text", lines.raw_text())
                    else:
                        batch.good(user_id, start, text)
            if batch.read:
                yield batch


# -- Parquet -----------------------------------------------------------------------------------
def parquet_batches(path: Path, user_field: str, text_field: str) -> Iterator[RecordBatch]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = str(path)
    try:
        pfile = pq.ParquetFile(path)
    except (pa.ArrowException, OSError):
        raise IngestError(f"input {path} is not a readable Parquet file") from None
    schema = pfile.schema_arrow
    for name in (user_field, text_field):
        if schema.get_field_index(name) < 0:
            raise IngestError(
                f"input {path}: the Parquet file has no column '{name}' (see user_field/text_field)"
            )
    user_type, text_type = schema.field(user_field).type, schema.field(text_field).type
    if not (
        pa.types.is_string(user_type) or pa.types.is_large_string(user_type) or pa.types.is_integer(user_type)
    ):
        raise IngestError(
            f"input {path}: column '{user_field}' has type {user_type}; expected string or integer"
        )
    if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type)):
        raise IngestError(f"input {path}: column '{text_field}' has type {text_type}; expected string")
    row = 0
    batches = pfile.iter_batches(batch_size=BATCH_ROWS, columns=[user_field, text_field])
    while True:
        try:
            record_batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError):
            raise IngestError(f"input {path}: a Parquet row group cannot be read (corrupt file?)") from None
        frame = pl.from_arrow(record_batch)
        assert isinstance(frame, pl.DataFrame)
        frame = frame.select(
            user_id=pl.col(user_field).cast(pl.String),
            text=pl.col(text_field).cast(pl.String),
        ).with_columns(doc_id=pl.int_range(row + 1, row + 1 + pl.len(), dtype=pl.Int64))
        row += frame.height
        yield classify_frame(frame.with_columns(source=pl.lit(source)), user_field, text_field)


def classify_frame(frame: pl.DataFrame, user_field: str, text_field: str) -> RecordBatch:
    """Quarantine rules for tabular rows (Parquet here, Spark's ``mapInArrow`` in
    :mod:`dpngram.engines.spark_ingest`): ``frame`` has string columns ``user_id`` and ``text``, the
    record number ``doc_id`` and ``source``. Rows with an empty user id or a null/blank text go
    to quarantine (raw record re-encoded as JSON under the input's own field names)."""
    reason = (
        pl.when(pl.col("user_id").is_null() | (pl.col("user_id").str.strip_chars() == ""))
        .then(pl.lit("empty_user_id"))
        .when(pl.col("text").is_null())
        .then(pl.lit("null_text"))
        .when(pl.col("text").str.strip_chars() == "")
        .then(pl.lit("empty_text"))
        .otherwise(None)
    )
    frame = frame.with_columns(reason=reason)
    good = frame.filter(pl.col("reason").is_null())
    bad = frame.filter(pl.col("reason").is_not_null())
    batch = RecordBatch(read=frame.height)
    batch.user_ids = good.get_column("user_id").to_list()
    batch.doc_ids = good.get_column("doc_id").to_list()
    batch.texts = good.get_column("text").to_list()
    if bad.height:
        raw = bad.select(
            pl.struct(pl.col("user_id").alias(user_field), pl.col("text").alias(text_field))
            .struct.json_encode()
            .str.slice(0, QUARANTINE_RAW_MAX_CHARS)
        ).to_series()
        batch.bad_sources = bad.get_column("source").to_list()
        batch.bad_lines = bad.get_column("doc_id").to_list()
        batch.bad_reasons = bad.get_column("reason").to_list()
        batch.bad_raw = raw.to_list()
    return batch


def prefetch(batches: Iterator[_Item], depth: int = 1) -> Iterator[_Item]:
    """Produce the next batch in a background thread while the caller works on the current one
    (ingest: parse and tokenize there, load here; polars and DuckDB release the GIL). At most
    ``depth`` produced batches wait in the queue, so memory stays bounded; an exception in the
    producer is re-raised here."""
    handoff: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in batches:
                if not put(batch):
                    return
            put(done)
        except BaseException as err:  # noqa: BLE001 - handed to the consumer thread
            put(err)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="ingest-reader", daemon=True)
    worker.start()
    try:
        while True:
            item = handoff.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


# -- loading -----------------------------------------------------------------------------------
def tokenize_batch(
    batch: RecordBatch, lowercase: bool, where: Callable[[int], tuple[str, int | None]]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """One classified batch -> (raw_text rows, sentence rows, quarantine rows), on any engine
    (DuckDB: :mod:`dpngram.engines.ingest`; Spark's ``mapInArrow`` in
    :mod:`dpngram.engines.spark_ingest`). Documents without tokens go to quarantine as 'no_tokens';
    ``where(doc_id)`` gives their (source, line)."""
    raw = pl.DataFrame(
        {"user_id": batch.user_ids, "doc_id": batch.doc_ids, "text": batch.texts}, schema=_RAW_SCHEMA
    )
    tokenized = raw.with_columns(sentences=sentence_tokens_expr("text", lowercase))
    has_tokens = pl.col("sentences").list.len() > 0
    empty = tokenized.filter(~has_tokens)
    quarantine = pl.DataFrame(
        {
            "source": batch.bad_sources,
            "line_no": batch.bad_lines,
            "reason": batch.bad_reasons,
            "raw": batch.bad_raw,
        },
        schema=_QUARANTINE_SCHEMA,
    )
    if empty.height:
        located = [where(d) for d in empty.get_column("doc_id").to_list()]
        quarantine = pl.concat(
            [
                quarantine,
                pl.DataFrame(
                    {
                        "source": [source for source, _ in located],
                        "line_no": [line for _, line in located],
                        "reason": ["no_tokens"] * empty.height,
                        "raw": empty.get_column("text").str.slice(0, QUARANTINE_RAW_MAX_CHARS),
                    },
                    schema=_QUARANTINE_SCHEMA,
                ),
            ]
        )
        tokenized = tokenized.filter(has_tokens)
    raw_rows = tokenized.select("user_id", "doc_id", "text")
    sentences = explode_sentences(tokenized.select("user_id", "doc_id", "sentences"))
    return raw_rows, sentences, quarantine


def quarantine_summary(stats: dict[str, Any]) -> list[tuple[str, int]]:
    """(reason, rows) pairs sorted by count, for the operator's console."""
    return sorted(Counter(stats.get("quarantine_reasons", {})).items(), key=lambda kv: (-kv[1], kv[0]))


def quarantine_summary_lines(stats: dict[str, Any]) -> list[str]:
    """The quarantine summary as plain lines: how many rows of how many were quarantined, then
    one line per reason (rows, reason, meaning), most frequent first. The one formatting of it:
    ``dpngram ingest``/``run`` print these lines and the Airflow ``ingest`` task logs them. Exact
    counts: operator surfaces only (console, task log, operator file), never a release or XCom
    (docs/faults.md, "Quarantine")."""
    read = int(stats.get("rows_read", 0))
    reasons = quarantine_summary(stats)
    quarantined = sum(n for _, n in reasons)
    if not quarantined:
        return [f"quarantine: no record was quarantined ({read:,} rows read)"]
    width = max(len(reason) for reason, _ in reasons)
    digits = max(len(f"{n:,}") for _, n in reasons)
    lines = [
        f"quarantine: {quarantined:,} of {read:,} rows read were quarantined "
        f"({_percent(quarantined, read)}), by reason (exact counts: operator only, never released):"
    ]
    lines += [
        f"  {n:>{digits},}  {reason:<{width}}  {QUARANTINE_REASONS.get(reason, '')}".rstrip()
        for reason, n in reasons
    ]
    return lines


def quarantine_refusal(stats: dict[str, Any], max_fraction: float, where: str) -> str | None:
    """The one-line refusal when more than ``max_fraction`` of the rows read were quarantined
    (None when within it): how many rows of how many, the top reasons, and ``where`` to look."""
    read = int(stats.get("rows_read", 0))
    reasons = quarantine_summary(stats)
    quarantined = sum(n for _, n in reasons)
    if read == 0 or quarantined <= max_fraction * read:
        return None
    top = ", ".join(f"{reason} {n:,}" for reason, n in reasons[:3])
    more = f" and {len(reasons) - 3} more reason(s)" if len(reasons) > 3 else ""
    return (
        f"ingest refused the input: {quarantined:,} of {read:,} rows were quarantined "
        f"({_percent(quarantined, read)}), more than max_quarantine_fraction {max_fraction:g} allows; "
        f"top reasons: {top}{more}; see {where}"
    )


def _percent(part: int, whole: int) -> str:
    share = 100.0 * part / whole if whole else 0.0
    return f"{share:.2g}%" if share < 1 else f"{share:.1f}%"
