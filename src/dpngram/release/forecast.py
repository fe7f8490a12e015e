"""The operator's view of a lifetime budget: how many more refreshes it allows, and when a refresh
schedule would stop.

:meth:`dpngram.release.ledger.Ledger.forecast` gives a :class:`Forecast` (the refreshes left at a
run's (ε, δ), the binding limit); :func:`schedule_stop` turns it into the date of the last refresh
a cron schedule or Airflow preset can still run. The pre-check task logs both, and ``dpngram
ledger`` / ``dpngram budget`` print them.

Owns: :class:`Forecast`, :func:`forecast`, :func:`schedule_stop`.
Imports: dpngram.core; croniter.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from dpngram.core.budget import Budget

#: Relative slack when comparing a spend with a lifetime limit (as the ledger's).
_SLACK = 1e-12


@dataclass(frozen=True)
class Forecast:
    """How many more runs at ``per_run`` (ε, δ) a dataset's lifetime budget allows. ``runs_left``
    is None without a lifetime limit; ``limited_by`` names the limit that binds."""

    dataset: str
    lifetime: tuple[float | None, float | None]
    committed: Budget
    per_run: Budget | None
    runs_left: int | None
    limited_by: str | None

    def sentence(self) -> str:
        """One line for the pre-check's log and ``dpngram ledger``."""
        eps, delta = self.lifetime
        if eps is None and delta is None:
            return f"dataset '{self.dataset}' has no lifetime budget: refreshes are not limited"
        if self.per_run is None:
            return f"dataset '{self.dataset}': no run yet, so no refresh size to forecast from"
        left = self.runs_left
        plural = "" if left == 1 else "es"
        return (
            f"dataset '{self.dataset}': the lifetime budget allows {left} more refresh{plural} at "
            f"epsilon {self.per_run.epsilon:.4g}, delta {self.per_run.delta:.3g} per run "
            f"(committed epsilon {self.committed.epsilon:.4g} of {_limit(eps, '.4g')}, delta "
            f"{self.committed.delta:.3g} of {_limit(delta, '.3g')}; {self.limited_by} binds)"
        )


#: Airflow's schedule presets as cron expressions (the ones a refresh schedule uses).
_PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}


def schedule_stop(schedule: str | None, runs_left: int | None, now: dt.datetime) -> str | None:
    """When a refresh ``schedule`` (cron expression or Airflow preset) would stop: one sentence
    naming the date of the last refresh the budget allows and of the first one that will be
    refused; None without a schedule or a limit, or for a schedule that is not a cron (say,
    ``@once``)."""
    if not schedule or runs_left is None:
        return None
    from croniter import croniter

    expression = _PRESETS.get(schedule.strip().lower(), schedule.strip())
    if not croniter.is_valid(expression):
        return None
    fires = croniter(expression, now)
    times = [fires.get_next(dt.datetime) for _ in range(runs_left + 1)]
    refused = times[-1].strftime("%Y-%m-%d %H:%M %Z").strip()
    if runs_left == 0:
        return f"with schedule {schedule!r} the next refresh ({refused}) will be refused"
    last = times[-2].strftime("%Y-%m-%d %H:%M %Z").strip()
    return (
        f"with schedule {schedule!r} the last refresh the budget allows is on {last}; the one on "
        f"{refused} will be refused at its privacy pre-check"
    )


def _limit(value: float | None, fmt: str) -> str:
    return "no limit" if value is None else format(value, fmt)


def forecast(
    dataset: str, lifetime: tuple[float | None, float | None], used: Budget, per_run: Budget | None
) -> Forecast:
    """How many runs of ``per_run`` fit between ``used`` and ``lifetime`` (each limit that is set)."""
    if per_run is None or (lifetime[0] is None and lifetime[1] is None):
        return Forecast(dataset, lifetime, used, per_run, None, None)
    counts = {}
    for name, limit, spent, size in (
        ("epsilon", lifetime[0], used.epsilon, per_run.epsilon),
        ("delta", lifetime[1], used.delta, per_run.delta),
    ):
        if limit is None:
            continue
        room = limit * (1 + _SLACK) - spent
        counts[name] = max(0, math.floor(room / size + 1e-9)) if size > 0 else math.inf
    binding = min(counts, key=lambda name: counts[name])
    left = counts[binding]
    return Forecast(dataset, lifetime, used, per_run, None if math.isinf(left) else int(left), binding)
