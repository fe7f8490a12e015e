"""What failed runs leave behind, and releasing it (``dpngram gc``).

A run that never published leaves a ledger run that is not closed (holding a budget reservation,
or suspended), its private tables (the DuckDB file ``WAREHOUSE/runs/RUN_ID.duckdb``), and a
staging directory (``OUT/DATASET/runs/RUN_ID.staging``; for an ``OUT`` on object storage,
``WAREHOUSE/staging/DATASET/RUN_ID``). :class:`UnpublishedRuns` finds them: every run the ledger
has not closed, wherever its staging directory is and whatever happened to it, and the staging
directories under ``OUT/DATASET/runs`` of every dataset (and under the old shared ``OUT/runs``)
the ledger does not know. :meth:`UnpublishedRuns.delete` closes their ledger runs (their
reservations are released, their charges stay), deletes their private tables (and a Spark run's
local table directory) and removes their staging directories. An interrupted publish (a kill
after the commit point and before ``latest`` moved) is completed, not deleted
(:meth:`UnpublishedRuns.complete_publishes`). The private tables of runs already closed that are
still in this machine's warehouse directory (a worker that ran one of their tasks, a drop that
failed) are listed and deleted too (:meth:`UnpublishedRuns.closed_leftovers`).

Owns: :class:`UnpublishedRuns`, :class:`Unpublished`.
Imports: dpngram.release (identity, layout, ledger, publish, storage).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from dpngram.release.identity import remove_run_files
from dpngram.release.layout import LegacyLayoutError, check_out_layout
from dpngram.release.ledger import Ledger
from dpngram.release.publish import complete_publishes, drop_private_tables
from dpngram.release.run_store import forget_run
from dpngram.release.storage import is_object_url


@dataclass(frozen=True)
class Unpublished:
    """One run that never published: its id, the staging directory to remove (None when there is
    none to remove) and a one-line description (paths, ages, budgets: no data)."""

    run_id: str
    staging: Path | None
    description: str


class UnpublishedRuns:
    """The unpublished runs the ledger knows, the private tables of closed runs left in this
    machine's warehouse directory, and the staging directories of a local output directory."""

    def __init__(self, ledger: Ledger, warehouse: Path, out: str | None) -> None:
        self.ledger = ledger
        self.warehouse = Path(warehouse)
        self.out = None if out is None or is_object_url(out) else Path(str(out).removeprefix("file://"))
        self.now = time.time()

    def _age_hours(self, staging: Path) -> float | None:
        try:
            stamps = [p.stat().st_mtime for p in staging.rglob("*")] + [staging.stat().st_mtime]
        except OSError:
            return None
        return (self.now - max(stamps)) / 3600

    def complete_publishes(self) -> list[Path | str]:
        """Complete the ledger's interrupted publishes; their release locations."""
        return complete_publishes(self.ledger)

    def find(self, run_id: str | None, older_than: float) -> list[Unpublished]:
        """The unpublished runs: ``run_id`` alone (whatever its age), or every run untouched for
        ``older_than`` hours; the ledger's first, then the staging directories it does not know."""

        def selected(candidate: str, hours: float) -> bool:
            return candidate == run_id if run_id else hours >= older_than

        found: list[Unpublished] = []
        known: set[str] = set()
        for run in self.ledger.open_runs():
            known.add(run["run_id"])
            staging = _local_staging(run)
            staged_age = self._age_hours(staging) if staging is not None and staging.is_dir() else None
            hours = min(run["age_seconds"] / 3600, staged_age if staged_age is not None else float("inf"))
            if not selected(run["run_id"], hours):
                continue
            reserved, charged = run["reserved"], run["charged"]
            holds = (
                f"reserves epsilon {reserved.epsilon:.4g}, delta {reserved.delta:.3g}"
                if run["state"] == "open"
                else "reserves nothing (suspended: it drew no noise)"
            )
            if staging is None:
                where = "staging unknown"
            elif staged_age is not None:
                where = f"staging {staging}"
            else:
                where = f"staging {staging} is gone or unreadable"
            found.append(
                Unpublished(
                    run["run_id"],
                    staging if staged_age is not None else None,
                    f"run {run['run_id']} (dataset {run['dataset']}, {hours:.1f} h old): {holds}; "
                    f"charged epsilon {charged.epsilon:.4g}, delta {charged.delta:.3g}; {where}",
                )
            )
        out = self.out
        # every dataset's OUT/DATASET/runs, and the old shared OUT/runs (listed so it can be cleaned)
        stagings = sorted([*out.glob("*/runs/*.staging"), *out.glob("runs/*.staging")]) if out else []
        for staging in stagings:
            candidate = staging.name.removesuffix(".staging")
            hours = self._age_hours(staging)
            if candidate in known or hours is None or not selected(candidate, hours):
                continue
            found.append(
                Unpublished(
                    candidate,
                    staging,
                    f"run {candidate} ({hours:.1f} h old): staging {staging}, not in the ledger",
                )
            )
        return found

    def layout_note(self) -> str | None:
        """What is wrong with the output directory's layout (the old shared one), or None."""
        if self.out is None:
            return None
        try:
            check_out_layout(self.out)
        except LegacyLayoutError as err:
            return str(err)
        return None

    def closed_leftovers(self, run_id: str | None = None) -> list[str]:
        """Runs the ledger has closed (published, or released) whose private tables are still in
        this machine's warehouse directory (``run_id`` alone, when given): a worker that ran one of
        their tasks, or a delete that failed. Nothing can use those tables any more."""
        files = {p.name.removesuffix(".duckdb") for p in (self.warehouse / "runs").glob("*.duckdb")}
        return [
            closed
            for closed, _ in self.ledger.closed_runs()
            if (run_id is None or closed == run_id) and closed in files
        ]

    def drop_leftovers(self, run_ids: list[str]) -> None:
        """Delete the private tables of :meth:`closed_leftovers`."""
        for closed in run_ids:
            remove_run_files(self.warehouse, closed)

    def delete(self, found: list[Unpublished]) -> None:
        """Close the runs' ledger runs (reservations released, charges kept), delete their private
        tables and remove their staging directories."""
        for run in found:
            if self.ledger.run(run.run_id) is not None:
                self.ledger.close_run(run.run_id)
                drop_private_tables(self.ledger, run.run_id)
            if run.staging is not None:
                shutil.rmtree(run.staging)
            forget_run(run.run_id)  # its prefix in the run store, where workers share one


def _local_staging(run: dict) -> Path | None:
    """Where an unclosed run's staged files are on this machine: its staging directory under a
    local OUT, or (OUT on object storage) its staging under the warehouse it registered."""
    staged = run.get("staging")
    if not staged:
        return None
    if is_object_url(staged):
        return Path(run["warehouse"] or ".") / "staging" / run["dataset"] / run["run_id"]
    return Path(staged)
