"""Every error a user can cause, in one place: each means "fix the input or the parameters", never
"retry", and its message is one readable line (or a header plus one line per failed expectation)
that names the parameter, path or rule and never carries private data.

The CLI prints these without a traceback; the Airflow DAG turns them into a failure without retry
(:data:`USER_ERRORS`). Anything else is unexpected and is retried or shown with a traceback.

Owns: the user-facing error classes and :data:`USER_ERRORS`.
Imports: nothing from dpngram; the standard library only.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A run parameter is invalid. ``str()`` is one readable line per problem."""


class BudgetError(ValueError):
    """A requested spend is impossible or would exceed a budget."""


class ResumeError(ValueError):
    """A run cannot be resumed as asked: its input or parameters changed since it started, or a
    stage's noise was drawn but its output is incomplete (a retry would draw it again). One line
    naming what changed or what to do."""


class WarehouseBusy(RuntimeError):
    """The warehouse database file is held open for writing by another process (DuckDB allows
    one writer). Not a user error: a retry later succeeds. One line naming the file and the
    holder's process id."""


class LedgerBusy(RuntimeError):
    """The privacy ledger could not be reached in time: its embedded file stayed locked by other
    processes, or its PostgreSQL server did not answer. Not a user error: a retry later succeeds.
    One line naming the ledger (never its password)."""


class ResourceExhausted(RuntimeError):
    """A privacy-spending stage ran out of memory or disk space, or hit an I/O error, in the engine
    or on the driver. Not a user error (a resume with more resources can succeed), so Airflow
    retries it. ``charged`` says whether the stage had drawn noise before it failed:

    * False: the failure came before the stage's first noise draw, so nothing was charged for it
      (docs/faults.md, "Selection salts"): resume the run with the same run id, e.g. with a larger
      memory limit (resource settings may change on a resume);
    * True: the stage had drawn noise; it keeps its (pending) charge and is never drawn again, so
      the run cannot be resumed past it: start a new run.

    One line that names the stage, the run id and the resource. The engine's own message (sizes,
    possibly values) is never in it: it is only chained as ``__cause__`` (shown with --debug)."""

    def __init__(self, stage: str, run_id: str, resource: str, *, charged: bool) -> None:
        self.stage, self.run_id, self.resource, self.charged = stage, run_id, resource, charged
        what = {
            "memory": "ran out of memory",
            "disk": "ran out of disk space",
            "io": "hit an I/O error (disk full?)",
        }.get(resource, "ran out of " + resource)
        if charged:
            text = (
                f"stage {stage} {what} after drawing its noise: it keeps its charge and run "
                f"'{run_id}' cannot be resumed; start a new run with a new run id"
            )
        else:
            text = (
                f"stage {stage} {what} before drawing any noise: nothing was charged for it; "
                f"resume run '{run_id}' with the same run id"
            )
        super().__init__(text)


class IngestError(ValueError):
    """The input cannot be ingested at all. ``str()`` is one line naming the path (never data)."""


class QuarantineRefused(IngestError):
    """More of the input was quarantined than ``max_quarantine_fraction`` allows. ``str()`` is one
    line: rows quarantined of rows read, the top reasons, where to look (exact counts: for the
    operator's console and task log only). ``brief`` says the same without any count (for the
    Airflow DAG run's note, which more people can read than the task log)."""

    def __init__(self, message: str, brief: str) -> None:
        super().__init__(message)
        self.brief = brief


class ArpaError(ValueError):
    """An ARPA file or an n-gram table breaks the ARPA rules. One line, no data values."""


class ValidationFailed(RuntimeError):
    """At least one expectation failed. ``str()``: a header line, then one line per failure
    (``suite: expectation on column``); ``failures`` holds the same lines."""

    def __init__(self, failures: list[str]) -> None:
        self.failures = list(failures)
        header = f"validation failed ({len(failures)} expectation(s)); the release was not published:"
        super().__init__("\n".join([header, *(f"  - {line}" for line in failures)]))


#: Errors a retry cannot fix: bad parameters or input, an exhausted budget, failed validation, a
#: missing file.
USER_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    BudgetError,
    ResumeError,
    IngestError,
    ArpaError,
    ValidationFailed,
    FileNotFoundError,
)
