"""The privacy ledger: each dataset's lifetime spend, kept in the warehouse database.

:class:`Ledger` records one entry per (dataset, run, stage) in ``ledger.privacy_spend`` (SQL in
``sql/ledger/``), with the stage's (ε, δ) and its privacy events. Across runs the spends add up by
basic composition.

Three rules make the ledger hold under crashes and concurrent runs (docs/accounting.md, "The
ledger under faults"):

* **Charge before the draw.** :meth:`Ledger.charge_pending` records a stage's charge as
  ``pending`` (an upper bound: its budget share) *before* its first random draw, and
  :meth:`Ledger.finalize` replaces it by the exact charge once the noisy output is persisted. A
  crash can only leave an over-charge. An entry is never written twice, so a retry cannot charge
  twice, and :func:`dpngram.release.spend.spend_once` refuses to redraw a stage that has one.
* **Lifetime budgets belong to the dataset.** ``ledger.lifetime_budget`` holds one limit per
  dataset: set once (the first run that names one, or ``dpngram budget``), changed only by
  ``dpngram budget``. A run without ``--lifetime-epsilon`` is still held to it.
* **Check-and-spend is atomic.** :meth:`Ledger.open_run` (at ``prepare``) reserves the run's whole
  (ε, δ) and :meth:`Ledger.charge_pending` charges a stage, each in one transaction that first
  takes the dataset's lock row, re-reads what is committed and refuses (one-line
  :class:`~dpngram.core.errors.BudgetError`) what would pass the lifetime limit. While a run is
  open it counts as max(reserved, charged); once closed (published, or abandoned via
  ``dpngram gc``) by its charges.

``ledger.runs`` also holds each run's identity (the fingerprint of its parameters and input), so a
resume that does not match is refused (:func:`dpngram.release.identity.compare`).

Owns: :class:`Ledger` (the ``ledger.*`` tables, the lifetime-budget checks, run identities),
:func:`check_lifetime_values`.
Imports: dpngram.engines.sql, dpngram.core.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dpngram.core.budget import Budget
from dpngram.core.errors import BudgetError, ConfigError

T = TypeVar("T")

#: Serialises check-and-spend between threads of one process; the dataset's lock row (a
#: write-write conflict) does it between connections, the DuckDB file lock between processes.
_PROCESS_LOCK = threading.RLock()

#: Relative slack when comparing a spend with a lifetime limit (floating-point sums).
_SLACK = 1e-12

if TYPE_CHECKING:
    from dpngram.core.accounting import PrivacyEvent


def check_lifetime_values(epsilon: float | None, delta: float | None) -> None:
    """Refuse lifetime limits no run could mean (epsilon <= 0, delta outside (0, 1)) with a
    one-line :class:`ConfigError`; None (keep the stored limit) passes. ``dpngram budget`` checks
    its flags with it before opening the warehouse; :meth:`Ledger.set_lifetime` checks again."""
    if epsilon is not None and not epsilon > 0:
        raise ConfigError(f"lifetime_epsilon: must be > 0 (got {epsilon})")
    if delta is not None and not 0 < delta < 1:
        raise ConfigError(f"lifetime_delta: must be > 0 and < 1 (got {delta})")


# ----------------------------------------------------------------------------------------------
# The privacy ledger: lifetime budget per dataset, kept in the warehouse database
# ----------------------------------------------------------------------------------------------
class Ledger:
    """Spend per (dataset, run, stage) in the warehouse's ``ledger`` schema.

    Across runs spends add up by basic composition (sound, if conservative). A stage's entry is
    written once: recording the same (dataset, run, stage) again is a no-op, so a retried task
    cannot charge twice.
    """

    def __init__(self, con, *, create: bool = True) -> None:  # con: duckdb.DuckDBPyConnection
        """``create=False`` (a read-only connection: ``dpngram ledger``) reads the ledger as it is
        and creates nothing; a warehouse without ledger tables then has no dataset."""
        import duckdb

        from dpngram.engines.sql import load_sql

        self.con = con
        if not create:
            return
        with _PROCESS_LOCK:
            for attempt in range(20):
                try:
                    self.con.execute(load_sql("ledger/create"))
                    break
                except duckdb.TransactionException:  # another connection is creating them too
                    time.sleep(0.01 * (attempt + 1))

    # -- plumbing -----------------------------------------------------------------------------
    def _rows(self, name: str, **params: object) -> list[tuple]:
        from dpngram.engines.sql import load_sql

        return self.con.execute(load_sql(name), params).fetchall()

    def _one_row(self, name: str, **params: object) -> tuple:
        return self._rows(name, **params)[0]

    def _exec(self, name: str, **params: object) -> None:
        from dpngram.engines.sql import load_sql

        self.con.execute(load_sql(name), params)

    def _locked(self, dataset: str, body: Callable[[], T]) -> T:
        """Run ``body`` in one transaction holding ``dataset``'s lock row; a write-write conflict
        with a concurrent transaction (another connection) is retried."""
        import duckdb

        with _PROCESS_LOCK:
            try:
                self._exec("ledger/lifetime_ensure", dataset=dataset)
            except duckdb.TransactionException:
                pass  # a concurrent transaction created the row
            for attempt in range(50):
                self.con.execute("BEGIN TRANSACTION")
                try:
                    self._exec("ledger/lifetime_lock", dataset=dataset)
                    result = body()
                    self.con.execute("COMMIT")
                    return result
                except duckdb.TransactionException:
                    self.con.execute("ROLLBACK")
                    time.sleep(0.01 * (attempt + 1))
                except BaseException:
                    self.con.execute("ROLLBACK")
                    raise
            raise BudgetError(f"dataset '{dataset}': the ledger stayed busy; retry the run")

    # -- reading ------------------------------------------------------------------------------
    def spent(self, dataset: str, run_id: str | None = None) -> Budget:
        """The (epsilon, delta) charged to ``dataset`` (only ``run_id``'s when given), summed
        over its entries (basic composition; pending entries count at their upper bound)."""
        epsilon, delta = self._one_row("ledger/spent", dataset=dataset, run_id=run_id)
        return Budget(float(epsilon), float(delta))

    def committed(self, dataset: str, exclude_run: str | None = None) -> Budget:
        """What counts against ``dataset``'s lifetime: per run the larger of its charges and, while
        it is open, its reservation (every run but ``exclude_run``)."""
        epsilon, delta = self._one_row("ledger/committed", dataset=dataset, exclude=exclude_run)
        return Budget(float(epsilon), float(delta))

    def lifetime(self, dataset: str) -> tuple[float | None, float | None]:
        """The dataset's lifetime (ε, δ) limits; None where no limit is set."""
        rows = self._rows("ledger/lifetime_get", dataset=dataset)
        if not rows:
            return None, None
        eps, delta, _ = rows[0]
        return (None if eps is None else float(eps)), (None if delta is None else float(delta))

    def entry(self, dataset: str, run_id: str, stage: str) -> dict[str, Any] | None:
        """A stage's entry (epsilon, delta, status), or None if it never started drawing."""
        rows = self._rows("ledger/entry", dataset=dataset, run_id=run_id, stage=stage)
        if not rows:
            return None
        eps, delta, status = rows[0]
        return {"epsilon": float(eps), "delta": float(delta), "status": status or "final"}

    def recorded(self, dataset: str, run_id: str, stage: str) -> bool:
        return bool(self._one_row("ledger/recorded", dataset=dataset, run_id=run_id, stage=stage)[0])

    def run(self, run_id: str) -> dict[str, Any] | None:
        """A run's registration: dataset, fingerprint (dict), reservation, state; None if new."""
        rows = self._rows("ledger/run_get", run_id=run_id)
        if not rows:
            return None
        dataset, fingerprint, eps, delta, state, staging = rows[0]
        return {
            "dataset": dataset,
            "fingerprint": json.loads(fingerprint),
            "reserved": Budget(float(eps), float(delta)),
            "state": state,
            "staging": staging,
        }

    def open_runs(self) -> list[dict[str, Any]]:
        """Every run not closed, oldest first: 'open' (holding its reservation) or 'suspended'
        (failed before drawing: no reservation), with its charges, staging path and age."""
        return [
            {
                "run_id": r[0],
                "dataset": r[1],
                "reserved": Budget(float(r[2]), float(r[3])),
                "state": r[4],
                "staging": r[5],
                "age_seconds": float(r[6] or 0),
                "charged": Budget(float(r[7]), float(r[8])),
                "entries": int(r[9]),
            }
            for r in self._rows("ledger/runs_open")
        ]

    def closed_runs(self) -> list[str]:
        """The ids of the runs the ledger has closed (published, or released by ``dpngram gc``),
        oldest first."""
        return [r[0] for r in self._rows("ledger/runs_closed")]

    def warehouse_identity(self) -> tuple[str, str]:
        """This warehouse's (id, secret), created on first use: random, no data. A staging
        directory carries the id and a digest keyed by the secret (:mod:`dpngram.release.identity`)."""
        import secrets

        with _PROCESS_LOCK:
            rows = self._rows("ledger/warehouse_identity_get")
            if not rows:
                self._exec(
                    "ledger/warehouse_identity_init", id=secrets.token_hex(16), secret=secrets.token_hex(32)
                )
                rows = self._rows("ledger/warehouse_identity_get")
        identity, secret = rows[0]
        return str(identity), str(secret)

    def datasets(self) -> list[str]:
        """Every dataset the ledger knows (a charge, a run or a lifetime budget), sorted; [] when
        the warehouse has no ledger yet."""
        tables = {
            r[0]
            for r in self.con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'ledger'"
            ).fetchall()
        }
        if not {"privacy_spend", "runs", "lifetime_budget"} <= tables:
            return []
        return [str(r[0]) for r in self._rows("ledger/datasets")]

    def entries(self, dataset: str) -> list[dict]:
        """Spend history of ``dataset``, oldest first."""
        from dpngram.engines.sql import load_sql

        cursor = self.con.execute(load_sql("ledger/history"), {"dataset": dataset})
        names = [d[0] for d in cursor.description]
        return [{"dataset": dataset, **dict(zip(names, row, strict=True))} for row in cursor.fetchall()]

    # -- lifetime limits ----------------------------------------------------------------------
    def set_lifetime(self, dataset: str, epsilon: float | None, delta: float | None) -> None:
        """Set or change ``dataset``'s lifetime limits (``dpngram budget``). None keeps a limit as
        it is. A limit below what the dataset has already committed is refused."""
        check_lifetime_values(epsilon, delta)

        def body() -> None:
            old_eps, old_delta = self.lifetime(dataset)
            new_eps = old_eps if epsilon is None else epsilon
            new_delta = old_delta if delta is None else delta
            used = self.committed(dataset)
            if new_eps is not None and used.epsilon > new_eps * (1 + _SLACK):
                raise BudgetError(
                    f"dataset '{dataset}' has already committed epsilon={used.epsilon:.4g}; "
                    f"a lifetime of {new_eps:.4g} would be below it"
                )
            if new_delta is not None and used.delta > new_delta * (1 + _SLACK):
                raise BudgetError(
                    f"dataset '{dataset}' has already committed delta={used.delta:.3g}; "
                    f"a lifetime of {new_delta:.3g} would be below it"
                )
            self._exec("ledger/lifetime_set", dataset=dataset, epsilon=new_eps, delta=new_delta)

        self._locked(dataset, body)

    def _adopt_lifetime(
        self, dataset: str, epsilon: float | None, delta: float | None
    ) -> tuple[float | None, float | None]:
        """The dataset's limits, after a run that names limits sets the ones not set yet. A run
        naming a limit different from the stored one is refused: only ``dpngram budget`` changes
        a limit. (Inside a locked transaction.)"""
        stored_eps, stored_delta = self.lifetime(dataset)
        for name, asked, stored in (("epsilon", epsilon, stored_eps), ("delta", delta, stored_delta)):
            if asked is not None and stored is not None and not _same(asked, stored):
                raise BudgetError(
                    f"dataset '{dataset}' already has lifetime_{name}={stored:.4g} (this run says "
                    f"{asked:.4g}); change it deliberately with `dpngram budget --dataset {dataset} "
                    f"--lifetime-{name} VALUE`, or drop the flag"
                )
        new_eps = stored_eps if stored_eps is not None else epsilon
        new_delta = stored_delta if stored_delta is not None else delta
        if (new_eps, new_delta) != (stored_eps, stored_delta):
            self._exec("ledger/lifetime_set", dataset=dataset, epsilon=new_eps, delta=new_delta)
        return new_eps, new_delta

    def _refuse_over(
        self,
        dataset: str,
        lifetime: tuple[float | None, float | None],
        others: Budget,
        mine: Budget,
        ask: str,
    ) -> None:
        lifetime_eps, lifetime_delta = lifetime
        if lifetime_eps is not None and others.epsilon + mine.epsilon > lifetime_eps * (1 + _SLACK):
            raise BudgetError(
                f"dataset '{dataset}' has spent epsilon={others.epsilon:.4g} of its lifetime "
                f"{lifetime_eps:.4g}; {ask} {mine.epsilon:.4g} more — lower epsilon or raise the "
                f"lifetime with `dpngram budget --dataset {dataset} --lifetime-epsilon VALUE`"
            )
        if lifetime_delta is not None and others.delta + mine.delta > lifetime_delta * (1 + _SLACK):
            raise BudgetError(
                f"dataset '{dataset}' has spent delta={others.delta:.3g} of its lifetime "
                f"{lifetime_delta:.3g}; {ask} {mine.delta:.3g} more — lower delta or raise the "
                f"lifetime with `dpngram budget --dataset {dataset} --lifetime-delta VALUE`"
            )

    # -- runs ---------------------------------------------------------------------------------
    def open_run(
        self,
        dataset: str,
        run_id: str,
        fingerprint: dict[str, Any],
        budget: Budget,
        lifetime_epsilon: float | None = None,
        lifetime_delta: float | None = None,
        compare: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
        staging: str | None = None,
    ) -> None:
        """Register run ``run_id`` (or check a resume of it) and reserve ``budget`` for it, in one
        transaction: refused if the dataset's lifetime limit (stored, or set now from the run's
        flags) cannot hold it next to what other runs committed. A resume is checked by
        ``compare(stored_fingerprint, fingerprint)``, which raises on a mismatch, and must stage in
        the same directory (``staging``: the resolved ``OUT/runs/RUN_ID.staging``). A resume of a
        suspended run (it failed before drawing and released its reservation) reserves again."""

        def body() -> None:
            existing = self.run(run_id)
            if existing is not None:
                if existing["dataset"] != dataset:
                    from dpngram.core.errors import ResumeError

                    raise ResumeError(
                        f"run_id: run '{run_id}' belongs to dataset '{existing['dataset']}', not "
                        f"'{dataset}'; use a new --run-id"
                    )
                if compare is not None:
                    compare(existing["fingerprint"], fingerprint)
                if staging is not None and existing["staging"] not in (None, staging):
                    from dpngram.core.errors import ResumeError

                    raise ResumeError(
                        f"run_id: run '{run_id}' was started with its staging in "
                        f"{existing['staging']}, not {staging}; resume it with the same --out (an "
                        "absolute path), or start a new run with a new --run-id"
                    )
                if existing["state"] == "closed":
                    from dpngram.core.errors import ResumeError

                    raise ResumeError(
                        f"run_id: run '{run_id}' was closed (published or cleaned by `dpngram gc`); "
                        "start a new run with a new --run-id"
                    )
            lifetime = self.lifetime(dataset)
            charged = self.spent(dataset, run_id)
            mine = Budget(max(budget.epsilon, charged.epsilon), max(budget.delta, charged.delta))
            self._refuse_over(dataset, lifetime, self.committed(dataset, run_id), mine, "this run asks for")
            if existing is None:
                self._exec(
                    "ledger/run_open",
                    run_id=run_id,
                    dataset=dataset,
                    fingerprint=json.dumps(fingerprint, sort_keys=True),
                    epsilon=budget.epsilon,
                    delta=budget.delta,
                    staging=staging,
                )
            elif existing["state"] == "suspended":
                self._exec("ledger/run_reopen", run_id=run_id, epsilon=budget.epsilon, delta=budget.delta)

        # The run's lifetime flags are stored first, in a transaction of their own: a run refused
        # for lack of budget still leaves the dataset's limit set, and later runs are held to it.
        self._locked(dataset, lambda: self._adopt_lifetime(dataset, lifetime_epsilon, lifetime_delta))
        self._locked(dataset, body)

    def close_run(self, run_id: str) -> None:
        """The run will spend no more: release its reservation (its charges stay)."""
        self._exec("ledger/run_close", run_id=run_id)

    def suspend_if_unspent(self, run_id: str) -> bool:
        """Release the reservation of open run ``run_id`` if it has no ledger entry at all: no
        stage was charged, and a stage is charged before its first noise draw
        (:func:`~dpngram.release.spend.spend_once`), so no noise was drawn for the run and
        nothing it could release depends on the data. The run stays resumable: a resume reserves
        again (:meth:`open_run`); a stage's charge is checked against the lifetime either way.
        One transaction with the dataset's lock row, so no charge can slip in between the check
        and the release. Returns whether the run holds no reservation now."""
        run = self.run(run_id)
        if run is None or run["state"] == "closed":
            return True
        dataset = run["dataset"]

        def body() -> bool:
            current = self.run(run_id)
            if current is None or current["state"] != "open":
                return current is None or current["state"] in ("suspended", "closed")
            if self._one_row("ledger/run_entries", dataset=dataset, run_id=run_id)[0]:
                return False  # charged: it may have drawn noise; the reservation stays
            self._exec("ledger/run_suspend", run_id=run_id)
            return True

        return self._locked(dataset, body)

    # -- charging -----------------------------------------------------------------------------
    def charge_pending(
        self, dataset: str, run_id: str, stage: str, bound: Budget, events: Sequence[PrivacyEvent] = ()
    ) -> None:
        """Charge ``bound`` (an upper bound on the stage's charge) before the stage draws noise, in
        one transaction with the lifetime check. Refused if the stage already has an entry (its
        noise was drawn before: :func:`spend_once` must reuse it, never redraw)."""

        def body() -> None:
            if self.recorded(dataset, run_id, stage):
                raise BudgetError(
                    f"stage {stage} of run '{run_id}' is already charged; it will not draw again"
                )
            run = self.run(run_id)
            reserved = run["reserved"] if run is not None and run["state"] == "open" else Budget(0.0)
            charged = self.spent(dataset, run_id) + bound
            mine = Budget(max(reserved.epsilon, charged.epsilon), max(reserved.delta, charged.delta))
            self._refuse_over(
                dataset,
                self.lifetime(dataset),
                self.committed(dataset, run_id),
                mine,
                "stage " + stage + " needs",
            )
            self._insert(dataset, run_id, stage, bound.epsilon, bound.delta, events, "pending")

        self._locked(dataset, body)

    def finalize(
        self,
        dataset: str,
        run_id: str,
        stage: str,
        epsilon: float,
        delta: float,
        events: Sequence[PrivacyEvent],
    ) -> bool:
        """The stage's exact charge, once its noisy output is persisted: replaces its pending entry,
        or records it if it has none (a stage that drew no noise). Idempotent; returns False when
        the entry was already final."""
        entry = self.entry(dataset, run_id, stage)
        if entry is None:
            return self.record(dataset, run_id, stage, epsilon, delta, events)
        if entry["status"] != "pending":
            return False
        self._exec(
            "ledger/finalize",
            dataset=dataset,
            run_id=run_id,
            stage=stage,
            epsilon=float(epsilon),
            delta=float(delta),
            events=json.dumps([e.to_dict() for e in events]),
        )
        return True

    def record(
        self,
        dataset: str,
        run_id: str,
        stage: str,
        epsilon: float,
        delta: float,
        events: Sequence[PrivacyEvent],
    ) -> bool:
        """Record a stage's (final) spend once. Returns False if it was already recorded."""
        if self.recorded(dataset, run_id, stage):
            return False
        self._insert(dataset, run_id, stage, epsilon, delta, events, "final")
        return True

    def _insert(
        self,
        dataset: str,
        run_id: str,
        stage: str,
        epsilon: float,
        delta: float,
        events: Sequence[PrivacyEvent],
        status: str,
    ) -> None:
        self._exec(
            "ledger/record",
            dataset=dataset,
            run_id=run_id,
            stage=stage,
            epsilon=float(epsilon),
            delta=float(delta),
            events=json.dumps([e.to_dict() for e in events]),
            status=status,
        )

    # -- the pre-run check (kept for callers that only want to ask) ---------------------------
    def check(
        self,
        dataset: str,
        epsilon: float,
        delta: float,
        lifetime_epsilon: float | None,
        lifetime_delta: float | None,
        run_id: str | None = None,
    ) -> None:
        """Refuse a run whose spend would take ``dataset`` past its lifetime budget (the stored
        limit, else the given one). Read-only: it reserves nothing (:meth:`open_run` does)."""
        stored_eps, stored_delta = self.lifetime(dataset)
        lifetime = (
            stored_eps if stored_eps is not None else lifetime_epsilon,
            stored_delta if stored_delta is not None else lifetime_delta,
        )
        charged = self.spent(dataset, run_id) if run_id is not None else Budget(0.0)
        mine = Budget(max(epsilon, charged.epsilon), max(delta, charged.delta))
        self._refuse_over(dataset, lifetime, self.committed(dataset, run_id), mine, "this run asks for")


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))
