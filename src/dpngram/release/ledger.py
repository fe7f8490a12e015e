"""The privacy ledger: each dataset's lifetime spend, one source of truth for every run.

:class:`Ledger` records one entry per (dataset, run, stage) in ``ledger.privacy_spend`` (SQL in
``sql/ledger/``), with the stage's (ε, δ) and its privacy events. Across runs the spends add up by
basic composition. It keeps its tables in a :class:`~dpngram.release.ledger_store.LedgerStore`:
an embedded DuckDB file (one per user by default) or PostgreSQL (every worker of a multi-worker
Airflow), chosen by :func:`open_ledger` (docs/accounting.md, "Where the ledger is kept").

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
  :class:`~dpngram.core.errors.BudgetError`) what would pass the lifetime limit. On PostgreSQL the
  row lock makes a concurrent transaction on the same dataset wait until this one commits, so of
  two workers racing for the last of a budget exactly one wins. While a run is open it counts as
  max(reserved, charged); once closed (published, or abandoned via ``dpngram gc``) by its charges.

``ledger.runs`` also holds each run's identity (the fingerprint of its parameters and input), so a
resume that does not match is refused (:func:`dpngram.release.identity.compare`). Named locks
(:meth:`Ledger.run_lock`) keep the tasks of one run from running at once on any machine.

Why one module (about 600 lines): every rule above reads and writes the same few tables in the
same transactions; split, a reader would have to hold the pieces together to check that a charge
is atomic with its lifetime check.

Owns: :class:`Ledger` (the ``ledger.*`` tables, the lifetime-budget checks, run identities, the
budget forecast and the export), :func:`open_ledger`, :func:`check_lifetime_values`.
Imports: dpngram.release (ledger_store, forecast), dpngram.core.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dpngram.core.budget import Budget
from dpngram.core.errors import BudgetError, ConfigError, ResumeError
from dpngram.release.forecast import Forecast, forecast
from dpngram.release.ledger_store import (
    LedgerStore,
    RetryTransaction,
    describe_location,
    open_store,
)

T = TypeVar("T")

#: Relative slack when comparing a spend with a lifetime limit (floating-point sums).
_SLACK = 1e-12
#: How often a conflicting transaction is run again before the ledger gives up.
_ATTEMPTS = 50

if TYPE_CHECKING:
    from dpngram.core.accounting import PrivacyEvent


def check_lifetime_values(epsilon: float | None, delta: float | None) -> None:
    """Refuse lifetime limits no run could mean (epsilon <= 0, delta outside (0, 1)) with a
    one-line :class:`ConfigError`; None (keep the stored limit) passes. ``dpngram budget`` checks
    its flags with it before opening the ledger; :meth:`Ledger.set_lifetime` checks again."""
    if epsilon is not None and not epsilon > 0:
        raise ConfigError(f"lifetime_epsilon: must be > 0 (got {epsilon})")
    if delta is not None and not 0 < delta < 1:
        raise ConfigError(f"lifetime_delta: must be > 0 and < 1 (got {delta})")


def open_ledger(location: str | None = None) -> Ledger:
    """The ledger at ``location`` (a URL or path), else :data:`~dpngram.release.ledger_store.LEDGER_ENV`,
    else the per-user embedded file. Use it as a context manager (it closes its connection)."""
    return Ledger(open_store(location))


# ----------------------------------------------------------------------------------------------
# The privacy ledger: lifetime budget per dataset, in its store
# ----------------------------------------------------------------------------------------------


def _charge(
    dataset: str, run_id: str, stage: str, epsilon: float, delta: float, events: Sequence[PrivacyEvent]
) -> dict[str, Any]:
    """The parameters of a stage's charge in the ledger's SQL (``ledger/record``, ``ledger/finalize``)."""
    return {
        "dataset": dataset,
        "run_id": run_id,
        "stage": stage,
        "epsilon": float(epsilon),
        "delta": float(delta),
        "events": json.dumps([e.to_dict() for e in events]),
    }


class Ledger:
    """Spend per (dataset, run, stage), kept in a :class:`LedgerStore`.

    Across runs spends add up by basic composition (sound, if conservative). A stage's entry is
    written once: recording the same (dataset, run, stage) again is a no-op, so a retried task
    cannot charge twice. Every method runs in one transaction of the store (a method called inside
    another's transaction joins it)."""

    def __init__(self, store: LedgerStore) -> None:
        self.store = store
        self._tx: Any = None

    @property
    def location(self) -> str:
        """Where the ledger is, as it may be shown (no password)."""
        return describe_location(self.store.location)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------------
    def _in_transaction(self, body: Callable[[], T], dataset: str | None = None) -> T:
        """Run ``body`` in one transaction (joining the current one, if any); with ``dataset``,
        first take that dataset's lock row. A conflict with a concurrent transaction is retried."""
        if self._tx is not None:
            if dataset is not None:
                self._lock_row(dataset)
            return body()
        for attempt in range(_ATTEMPTS):
            try:
                with self.store.transaction() as tx:
                    self._tx = tx
                    try:
                        if dataset is not None:
                            self._lock_row(dataset)
                        return body()
                    finally:
                        self._tx = None
            except RetryTransaction:
                time.sleep(0.01 * (attempt + 1))
        raise BudgetError(f"dataset '{dataset}': the ledger stayed busy; retry the run")

    def _lock_row(self, dataset: str) -> None:
        self._tx.execute("ledger/lifetime_ensure", dataset=dataset)
        self._tx.execute("ledger/lifetime_lock", dataset=dataset)

    def _rows(self, name: str, **params: object) -> list[tuple]:
        return self._in_transaction(lambda: self._tx.rows(name, **params))

    def _one_row(self, name: str, **params: object) -> tuple:
        return self._rows(name, **params)[0]

    def _exec(self, name: str, **params: object) -> None:
        self._in_transaction(lambda: self._tx.execute(name, **params))

    def in_transaction(self, body: Callable[[], T]) -> T:
        """Run ``body`` in one transaction; the ledger's methods and :meth:`execute` called inside
        it join it (e.g. an import that must land whole or not at all)."""
        return self._in_transaction(body)

    def execute(self, name: str, **params: object) -> None:
        """Run one of the ledger's statements (``ledger/import_spend``) in the current transaction,
        or in one of its own."""
        self._exec(name, **params)

    def _locked(self, dataset: str, body: Callable[[], T]) -> T:
        """Run ``body`` in one transaction holding ``dataset``'s lock row."""
        return self._in_transaction(body, dataset=dataset)

    # -- locks across processes and machines --------------------------------------------------
    @contextlib.contextmanager
    def run_lock(self, run_id: str, *, wait: float | None = None, log_every: float = 60.0) -> Iterator[bool]:
        """Hold run ``run_id``'s lock: the tasks of one run take turns, on any worker (they share
        the run's warehouse and its report parts). Waits at most ``wait`` seconds (None: as long
        as it takes), saying so in the log every ``log_every`` seconds; yields whether it holds
        the lock. A killed holder's lock is released with its process (DuckDB: ``flock``) or its
        connection (PostgreSQL: advisory lock)."""
        with self.store.lock(f"run:{run_id}", wait=0) as got:
            if got:
                yield True
                return
        log = logging.getLogger("dpngram")
        started = time.monotonic()
        while True:
            chunk = (
                log_every if wait is None else min(log_every, max(0.0, wait - (time.monotonic() - started)))
            )
            log.info("run '%s': waiting for its other task to finish (the run's lock is held)", run_id)
            with self.store.lock(f"run:{run_id}", wait=chunk) as got:
                if got:
                    yield True
                    return
            if wait is not None and time.monotonic() - started >= wait:
                yield False
                return

    def lock(self, name: str, *, wait: float | None = None) -> contextlib.AbstractContextManager[bool]:
        """Any named lock of the store (e.g. ``publish:OUT/DATASET``, which moves ``latest``)."""
        return self.store.lock(name, wait=wait)

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
        """A run's registration: dataset, fingerprint (dict), reservation, state, staging path and
        warehouse directory; None if new."""
        rows = self._rows("ledger/run_get", run_id=run_id)
        if not rows:
            return None
        dataset, fingerprint, eps, delta, state, staging, warehouse = rows[0]
        return {
            "dataset": dataset,
            "fingerprint": json.loads(fingerprint),
            "reserved": Budget(float(eps), float(delta)),
            "state": state,
            "staging": staging,
            "warehouse": warehouse,
        }

    def open_runs(self) -> list[dict[str, Any]]:
        """Every run not closed, oldest first: 'open' (holding its reservation) or 'suspended'
        (failed before drawing: no reservation), with its charges, staging path, warehouse and age."""
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
                "warehouse": r[10],
            }
            for r in self._rows("ledger/runs_open")
        ]

    def closed_runs(self) -> list[tuple[str, str | None]]:
        """(run id, warehouse directory) of the runs the ledger has closed (published, or released
        by ``dpngram gc``), oldest first."""
        return [(r[0], r[1]) for r in self._rows("ledger/runs_closed")]

    def identity(self, *, create: bool = True) -> tuple[str, str] | None:
        """This ledger's (id, secret), created on first use (``create=False``: None when it has
        none yet): random, no data. A staging directory carries the id and a digest keyed by the
        secret (:mod:`dpngram.release.identity`)."""
        import secrets

        def body() -> tuple[str, str] | None:
            rows = self._tx.rows("ledger/identity_get")
            if not rows and create:
                self._tx.execute(
                    "ledger/identity_init", id=secrets.token_hex(16), secret=secrets.token_hex(32)
                )
                rows = self._tx.rows("ledger/identity_get")
            return (str(rows[0][0]), str(rows[0][1])) if rows else None

        return self._in_transaction(body)

    def schema_versions(self) -> list[tuple[int, str]]:
        """The migrations this ledger has applied: (version, name), in order."""
        return [(int(v), str(n)) for v, n in self._rows("ledger/schema_versions")]

    def datasets(self) -> list[str]:
        """Every dataset the ledger knows (a charge, a run or a lifetime budget), sorted."""
        return [str(r[0]) for r in self._rows("ledger/datasets")]

    def entries(self, dataset: str) -> list[dict]:
        """Spend history of ``dataset``, oldest first."""
        records = self._in_transaction(lambda: self._tx.records("ledger/history", dataset=dataset))
        return [{"dataset": dataset, **r} for r in records]

    def export(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """Every charge (of ``dataset``, or of all), oldest first, with its run's state and its
        events (JSON text): the view ``ledger.audit_charges`` an auditor queries."""
        return self._in_transaction(lambda: self._tx.records("ledger/export", dataset=dataset))

    def runs_of(self, dataset: str) -> list[dict[str, Any]]:
        """Every run of ``dataset``, oldest first: run id, reservation, state, creation time."""
        return self._in_transaction(lambda: self._tx.records("ledger/runs_of_dataset", dataset=dataset))

    def forecast(self, dataset: str, per_run: Budget | None = None) -> Forecast:
        """How many more runs of ``per_run`` (default: the dataset's latest run's reservation)
        fit in what is left of its lifetime budget."""

        def body() -> Forecast:
            lifetime = self.lifetime(dataset)
            used = self.committed(dataset)
            size = per_run
            if size is None:
                runs = self._tx.records("ledger/runs_of_dataset", dataset=dataset)
                if runs:
                    size = Budget(float(runs[-1]["reserved_epsilon"]), float(runs[-1]["reserved_delta"]))
            return forecast(dataset, lifetime, used, size)

        return self._in_transaction(body)

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
        warehouse: str | None = None,
    ) -> None:
        """Register run ``run_id`` (or check a resume of it) and reserve ``budget`` for it, in one
        transaction: refused if the dataset's lifetime limit (stored, or set now from the run's
        flags) cannot hold it next to what other runs committed. A resume is checked by
        ``compare(stored_fingerprint, fingerprint)``, which raises on a mismatch, and must stage in
        the same directory (``staging``: the resolved ``OUT/DATASET/runs/RUN_ID.staging``, or the
        run's staging URL). ``warehouse``: the directory of the run's private tables, for
        ``dpngram gc``. A resume of a suspended run (it failed before drawing and released its
        reservation) reserves again."""

        def body() -> None:
            existing = self.run(run_id)
            if existing is not None:
                _check_resume(existing, dataset, run_id, fingerprint, compare, staging)
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
                    warehouse=warehouse,
                )
            elif existing["state"] == "suspended":
                self._exec("ledger/run_reopen", run_id=run_id, epsilon=budget.epsilon, delta=budget.delta)

        # The run's lifetime flags are stored first, in a transaction of their own: a run refused
        # for lack of budget still leaves the dataset's limit set, and later runs are held to it.
        self._locked(dataset, lambda: self._adopt_lifetime(dataset, lifetime_epsilon, lifetime_delta))
        self._locked(dataset, body)

    def close_run(self, run_id: str) -> None:
        """The run will spend no more: release its reservation (its charges stay)."""
        run = self.run(run_id)
        if run is None:
            return
        self._locked(run["dataset"], lambda: self._exec("ledger/run_close", run_id=run_id))

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

        def body() -> bool:
            entry = self.entry(dataset, run_id, stage)
            if entry is None:
                return self.record(dataset, run_id, stage, epsilon, delta, events)
            if entry["status"] != "pending":
                return False
            self._exec("ledger/finalize", **_charge(dataset, run_id, stage, epsilon, delta, events))
            return True

        return self._locked(dataset, body)

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

        def body() -> bool:
            if self.recorded(dataset, run_id, stage):
                return False
            self._insert(dataset, run_id, stage, epsilon, delta, events, "final")
            return True

        return self._locked(dataset, body)

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
        self._exec("ledger/record", **_charge(dataset, run_id, stage, epsilon, delta, events), status=status)

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


def _check_resume(
    existing: dict[str, Any],
    dataset: str,
    run_id: str,
    fingerprint: dict[str, Any],
    compare: Callable[[dict[str, Any], dict[str, Any]], None] | None,
    staging: str | None,
) -> None:
    """Refuse a resume of the registered run ``existing`` (:meth:`Ledger.open_run`) with a
    :class:`~dpngram.core.errors.ResumeError`: another dataset's run, changed parameters or input
    (``compare`` raises), another staging directory, or a closed run."""
    if existing["dataset"] != dataset:
        raise ResumeError(
            f"run_id: run '{run_id}' belongs to dataset '{existing['dataset']}', not "
            f"'{dataset}'; use a new --run-id"
        )
    if compare is not None:
        compare(existing["fingerprint"], fingerprint)
    if staging is not None and existing["staging"] not in (None, staging):
        raise ResumeError(
            f"run_id: run '{run_id}' was started with its staging in "
            f"{existing['staging']}, not {staging}; resume it with the same --out (an "
            "absolute path), or start a new run with a new --run-id"
        )
    if existing["state"] == "closed":
        raise ResumeError(
            f"run_id: run '{run_id}' was closed (published or cleaned by `dpngram gc`); "
            "start a new run with a new --run-id"
        )


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))
