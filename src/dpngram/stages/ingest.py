"""TODO docstring (moved from pipeline/ingest.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dpngram.core.errors import IngestError
from dpngram.engines.ingest import ingest_file
from dpngram.text.records import detect_format
from dpngram.text.tokenizer import tokenizer_settings

if TYPE_CHECKING:
    from dpngram.release.context import RunContext

log = logging.getLogger(__name__)



def run_ingest(ctx: RunContext, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Stage entry point (CLI and Airflow): ingest ``ctx.config.input`` into ``ctx.schema``.

    Checks ``delta < 1/n_users`` (:meth:`RunConfig.check_against_users`, raises ConfigError) and
    records the published report part, which holds no data-derived number (module docstring).
    Returns ``{'stage': 'ingest', 'schema': ..., 'ok': True}`` (safe for logs and XCom).
    """
    from dpngram.release.context import record_part

    config = ctx.config
    if config.engine.name == "spark":  # pipeline/spark_engine.py: same tables, numbering and tokens
        from dpngram.engines.spark import ingest_spark, spark_input_format

        with ctx.engine() as engine:
            stats = ingest_spark(engine, ctx.schema, config)
        fmt = spark_input_format(str(config.input), config.input_format)
    else:
        with ctx.warehouse() as wh:
            stats = ingest_file(wh, ctx.schema, config, progress)
        fmt = detect_format(config.input, config.input_format)
    if stats.rows_loaded == 0:
        raise IngestError(
            f"input {config.input} has no usable record (every record was quarantined or the input "
            "is empty; see the quarantine summary)"
        )
    config.check_against_users(stats.users)
    record_part(
        ctx,
        "ingest",
        {
            "input": str(config.input),
            "input_format": fmt,
            "user_field": config.user_field,
            "text_field": config.text_field,
            "tokenizer": tokenizer_settings(config.lowercase),
            "row_identity_checked": True,
            "note": "exact input counts are private: kept out of the release (warehouse table ingest_stats)",
        },
    )
    return {"stage": "ingest", "schema": ctx.schema, "ok": True}
