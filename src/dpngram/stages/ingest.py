"""Step ``ingest``: raw user text -> the run's private tables, with tokenization and quarantine.

:func:`run_ingest` loads ``config.input`` into the run schema with the configured engine's loader
(:func:`dpngram.engines.ingest.ingest_input`: the same tables, record numbering, quarantine
reasons and tokens on DuckDB and Spark), refuses an input with no usable
record, and checks ``delta < 1/n_users`` (:meth:`~dpngram.config.RunConfig.check_against_users`).

Privacy of the bookkeeping. Exact counts of the private input are data-dependent statistics (the
number of users, or of rows quarantined for a reason, can reveal whether one person's data is in
the input). The report part is *published* with the release and the returned dict goes to Airflow
XCom, so neither holds any count: the report part holds only facts fixed before reading the data
(input path, format, field names, tokenizer settings) and the fact that the row identity held
(it always does when ingest returns: a violation raises), plus ``max_quarantine_fraction`` and
that the quarantine check passed (a release exists only if it did). The exact counts stay in the
private ``ingest_stats`` table, read back for the operator only
(:func:`dpngram.engines.ingest_stats.ingest_stats`); of them, the quarantine summary is logged (the
Airflow task log is the operator's console there) and named in a refusal: the one deliberate
exception to "no exact statistics in logs" (docs/faults.md, "Quarantine").

Owns: the ``ingest`` step and its public report part.
Imports: dpngram.release, dpngram.engines, dpngram.text, dpngram.core.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dpngram.core.errors import IngestError, QuarantineRefused
from dpngram.engines.ingest import ingest_input
from dpngram.text.records import quarantine_refusal, quarantine_summary_lines
from dpngram.text.tokenizer import tokenizer_settings

if TYPE_CHECKING:
    from dpngram.config import RunConfig
    from dpngram.release.context import RunContext

log = logging.getLogger(__name__)


def run_ingest(
    ctx: RunContext, progress: Callable[[int], None] | None = None, *, enforce_quarantine_limit: bool = True
) -> dict[str, Any]:
    """Stage entry point (CLI and Airflow): ingest ``ctx.config.input`` into ``ctx.schema``.

    Logs the quarantine summary (:func:`~dpngram.text.records.quarantine_summary_lines`: rows
    quarantined per reason, the lines ``dpngram run`` prints; Airflow shows them in the task log)
    and refuses the input (:class:`~dpngram.core.errors.QuarantineRefused`, one line) when more
    than ``max_quarantine_fraction`` of its rows were quarantined, unless
    ``enforce_quarantine_limit`` is off (``dpngram ingest``, which spends nothing, only reports).

    Checks ``delta < 1/n_users`` (:meth:`RunConfig.check_against_users`, raises ConfigError) and
    records the published report part, which holds no data-derived number (module docstring).
    Returns ``{'stage': 'ingest', 'schema': ..., 'ok': True}`` (safe for logs and XCom).
    """
    from dpngram.release.context import record_part

    config = ctx.config
    with ctx.engine() as engine:  # the engine's loader: same tables, numbering and tokens on both
        stats, fmt = ingest_input(engine, ctx.schema, config, progress)
    if stats.rows_loaded == 0:
        raise IngestError(
            f"input {config.input} has no usable record (every record was quarantined or the input "
            "is empty; see the quarantine summary)"
        )
    summary = stats.as_dict()
    for line in quarantine_summary_lines(summary):  # the Airflow task log (docs/faults.md)
        log.info("%s", line)
    if enforce_quarantine_limit:
        _enforce_quarantine_limit(ctx, summary)
    config.check_against_users(stats.users)
    part = _report_part(config, fmt)
    record_part(ctx, "ingest", part)
    return {"stage": "ingest", "schema": ctx.schema, "ok": True}


def _enforce_quarantine_limit(ctx: RunContext, summary: dict[str, Any]) -> None:
    """Refuse the input (:class:`QuarantineRefused`) when more than ``max_quarantine_fraction`` of
    its rows were quarantined; the message says where the quarantined rows are."""
    config = ctx.config
    where = (
        f"table {ctx.schema}.quarantine in {config.run_warehouse}"
        if config.engine.name == "duckdb"
        else f"table {ctx.schema}.quarantine of the run's Spark tables"
    )
    refusal = quarantine_refusal(summary, config.max_quarantine_fraction, where)
    if refusal is not None:
        brief = (
            f"ingest refused the input: more than max_quarantine_fraction "
            f"{config.max_quarantine_fraction:g} of its rows were quarantined; the counts per reason "
            f"are in the ingest task's log, the rows in {where}"
        )
        raise QuarantineRefused(refusal + " (columns source, line_no, reason)", brief)


def _report_part(config: RunConfig, fmt: str) -> dict[str, Any]:
    """The ingest report part: parameters only, no data-derived number (module docstring)."""
    part: dict[str, Any] = {
        "input_format": fmt,  # the input's path is operator-only (operator_report.json)
        "user_field": config.user_field,
        "text_field": config.text_field,
        "tokenizer": tokenizer_settings(config.lowercase),
        "row_identity_checked": True,
        "note": "exact input counts are private: kept out of the release (warehouse table ingest_stats)",
        "quarantine": {
            "max_quarantine_fraction": config.max_quarantine_fraction,
            "check": "passed: a run with more of its rows quarantined is refused at ingest, before any "
            "noise is drawn, and never published",
            "counts": "exact, so operator-only: rows read and quarantined per reason are in "
            "operator_report.json (beside the warehouse), the ingest task's log and `dpngram run`'s "
            "summary",
        },
    }
    if fmt == "textdir":  # the confinement settings (parameters, not data: docs/faults.md)
        part["text_directory"] = {
            "extensions": list(config.text_extensions()),
            "external_symlinks": "followed (follow_external_symlinks)"
            if config.follow_external_symlinks
            else "not followed: quarantined unread",
            "symlinked_directories": "not descended: quarantined",
        }
    return part
