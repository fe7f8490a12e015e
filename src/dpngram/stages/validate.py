"""Step ``validation``: run the Great Expectations suites on the run and record the result.

:func:`validate_run` runs every registered suite that applies to the run
(:data:`dpngram.validation.SUITES`: the private ingest tables and every released table), writes
``validation/results.json`` and the Data Docs into the staged release, records report part
``validation`` and raises :class:`~dpngram.core.errors.ValidationFailed` if any expectation failed.
:func:`dpngram.release.publish.publish_run` refuses a run whose ``validation`` part did not pass.
The suites and their privacy rules are in :mod:`dpngram.validation`.

Owns: the ``validation`` step (running the suites, storing results and Data Docs, the report part).
Imports: dpngram.validation, dpngram.release, dpngram.core.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from dpngram.core.errors import ValidationFailed
from dpngram.release.context import RunContext, record_part
from dpngram.release.data_docs import make_offline
from dpngram.release.layout import DATA_DOCS_DIR, VALIDATION_RESULTS, replace_tree, write_json_atomic
from dpngram.validation import (
    PART,
    SUITES,
    Sources,
    gx_context,
    run_batch,
    scrub_fingerprints,
)

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# Runner
# ----------------------------------------------------------------------------------------------
def validate_run(ctx: RunContext, suites: list[str] | None = None) -> dict[str, Any]:
    """Run every applicable registered suite (or the named ``suites``) on the run.

    Writes ``validation/results.json`` and ``validation/data_docs/`` into the staged release,
    records report part 'validation', and raises :class:`ValidationFailed` if any expectation
    failed. Returns the part (suite names, pass/fail, counts of expectations; no data values)."""
    started = time.perf_counter()
    names = list(SUITES) if suites is None else suites
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise ValueError(f"unknown validation suite(s) {unknown}; known: {list(SUITES)}")
    chosen = [SUITES[n] for n in names if SUITES[n].applies(ctx)]
    if not chosen:
        raise ValidationFailed([f"no validation suite applies to run {ctx.run_id} (nothing was released?)"])

    sources = Sources(ctx)
    try:
        batches = [batch for suite in chosen for batch in suite.batches(sources)]
    finally:
        sources.close()

    with gx_context() as (gx, context, docs_dir):
        results = [run_batch(gx, context, batch) for batch in batches]
        scrub_fingerprints(context)
        context.build_data_docs()
        target = ctx.release.path(DATA_DOCS_DIR)
        replace_tree(docs_dir, target)
        # the pages load their scripts and styles from CDNs: ship them (release/data_docs.py)
        remote = make_offline(target)
        if remote:
            log.warning("Data Docs still load %d resource(s) from the network: %s", len(remote), remote)

    failures = [f"{r['suite']}: {line}" for r in results for line in r["failures"]]
    write_json_atomic(ctx.release.path(VALIDATION_RESULTS), {"success": not failures, "suites": results})
    part = {
        "success": not failures,
        "suites": [
            {k: r[k] for k in ("suite", "private", "success", "evaluated", "failed", "failures")}
            for r in results
        ],
        "suites_run": [s.name for s in chosen],
        "results": VALIDATION_RESULTS,
        "data_docs": f"{DATA_DOCS_DIR}/index.html",
        "seconds": round(time.perf_counter() - started, 3),
    }
    record_part(ctx, PART, part)
    if failures:
        raise ValidationFailed(failures)
    return part
