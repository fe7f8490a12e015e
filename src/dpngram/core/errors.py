"""TODO docstring (moved from pipeline/accounting.py, pipeline/config.py, pipeline/ingest.py, pipeline/validate.py, lm/arpa.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

if TYPE_CHECKING:

    pass



class BudgetError(ValueError):
    """A requested spend is impossible or would exceed a budget."""


class ConfigError(ValueError):
    """A run parameter is invalid. ``str()`` is one readable line per problem."""


# -- errors and statistics ---------------------------------------------------------------------
class IngestError(ValueError):
    """The input cannot be ingested at all. ``str()`` is one line naming the path (never data)."""


class ValidationFailed(RuntimeError):
    """At least one expectation failed. ``str()``: a header line, then one line per failure
    (``suite: expectation on column``); ``failures`` holds the same lines."""

    def __init__(self, failures: list[str]) -> None:
        self.failures = list(failures)
        header = f"validation failed ({len(failures)} expectation(s)); the release was not published:"
        super().__init__("\n".join([header, *(f"  - {line}" for line in failures)]))


class ArpaError(ValueError):
    """An ARPA file or an n-gram table breaks the ARPA rules. One line, no data values."""
