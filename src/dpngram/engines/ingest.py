"""Loading the input into the DuckDB warehouse, and reading back an ingest's exact statistics.

:func:`ingest_file` streams ``config.input`` through the readers of :mod:`dpngram.text.records`
and writes these tables to the run's private schema (DDL in ``sql/ingest/*.sql``; the Spark
engine writes the same tables, :func:`dpngram.engines.spark_ingest.ingest_spark`):

* ``raw_text(user_id, doc_id, text)`` — one row per usable input record (a "document");
* ``sentences(user_id, doc_id, sent_id, tokens VARCHAR[])`` — the tokenized form every later
  stage reads; a token list never spans two sentences, so n-grams never cross a boundary;
* view ``tokens(user_id, doc_id, sent_id, pos, token)`` — ``sentences`` unnested (pos 0-based);
* ``quarantine(source, line_no, reason, raw)`` — every record that could not be used, with the
  reason (:data:`dpngram.text.records.QUARANTINE_REASONS`); no record is silently dropped: after
  every ingest ``rows read = rows loaded + rows quarantined`` is checked against the tables;
* ``ingest_stats(metric, value)`` — exact counts (rows read/loaded/quarantined per reason, users,
  documents, sentences, tokens); written last, so it also marks a finished ingest.

The exact counts are PRIVATE (the number of users, or of rows quarantined for a reason, can reveal
whether one person's data is in the input): they stay in ``ingest_stats``, and
:func:`ingest_stats` reads them back, on either engine, for the operator only. Nothing
data-derived is logged here (the ``ingest`` step logs the quarantine summary: docs/faults.md).

Owns: loading records into the warehouse, the ingest tables' bookkeeping and row-identity check.
Imports: dpngram.engines, dpngram.text, dpngram.config, dpngram.core; polars.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from dpngram.config import RunConfig
from dpngram.engines.ingest_stats import count_ingested, write_stats
from dpngram.engines.sql import load_sql, safe_identifier
from dpngram.text.records import (
    IngestStats,
    RecordBatch,
    csv_batches,
    detect_format,
    jsonl_batches,
    parquet_batches,
    prefetch,
    tokenize_batch,
)
from dpngram.text.textdir import text_files, textdir_batches
from dpngram.text.token_ids import TokenDictionary

if TYPE_CHECKING:
    from dpngram.engines.base import Engine
    from dpngram.engines.duckdb import Warehouse

log = logging.getLogger(__name__)


def _load_batch(wh: Warehouse, schema: str, tokenized: TokenizedBatch) -> None:
    """Append one tokenized batch (documents without tokens are already in its quarantine rows)."""
    raw_rows, sentences, quarantine, new_tokens = tokenized.tables
    names = {
        "raw_batch": "ingest_raw_batch",
        "sentence_batch": "ingest_sentence_batch",
        "quarantine_batch": "ingest_quarantine_batch",
        "token_batch": "ingest_token_batch",
    }
    batches = {
        names["raw_batch"]: raw_rows,
        names["sentence_batch"]: sentences,
        names["quarantine_batch"]: quarantine,
        names["token_batch"]: new_tokens,
    }
    with wh.registered(**batches):
        wh.run_sql("ingest/load_batch", schema=schema, **names)


@dataclass
class TokenizedBatch:
    """One input batch after :func:`tokenize_batch`: its (raw_text, sentences with their token
    ids, quarantine) rows and the dictionary's new entries (token, tid)."""

    read: int
    tables: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]


#: At most this many batches are tokenized at once (more threads than this wait on the reader).
MAX_TOKENIZER_THREADS = 4


def tokenizer_threads(threads: int | None) -> int:
    """How many batches ingest tokenizes at once: one per thread the run may use (``--threads``,
    default one per CPU core), at most :data:`MAX_TOKENIZER_THREADS`."""
    return max(1, min(threads or os.cpu_count() or 1, MAX_TOKENIZER_THREADS))


