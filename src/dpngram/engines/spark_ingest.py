"""Ingest on the Spark engine: the input into a run's Spark tables, as the DuckDB path does.

JSONL or Parquet from any Hadoop-compatible path (file, directory or glob), read by
``spark.read``; records are numbered like the DuckDB path (line / row number in the file), then
classified and tokenized in Python workers with ``mapInArrow`` by the same code as the DuckDB path
(:mod:`dpngram.text.records`, :func:`dpngram.text.tokenizer.sentence_tokens_expr`), so the tables,
the quarantine reasons and the tokens are identical. The bookkeeping after loading (the row-identity
check, ``ingest_stats``) is the DuckDB path's own, through the :class:`~dpngram.engines.base.Engine`
protocol (:mod:`dpngram.engines.ingest_stats`).
:func:`dpngram.engines.ingest.ingest_input` is the one place that picks this loader or the DuckDB one.

Owns: :func:`ingest_spark`, :func:`spark_input_format`.
Imports: dpngram.engines (spark, sql, ingest), dpngram.text, dpngram.config, dpngram.core; pyspark,
pyarrow, polars.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from dpngram.config import RunConfig
from dpngram.engines.spark import SparkEngine
from dpngram.engines.sql import load_sql

_FILE_SHIFT = 40  # doc_id = file_index * 2^40 + record number (file_index 0 for a single file)


_STAGED_FIELDS = [
    ("kind", pa.string()),  # 'raw', 'sentence' or 'quarantine'
    ("user_id", pa.string()),
    ("doc_id", pa.int64()),
    ("text", pa.string()),
    ("sent_id", pa.int32()),
    ("tokens", pa.list_(pa.string())),
    ("source", pa.string()),
    ("line_no", pa.int64()),
    ("reason", pa.string()),
    ("raw", pa.string()),
]


_STAGED_SCHEMA = pa.schema(_STAGED_FIELDS)


_STAGED_DDL = (
    "kind string, user_id string, doc_id bigint, text string, sent_id int, tokens array<string>, "
    "source string, line_no bigint, reason string, raw string"
)


def spark_input_format(path: str, input_format: str) -> str:
    from dpngram.core.errors import IngestError

    if input_format in ("jsonl", "parquet"):
        return input_format
    if input_format != "auto":
        raise IngestError(
            f"input {path}: input_format '{input_format}' is not supported by the Spark engine "
            "(use jsonl or parquet)"
        )
    name = path.rstrip("/").lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    raise IngestError(f"input {path}: the Spark engine reads JSONL or Parquet; set input_format")


def _numbered(df: Any) -> tuple[Any, int, int]:
    """Add ``doc_id``: the 1-based record number in its file (line for JSONL, row for Parquet), as
    the DuckDB path numbers them; with several files, + file_index * 2^40 (files sorted by path).

    Rows of one file block are contiguous and in order inside one scan partition, so the record
    number is (records in earlier blocks of the file) + (position in the block); the block sizes
    are counted first (one extra pass over the input, aggregated in the JVM)."""
    from pyspark.sql import functions as F

    df = df.withColumn("_mid", F.monotonically_increasing_id())
    blocks = (
        df.groupBy(
            F.col("_metadata.file_path").alias("_file"), F.col("_metadata.file_block_start").alias("_block")
        )
        .agg(F.count(F.lit(1)).alias("_n"), F.min("_mid").alias("_first"))
        .collect()
    )
    files = sorted({r["_file"] for r in blocks})
    file_index = {f: i for i, f in enumerate(files)}
    rows = []
    seen: dict[str, int] = {}
    for r in sorted(blocks, key=lambda r: (r["_file"], r["_block"])):
        before = seen.get(r["_file"], 0)
        base = (file_index[r["_file"]] << _FILE_SHIFT) + before + 1 - r["_first"]
        rows.append((r["_file"], int(r["_block"]), int(base)))
        seen[r["_file"]] = before + int(r["_n"])
    spark = df.sparkSession
    offsets = spark.createDataFrame(rows, "_file string, _block long, _base long")
    joined = df.join(
        F.broadcast(offsets),
        (F.col("_metadata.file_path") == offsets["_file"])
        & (F.col("_metadata.file_block_start") == offsets["_block"]),
    )
    numbered = joined.withColumn("doc_id", F.col("_mid") + F.col("_base")).withColumn(
        "_source", F.col("_metadata.file_path")
    )
    return numbered, len(files), sum(int(r["_n"]) for r in blocks)


def _jsonl_records(batch: pa.RecordBatch, user_field: str, text_field: str, source_name: str) -> Any:
    """Classify JSON lines with :func:`dpngram.text.records.jsonl_line_classifier` (the DuckDB
    reader's rules); returns an ingest ``RecordBatch``."""
    from dpngram.text.records import RecordBatch, jsonl_line_classifier

    classify = jsonl_line_classifier(user_field, text_field)
    out = RecordBatch(read=batch.num_rows)
    lines = batch.column("line").to_pylist()
    doc_ids = batch.column("doc_id").to_pylist()
    sources = batch.column("_source").to_pylist() if source_name == "" else None
    for i, (line, line_no) in enumerate(zip(lines, doc_ids, strict=True)):
        source = sources[i] if sources is not None else source_name
        if line_no & ((1 << _FILE_SHIFT) - 1) == 1:
            line = line.removeprefix(b"\xef\xbb\xbf")
        classify(out, source, line_no, line)
    return out


def _parquet_records(batch: pa.RecordBatch, user_field: str, text_field: str, source_name: str) -> Any:
    """Classify Parquet rows exactly like :func:`dpngram.text.records.parquet_batches`."""
    import polars as pl

    from dpngram.text.records import classify_frame

    frame = pl.from_arrow(pa.Table.from_batches([batch]))
    assert isinstance(frame, pl.DataFrame)
    frame = frame.select(
        user_id=pl.col(user_field).cast(pl.String),
        text=pl.col(text_field).cast(pl.String),
        doc_id=pl.col("doc_id").cast(pl.Int64),
        source=pl.col("_source") if source_name == "" else pl.lit(source_name),
    )
    return classify_frame(frame, user_field, text_field)


def _tokenize_records(records: Any, lowercase: bool, source_of: dict[int, str]) -> pa.RecordBatch:
    """Tokenize one classified batch as :func:`dpngram.engines.ingest._load_batch` does and return the
    staged rows (raw texts, sentences, quarantine) in one Arrow batch."""
    import polars as pl

    from dpngram.text.records import tokenize_batch

    raw_rows, sentences, quarantine = tokenize_batch(
        records, lowercase, lambda doc_id: (source_of.get(doc_id, ""), doc_id)
    )
    parts = [
        raw_rows.select(pl.lit("raw").alias("kind"), "user_id", "doc_id", "text"),
        sentences.select(pl.lit("sentence").alias("kind"), "user_id", "doc_id", "sent_id", "tokens"),
        quarantine.select(pl.lit("quarantine").alias("kind"), "source", "line_no", "reason", "raw"),
    ]
    staged = pl.concat(parts, how="diagonal_relaxed").to_arrow()
    columns = [
        staged.column(name).cast(dtype) if name in staged.column_names else pa.nulls(staged.num_rows, dtype)
        for name, dtype in _STAGED_FIELDS
    ]
    return pa.RecordBatch.from_arrays(
        [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns], schema=_STAGED_SCHEMA
    )


def ingest_spark(engine: SparkEngine, schema: str, config: RunConfig) -> Any:
    """Ingest ``config.input`` (JSONL or Parquet; file, directory or glob on any Hadoop-compatible
    path) into ``schema`` on Spark: tables raw_text, sentences, quarantine, ingest_stats and the
    tokens view, with the same columns, record numbering, quarantine reasons and tokens as
    :func:`dpngram.engines.ingest.ingest_file`. Returns the (PRIVATE) :class:`IngestStats`."""
    import time

    from dpngram.engines.ingest_stats import count_ingested, write_stats
    from dpngram.text.records import IngestStats

    started = time.perf_counter()
    path = str(config.input)
    fmt = spark_input_format(path, config.input_format)
    user_field, text_field, lowercase = config.user_field, config.text_field, config.lowercase
    df = _read_spark_input(engine.spark, path, fmt, user_field, text_field)
    numbered, n_files, rows_read = _numbered(df)
    single_file = n_files <= 1
    # The DuckDB path names the input path as the source of a single file's records.
    source_name = path if single_file else ""
    columns = ["doc_id", "_source"] + (["line"] if fmt == "jsonl" else [user_field, text_field])
    classify = _jsonl_records if fmt == "jsonl" else _parquet_records

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            records = classify(batch, user_field, text_field, source_name)
            sources = batch.column("_source").to_pylist() if source_name == "" else None
            source_of = (
                {d: s for d, s in zip(batch.column("doc_id").to_pylist(), sources, strict=True)}
                if sources is not None
                else {d: source_name for d in records.doc_ids}
            )
            yield _tokenize_records(records, lowercase, source_of)

    _materialize_staged(engine, schema, numbered.select(*columns).mapInArrow(stage, _STAGED_DDL))
    engine.drop(schema, "ingest_stats")
    engine.execute(load_sql("ingest/tokens_view", schema=schema))
    stats: IngestStats = count_ingested(engine, schema, rows_read)
    stats.seconds = round(time.perf_counter() - started, 3)
    write_stats(engine, schema, stats)
    return stats


def _read_spark_input(spark: Any, path: str, fmt: str, user_field: str, text_field: str) -> Any:
    """The input as a Spark DataFrame with ``_metadata``: JSONL as raw lines (column ``line``),
    Parquet as its user and text columns, after checking that they exist and have usable types."""
    from pyspark.sql import functions as F

    from dpngram.core.errors import IngestError

    try:
        if fmt == "jsonl":
            df = spark.read.text(path).select(F.col("value").cast("binary").alias("line"), "_metadata")
        else:
            df = spark.read.parquet(path)
    except Exception as err:  # noqa: BLE001 - AnalysisException etc.: name the path only
        raise IngestError(f"input {path} cannot be read by Spark ({type(err).__name__})") from None
    if fmt == "parquet":
        from pyspark.sql import types as T

        fields = {f.name: f.dataType for f in df.schema.fields}
        for name in (user_field, text_field):
            if name not in fields:
                raise IngestError(
                    f"input {path}: the Parquet input has no column '{name}' (see user_field/text_field)"
                )
        if not isinstance(fields[user_field], (T.StringType, T.IntegralType)):
            raise IngestError(
                f"input {path}: column '{user_field}' has type {fields[user_field].simpleString()}; "
                "expected string or integer"
            )
        if not isinstance(fields[text_field], T.StringType):
            raise IngestError(
                f"input {path}: column '{text_field}' has type {fields[text_field].simpleString()}; "
                "expected string"
            )
        df = df.select(user_field, text_field, "_metadata")
    return df


def _materialize_staged(engine: SparkEngine, schema: str, staged: Any) -> None:
    """Write tables raw_text, sentences and quarantine from the tokenized ``staged`` rows."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    # Tokenize once: the three tables are filtered from the cached (spillable) staged rows.
    table = staged.persist(StorageLevel.MEMORY_AND_DISK)
    engine.materialize(
        schema,
        "raw_text",
        table.filter(F.col("kind") == "raw").select("user_id", "doc_id", "text"),
    )
    sentences = table.filter(F.col("kind") == "sentence").select("user_id", "doc_id", "sent_id", "tokens")
    engine.materialize(schema, "sentences", _with_token_ids(engine, schema, sentences))
    engine.materialize(
        schema,
        "quarantine",
        table.filter(F.col("kind") == "quarantine").select("source", "line_no", "reason", "raw"),
    )
    table.unpersist()


_SENTENCES_DDL = "user_id string, doc_id bigint, sent_id int, tokens array<string>, tids array<int>"


_SENTENCES_SCHEMA = pa.schema(
    [
        ("user_id", pa.string()),
        ("doc_id", pa.int64()),
        ("sent_id", pa.int32()),
        ("tokens", pa.list_(pa.string())),
        ("tids", pa.list_(pa.int32())),
    ]
)


def _with_token_ids(engine: SparkEngine, schema: str, sentences: Any) -> Any:
    """The sentences with their token ids, and the run's dictionary written as ``token_ids``
    (:mod:`dpngram.text.token_ids`). The Python workers cannot grow one dictionary together, so
    the distinct tokens are collected first (as many as the corpus has words), numbered in sorted
    order, broadcast, and each worker casts its sentences with them."""
    from pyspark.sql import functions as F

    words = sentences.select(F.explode("tokens").alias("token")).where(F.col("token").isNotNull()).distinct()
    tokens = sorted(words.toArrow().column("token").to_pylist())
    dictionary = pa.table(
        {"token": pa.array(tokens, pa.string()), "tid": pa.array(range(1, len(tokens) + 1), pa.int32())}
    )
    engine.load_table(schema, "token_ids", [dictionary], dictionary.schema)
    shared = engine.spark.sparkContext.broadcast(tokens)

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import polars as pl

        from dpngram.text.token_ids import dictionary_dtype, ids_of_coded

        dtype = dictionary_dtype(shared.value)
        for batch in batches:
            frame = pl.from_arrow(batch)
            tids = ids_of_coded(frame.get_column("tokens").cast(dtype))
            yield from frame.with_columns(tids).to_arrow().cast(_SENTENCES_SCHEMA).to_batches()

    return sentences.mapInArrow(encode, _SENTENCES_DDL)
