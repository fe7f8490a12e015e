"""The privacy ledger: each dataset's lifetime spend, kept in the warehouse database.

:class:`Ledger` records one entry per (dataset, run, stage) in ``ledger.privacy_spend`` (SQL in
``sql/ledger/``), with the stage's (ε, δ) and its privacy events. Across runs the spends add up by
basic composition; :meth:`Ledger.check` refuses a run that would take a dataset past its lifetime
budget (:class:`~dpngram.core.errors.BudgetError`), not counting a retried run's own entries
twice. An entry is written once, so a retried task cannot charge twice; stages reach the ledger
only through :func:`dpngram.release.spend.spend_once`.

Owns: :class:`Ledger` (the ``ledger.privacy_spend`` table, the lifetime-budget check).
Imports: dpngram.engines.sql, dpngram.core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dpngram.core.budget import Budget
from dpngram.core.errors import BudgetError

if TYPE_CHECKING:
    from dpngram.core.accounting import PrivacyEvent


# ----------------------------------------------------------------------------------------------
# The privacy ledger: lifetime budget per dataset, kept in the warehouse database
# ----------------------------------------------------------------------------------------------
class Ledger:
    """Spend per (dataset, run, stage) in the warehouse's ``ledger.privacy_spend`` table.

    Across runs spends add up by basic composition (sound, if conservative). A stage's entry is
    written once: recording the same (dataset, run, stage) again is a no-op, so a retried task
    cannot charge twice.
    """

    def __init__(self, con) -> None:  # con: duckdb.DuckDBPyConnection
        from dpngram.engines.sql import load_sql

        self.con = con
        self.con.execute(load_sql("ledger/create"))

    def _one_row(self, name: str, **params: object) -> tuple:
        from dpngram.engines.sql import load_sql

        return self.con.execute(load_sql(name), params).fetchall()[0]

    def spent(self, dataset: str, run_id: str | None = None) -> Budget:
        """The (epsilon, delta) recorded for ``dataset`` (only ``run_id``'s when given), summed
        over its entries (basic composition)."""
        epsilon, delta = self._one_row("ledger/spent", dataset=dataset, run_id=run_id)
        return Budget(float(epsilon), float(delta))

    def check(
        self,
        dataset: str,
        epsilon: float,
        delta: float,
        lifetime_epsilon: float | None,
        lifetime_delta: float | None,
        run_id: str | None = None,
    ) -> None:
        """Refuse a run whose spend would take ``dataset`` past its lifetime budget.

        Spend already recorded for ``run_id`` (a retried or resumed run) is not counted twice."""
        spent_eps, spent_delta = self.spent(dataset)
        if run_id is not None:
            run_eps, run_delta = self.spent(dataset, run_id)
            spent_eps, spent_delta = spent_eps - run_eps, spent_delta - run_delta
        if lifetime_epsilon is not None and spent_eps + epsilon > lifetime_epsilon * (1 + 1e-12):
            raise BudgetError(
                f"dataset '{dataset}' has spent epsilon={spent_eps:.4g} of its lifetime "
                f"{lifetime_epsilon:.4g}; this run asks for {epsilon:.4g} more — lower epsilon or "
                "raise lifetime_epsilon"
            )
        if lifetime_delta is not None and spent_delta + delta > lifetime_delta * (1 + 1e-12):
            raise BudgetError(
                f"dataset '{dataset}' has spent delta={spent_delta:.3g} of its lifetime "
                f"{lifetime_delta:.3g}; this run asks for {delta:.3g} more — lower delta or "
                "raise lifetime_delta"
            )

    def recorded(self, dataset: str, run_id: str, stage: str) -> bool:
        return bool(self._one_row("ledger/recorded", dataset=dataset, run_id=run_id, stage=stage)[0])

    def record(
        self,
        dataset: str,
        run_id: str,
        stage: str,
        epsilon: float,
        delta: float,
        events: Sequence[PrivacyEvent],
    ) -> bool:
        """Record a stage's spend once. Returns False if it was already recorded."""
        import json

        from dpngram.engines.sql import load_sql

        if self.recorded(dataset, run_id, stage):
            return False
        self.con.execute(
            load_sql("ledger/record"),
            {
                "dataset": dataset,
                "run_id": run_id,
                "stage": stage,
                "epsilon": float(epsilon),
                "delta": float(delta),
                "events": json.dumps([e.to_dict() for e in events]),
            },
        )
        return True

    def entries(self, dataset: str) -> list[dict]:
        """Spend history of ``dataset``, oldest first."""
        from dpngram.engines.sql import load_sql

        cursor = self.con.execute(load_sql("ledger/history"), {"dataset": dataset})
        names = [d[0] for d in cursor.description]
        return [{"dataset": dataset, **dict(zip(names, row, strict=True))} for row in cursor.fetchall()]
