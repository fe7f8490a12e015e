"""What failed runs leave behind, and releasing it (``dpngram gc``).

A run that never published leaves a ledger run that is not closed (holding a budget reservation,
or suspended), a private run schema in the warehouse, and a staging directory
``OUT/DATASET/runs/RUN_ID.staging``. :class:`UnpublishedRuns` finds them: every run the warehouse's
ledger has not closed, wherever its staging directory is and whatever happened to it, and the
staging directories under ``OUT/DATASET/runs`` of every dataset (and under the old shared
``OUT/runs``) the ledger does not know. :meth:`UnpublishedRuns.delete` closes their ledger runs
(their reservations are released, their charges stay), drops their private run schemas (and a
Spark run's local table directory) and removes their staging directories. An interrupted publish
(a kill between the rename of a complete release and the ``latest`` swap) is completed, not
deleted (:meth:`UnpublishedRuns.complete_publishes`). The private schemas of runs already closed (published
by a dpngram that kept them) are listed and dropped too (:meth:`UnpublishedRuns.closed_leftovers`).

Owns: :class:`UnpublishedRuns`, :class:`Unpublished`.
Imports: dpngram.release (layout, ledger, publish), dpngram.engines (duckdb, sql).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from dpngram.engines.duckdb import Warehouse
from dpngram.engines.sql import run_schema_name
from dpngram.release.layout import LegacyLayoutError, check_out_layout
from dpngram.release.ledger import Ledger
from dpngram.release.publish import complete_publishes, drop_private_tables


@dataclass(frozen=True)
class Unpublished:
    """One run that never published: its id, the staging directory to remove (None when there is
    none to remove) and a one-line description (paths, ages, budgets: no data)."""

    run_id: str
    staging: Path | None
    description: str


class UnpublishedRuns:
    """The unpublished runs of a warehouse (which need not exist) and of an output directory.
    A context manager: the warehouse stays open from the listing to the deletion."""

    def __init__(self, warehouse: Path, out: Path | None) -> None:
        self.warehouse = warehouse
        self.out = out
        self.now = time.time()
        self.wh: Warehouse | None = None

    def __enter__(self) -> UnpublishedRuns:
        self.wh = Warehouse(self.warehouse) if self.warehouse.is_file() else None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.wh is not None:
            self.wh.close()

    def _age_hours(self, staging: Path) -> float | None:
        try:
            stamps = [p.stat().st_mtime for p in staging.rglob("*")] + [staging.stat().st_mtime]
        except OSError:
            return None
        return (self.now - max(stamps)) / 3600

    def complete_publishes(self) -> list[Path]:
        """Complete the ledger's interrupted publishes; their release paths."""
        return complete_publishes(Ledger(self.wh.con)) if self.wh is not None else []

    def find(self, run_id: str | None, older_than: float) -> list[Unpublished]:
        """The unpublished runs: ``run_id`` alone (whatever its age), or every run untouched for
        ``older_than`` hours; the ledger's first, then the staging directories it does not know."""

        def selected(candidate: str, hours: float) -> bool:
            return candidate == run_id if run_id else hours >= older_than

        found: list[Unpublished] = []
        known: set[str] = set()
        if self.wh is not None:
            for run in Ledger(self.wh.con).open_runs():
                known.add(run["run_id"])
                staging = Path(run["staging"]) if run["staging"] else None
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
        """Runs the ledger has closed (published, or released) whose private run schema is still in
        the warehouse (``run_id`` alone, when given): left by a dpngram that did not drop it at
        publish, or by a drop that failed. Nothing can use those tables any more. A schema that an
        unclosed run's id maps to as well is never listed (the mapping truncates and replaces)."""
        if self.wh is None:
            return []
        ledger = Ledger(self.wh.con)
        schemas = {
            r[0]
            for r in self.wh.con.execute("SELECT schema_name FROM information_schema.schemata").fetchall()
        }
        in_use = {run_schema_name(run["run_id"]) for run in ledger.open_runs()}
        return [
            closed
            for closed in ledger.closed_runs()
            if (run_id is None or closed == run_id)
            and run_schema_name(closed) in schemas
            and run_schema_name(closed) not in in_use
        ]

    def drop_leftovers(self, run_ids: list[str]) -> None:
        """Drop the private run schemas of :meth:`closed_leftovers`."""
        if self.wh is None:
            return
        ledger = Ledger(self.wh.con)
        for closed in run_ids:
            drop_private_tables(ledger, closed, warehouse=str(self.warehouse))

    def delete(self, found: list[Unpublished]) -> None:
        """Close the runs' ledger runs (reservations released, charges kept), drop their private
        run schemas and remove their staging directories."""
        ledger = Ledger(self.wh.con) if self.wh is not None else None
        for run in found:
            if ledger is not None:
                ledger.close_run(run.run_id)
                drop_private_tables(ledger, run.run_id, warehouse=str(self.warehouse))
            if run.staging is not None:
                shutil.rmtree(run.staging)