def _tokenized(
    batches: Iterator[RecordBatch],
    lowercase: bool,
    where: Callable[[int], tuple[str, int | None]],
    threads: int = 1,
) -> Iterator[TokenizedBatch]:
    """Tokenize each batch and give its tokens ids from one dictionary grown batch by batch.

    Up to ``threads`` batches are tokenized at once in a pool (polars releases the GIL, so they
    run in parallel; docs/engines.md, "Ingest: tokenizing batches in parallel"), while this
    generator's thread parses the next records and codes the finished batches. Batches are coded
    and yielded in input order, so the ids are the same whatever ``threads`` is. At most
    ``threads`` tokenized batches wait here, so memory stays bounded."""
    dictionary = TokenDictionary()
    Tokenizing = Future[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]]

    def coded(read: int, tokenizing: Tokenizing) -> TokenizedBatch:
        raw_rows, sentences, quarantine = tokenizing.result()
        tids, new_tokens = dictionary.encode(sentences.get_column("tokens"))
        return TokenizedBatch(read, (raw_rows, sentences.with_columns(tids), quarantine, new_tokens))

    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ingest-tokenizer")
    try:
        pending: deque[tuple[int, Tokenizing]] = deque()
        for batch in batches:
            pending.append((batch.read, pool.submit(tokenize_batch, batch, lowercase, where)))
            if len(pending) >= threads:
                yield coded(*pending.popleft())
        while pending:
            yield coded(*pending.popleft())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def add_token_ids(engine: Engine, schema: str, table: str = "sentences") -> None:
    """Give ``{schema}.{table}`` (the sentences) written with tokens only (a test's table) its
    ``tids`` column and the dictionary ``token_ids``, as ingest writes them, on either engine.
    Reads the whole table into this process: for small tables."""
    table = safe_identifier(table)
    sql = f"SELECT user_id, doc_id, sent_id, tokens FROM {schema}.{table} ORDER BY doc_id, sent_id, user_id"
    frame = pl.from_arrow(engine.fetch_arrow(sql))
    tids, entries = TokenDictionary().encode(frame.get_column("tokens"))
    rows = {
        "ingest_sentence_rows": frame.with_columns(tids).to_arrow(),
        "ingest_token_rows": entries.to_arrow(),
    }
    with engine.registered(**rows):
        engine.execute(
            load_sql(
                "ingest/with_token_ids",
                schema=schema,
                table=table,
                sentence_rows="ingest_sentence_rows",
                token_rows="ingest_token_rows",
            )
        )


def ingest_file(
    wh: Warehouse,
    schema: str,
    config: RunConfig,
    progress: Callable[[int], None] | None = None,
) -> IngestStats:
    """Read ``config.input`` into ``schema`` (tables above) and return the exact statistics.

    ``progress``, if given, is called after every batch with the cumulative number of input
    records read (an exact count: wire it to the operator's console only, never to a log).
    Raises :class:`IngestError` if the input cannot be read at all.
    """
    started = time.perf_counter()
    path = Path(config.input)
    fmt = detect_format(path, config.input_format)
    log.info("ingest: reading %s input", fmt)
    wh.run_sql("ingest/create", schema=schema)
    wh.run_sql("ingest/tokens_view", schema=schema)

    if fmt == "textdir":
        files = text_files(path, config.text_extensions(), config.follow_external_symlinks)
        batches = textdir_batches(path, files)

        def where(doc_id: int) -> tuple[str, int | None]:
            return files[doc_id - 1].rel, None
    else:
        reader = {"jsonl": jsonl_batches, "csv": csv_batches, "parquet": parquet_batches}[fmt]
        batches = reader(path, config.user_field, config.text_field)

        def where(doc_id: int) -> tuple[str, int | None]:
            return str(path), doc_id

    rows_read = 0
    # Parsing and coding run in the reader thread, tokenizing in a pool beside it, while the main
    # thread loads the previous batch: DuckDB's insert then overlaps the tokenizer (polars and
    # DuckDB release the GIL), instead of running after it (docs/engines.md, "Scale").
    threads = tokenizer_threads(config.engine.threads)
    for tokenized in prefetch(_tokenized(batches, config.lowercase, where, threads)):
        _load_batch(wh, schema, tokenized)
        rows_read += tokenized.read
        if progress is not None:
            progress(rows_read)

    stats = count_ingested(wh, schema, rows_read)
    stats.seconds = round(time.perf_counter() - started, 3)
    write_stats(wh, schema, stats)
    log.info("ingest: done")
    return stats


def ingest_input(
    engine: Engine, schema: str, config: RunConfig, progress: Callable[[int], None] | None = None
) -> tuple[IngestStats, str]:
    """Ingest ``config.input`` into ``schema`` with the engine's loader: the one place that chooses
    per engine (DuckDB: :func:`ingest_file`; Spark: :func:`dpngram.engines.spark_ingest.ingest_spark`,
    same tables, numbering and tokens). Returns the (PRIVATE) statistics and the input format read.
    ``progress`` (records read so far) is called by the DuckDB loader only."""
    if engine.name == "spark":
        from dpngram.engines.spark_ingest import ingest_spark, spark_input_format

        fmt = spark_input_format(str(config.input), config.input_format)
        return ingest_spark(engine, schema, config), fmt
    fmt = detect_format(config.input, config.input_format)
    return ingest_file(engine, schema, config, progress), fmt
