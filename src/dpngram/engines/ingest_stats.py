"""An ingest's exact statistics on either engine: counting the ingest tables, writing the private
``ingest_stats`` table that marks a finished ingest, and reading it back for the operator. Shared
by the DuckDB loader (:mod:`dpngram.engines.ingest`) and the Spark one
(:mod:`dpngram.engines.spark_ingest`), which import it; it imports neither.

Owns: the ingest tables' counts and row-identity check, ``ingest_stats``.
Imports: dpngram.engines (sql, base), dpngram.text (records), dpngram.core; polars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from dpngram.core.errors import IngestError
from dpngram.text.records import IngestStats

if TYPE_CHECKING:
    from dpngram.engines.base import Engine


def count_ingested(engine: Engine, schema: str, rows_read: int) -> IngestStats:
    """The exact counts of the ingest tables in ``schema`` (on either engine), checked against
    ``rows_read``: rows read = rows loaded + rows quarantined."""
    from dpngram.engines.sql import load_sql

    counts = engine.fetch_arrow(load_sql("ingest/counts", schema=schema))
    row = [counts.column(i)[0].as_py() for i in range(counts.num_columns)]
    loaded, quarantined, users, documents, sentences, tokens = (int(v) for v in row)
    if rows_read != loaded + quarantined or documents != loaded:
        # A bookkeeping bug, not bad data: refuse to continue (no counts in the message).
        raise RuntimeError("ingest: rows read != rows loaded + rows quarantined (internal error)")
    table = engine.fetch_arrow(load_sql("ingest/quarantine_reasons", schema=schema))
    pairs = zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True)
    reasons = {str(r): int(n) for r, n in pairs}
    return IngestStats(
        rows_read=rows_read,
        rows_loaded=loaded,
        rows_quarantined=quarantined,
        quarantine_reasons=reasons,
        users=users,
        documents=documents,
        sentences=sentences,
        tokens=tokens,
    )


def write_stats(engine: Engine, schema: str, stats: IngestStats) -> None:
    """Write ``ingest_stats`` (last: it marks a finished ingest), on either engine."""
    from dpngram.engines.sql import load_sql

    metrics = {k: v for k, v in stats.as_dict().items() if isinstance(v, int)}
    metrics.update({f"quarantined.{reason}": n for reason, n in stats.quarantine_reasons.items()})
    frame = pl.DataFrame(
        {"metric": list(metrics), "value": list(metrics.values())},
        schema={"metric": pl.String, "value": pl.Int64},
    )
    with engine.registered(ingest_stats_batch=frame):
        engine.execute(load_sql("ingest/stats_write", schema=schema, stats_batch="ingest_stats_batch"))


def ingest_stats(engine: Engine, schema: str) -> dict[str, Any]:
    """The exact statistics of the last finished ingest in ``schema`` on either engine (PRIVATE:
    operator console only). Keys as :class:`IngestStats` (without seconds); raises
    :class:`IngestError` if ingest has not finished in that schema."""
    from dpngram.engines.sql import load_sql

    if not engine.table_exists(schema, "ingest_stats"):
        raise IngestError(f"no finished ingest in schema {schema}")
    out: dict[str, Any] = {"quarantine_reasons": {}}
    table = engine.fetch_arrow(load_sql("ingest/stats_read", schema=schema))
    metrics = zip(table.column("metric").to_pylist(), table.column("value").to_pylist(), strict=True)
    for metric, value in metrics:
        if metric.startswith("quarantined."):
            out["quarantine_reasons"][metric.removeprefix("quarantined.")] = int(value)
        else:
            out[metric] = int(value)
    return out
