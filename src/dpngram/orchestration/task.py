"""What every task of the release DAG does around its step, on whichever worker it lands.

:func:`task_scope` (used by ``dags/dpngram_release.py``) wraps one task:

1. the privacy ledger is the deployment's (:func:`use_ledger`: the Airflow connection
   :data:`LEDGER_CONNECTION`, else the embedded per-user file); a deployment whose workers share no
   disk (a run store is set) must have a shared ledger, else the task is refused;
2. the run's lock in the ledger is taken: the tasks of one run (the three stages that may run
   side by side after DPNE, a retry that lands while a killed task's worker is being cleaned up)
   take turns on any worker, while the runs of other datasets, each with a warehouse of its own,
   go on in parallel. A task that finds the lock held does not sit in its executor slot waiting:
   after ``lock_wait`` seconds it calls ``busy`` (the DAG reschedules the task, which frees the
   slot for another dataset's task);
3. with a run store (:mod:`dpngram.release.run_store`), this worker's copy of the run's state is
   brought up to date before the step and what the step changed is uploaded after it (and after
   every stage's persisted noisy output); the private tables of runs closed since are removed from
   this worker.

Owns: :func:`task_scope`, :func:`use_ledger`, :data:`LEDGER_CONNECTION`.
Imports: dpngram.release (context, ledger, ledger_store, run_store), dpngram.config, dpngram.core.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError

#: The Airflow connection that names the privacy ledger (a ``postgres`` connection).
LEDGER_CONNECTION = "dpngram_ledger"

log = logging.getLogger("dpngram")


def use_ledger(connection_uri: Callable[[str], str | None]) -> str:
    """Point this task's process at the deployment's ledger and return where it is (no password).
    ``connection_uri(name)`` gives the URI of an Airflow connection, or None when it is not
    defined; without :data:`LEDGER_CONNECTION` the ledger is ``DPNGRAM_LEDGER``, else the
    embedded per-user file. With a run store (workers that share no disk) an embedded ledger would
    be one per worker, and the lifetime budget would no longer hold: refused."""
    from dpngram.release.ledger_store import LEDGER_ENV, describe_location, is_shared, ledger_location
    from dpngram.release.run_store import configured_run_store

    uri = connection_uri(LEDGER_CONNECTION)
    if uri:
        os.environ[LEDGER_ENV] = uri
    location = ledger_location()
    if configured_run_store() and not is_shared(location):
        raise ConfigError(
            f"ledger: this deployment shares runs between workers (DPNGRAM_RUN_STORE is set) but its "
            f"privacy ledger is the embedded file {location}, one per worker: define the Airflow "
            f"connection '{LEDGER_CONNECTION}' (PostgreSQL) so that every worker charges the same ledger"
        )
    return describe_location(location)


@contextmanager
def task_scope(
    config: RunConfig,
    *,
    writes_private: bool = False,
    push: bool = True,
    lock_wait: float | None = None,
    busy: Callable[[], None] | None = None,
) -> Iterator:
    """Run one task of run ``config.run_id`` (module docstring): the run's lock, then (with a run
    store) pull, the step (the yielded :class:`~dpngram.release.context.RunContext`), push.
    ``writes_private``: the task writes private tables later tasks read (``ingest``), so a new
    snapshot of the run's warehouse is pushed. ``push=False``: the task leaves nothing to share
    (``publish``, which removes the run's prefix itself). ``lock_wait``: how long to wait for the
    run's lock (None: as long as it takes); then ``busy()`` is called, which must raise (the DAG
    reschedules the task)."""
    from dpngram.release.context import RunContext
    from dpngram.release.ledger import open_ledger
    from dpngram.release.run_store import RunStore, configured_run_store, sweep_closed

    ctx = RunContext(config)
    url = configured_run_store()
    with open_ledger() as ledger, ledger.run_lock(ctx.run_id, wait=lock_wait) as locked:
        if not locked:
            assert busy is not None, "lock_wait needs busy"
            busy()
            raise RuntimeError("busy() must raise")  # pragma: no cover - a contract of the caller
        if url is None:
            yield ctx
            return
        store = RunStore(url, ctx)
        assert config.warehouse
        swept = sweep_closed(ledger, Path(config.warehouse))
        if swept:
            log.info("removed this worker's copies of %d closed run(s)' private tables", len(swept))
        store.pull()
        ctx.on_checkpoint = store.push
        yield ctx
        if push:
            store.push(warehouse=writes_private)
