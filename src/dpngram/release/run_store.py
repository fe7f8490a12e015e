"""The run store: a run's working state shared by Airflow workers that share no disk.

The tasks of one run may land on different workers (CeleryExecutor, KubernetesExecutor), each with
its own data folder. What one task leaves for the next is then kept in the run store, an fsspec URL
the deployment names in :data:`RUN_STORE_ENV` (e.g. ``s3://private-bucket/dpngram/runs``; guard it
like the warehouse: it holds the run's private tables). Per run, under ``RUN_STORE/RUN_ID/``:

* ``warehouse.duckdb`` + ``warehouse.json``: a snapshot of the run's DuckDB file after the task
  that writes its private input tables (``ingest``). A later task on another worker downloads it
  when its own copy is missing or older (``WAREHOUSE/runs/RUN_ID.duckdb.snapshot`` names the
  snapshot a local copy came from). The other stages keep no private table another task needs:
  they rebuild what they need from the released files (docs/orchestration.md, "Several workers").
* ``staging/`` + ``staging.json``: the staged release, when ``OUT`` is on object storage (its
  staging is then under the warehouse directory, on the worker's own disk; with a local ``OUT`` the
  staging directory is under ``OUT``, which such a deployment must share).
* the run's operator-only files (timings, run.json, operator_report.json with the quarantine's
  exact counts) are kept apart, under ``RUN_STORE/_operator/RUN_ID/`` (+ ``RUN_ID.json``), and are
  not removed with the run: after the publish they are the one complete copy (a worker deletes its
  own copies of a closed run's operator files, :func:`sweep_closed`).

The ``*.json`` indexes list each file's size and SHA-256; a worker makes its local copy equal to
the index before its task (:meth:`RunStore.pull`: downloads what differs, deletes what the index
does not list, e.g. the leftovers of a killed task), and uploads what changed after it
(:meth:`RunStore.push`), the index last. A stage pushes its noisy output as soon as it is
persisted (:meth:`dpngram.release.context.RunContext.checkpoint`), before the ledger charge is
finalized, so a worker killed later in the task loses no charged output. The run's lock in the
ledger (:meth:`dpngram.release.ledger.Ledger.run_lock`) keeps two tasks of one run from syncing at
once. After the publish the run's prefix is removed (:meth:`RunStore.remove`).

Owns: :data:`RUN_STORE_ENV`, :class:`RunStore`, :func:`configured_run_store`, :func:`forget_run`,
:func:`sweep_closed`.
Imports: dpngram.release (context, identity, layout, storage); fsspec.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from dpngram.release.context import RunContext
from dpngram.release.identity import operator_dir, remove_run_files
from dpngram.release.layout import is_temporary, sha256_file
from dpngram.release.storage import (
    ObjectRelease,
    download_file,
    join,
    list_files,
    read_json,
    remove_tree,
    upload_file,
    write_json,
)

#: The deployment's run store (an fsspec URL); unset on one machine.
RUN_STORE_ENV = "DPNGRAM_RUN_STORE"
#: Where in the run store the runs' operator-only files are kept, beside the runs' prefixes (a run
#: id starts with a letter or digit, never with "_").
OPERATOR_PREFIX = "_operator"


def configured_run_store() -> str | None:
    """The run store this process's deployment names, or None."""
    return os.environ.get(RUN_STORE_ENV, "").strip() or None


def _tree(local: Path) -> dict[str, dict[str, Any]]:
    """Size and SHA-256 of every finished file under ``local`` (relative POSIX paths)."""
    if not local.is_dir():
        return {}
    return {
        p.relative_to(local).as_posix(): {"size": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(local.rglob("*"))
        if p.is_file() and not is_temporary(p.name)
    }


class RunStore:
    """One run's prefix in the run store (module docstring)."""

    def __init__(self, url: str, ctx: RunContext) -> None:
        self.ctx = ctx
        self.prefix = join(url, ctx.run_id)
        release = ctx.release
        #: (local directory, remote directory, remote index) of the trees kept in the store
        operator = join(url, OPERATOR_PREFIX, ctx.run_id)
        self.trees: list[tuple[Path, str, str]] = [(operator_dir(ctx.config), operator, operator + ".json")]
        if isinstance(release, ObjectRelease):
            staging = join(self.prefix, "staging")
            self.trees.insert(0, (release.staging, staging, staging + ".json"))

    # -- trees (staging, operator files) ------------------------------------------------------
    def _pull_tree(self, local: Path, remote: str, index_url: str) -> None:
        index = read_json(index_url)
        if index is None:
            return  # nothing kept yet: the local copy stays as it is
        have = _tree(local)
        for rel, meta in index.items():
            if have.get(rel, {}).get("sha256") != meta["sha256"]:
                download_file(join(remote, rel), local / rel)
        for rel in set(have) - set(index):  # e.g. what a killed task on this worker left
            (local / rel).unlink(missing_ok=True)
        for leftover in [p for p in local.rglob("*") if p.is_file() and is_temporary(p.name)]:
            leftover.unlink(missing_ok=True)

    def _push_tree(self, local: Path, remote: str, index_url: str) -> None:
        old = read_json(index_url) or {}
        new = _tree(local)
        if new == old:
            return
        for rel, meta in new.items():
            if old.get(rel, {}).get("sha256") != meta["sha256"]:
                upload_file(local / rel, join(remote, rel))
        write_json(index_url, new)  # the index last
        stale = set(list_files(remote)) - set(new)
        for rel in stale:
            remove_tree(join(remote, rel))

    # -- the run's private tables -------------------------------------------------------------
    @property
    def _marker(self) -> Path:
        database = self.ctx.config.run_warehouse
        return database.with_name(database.name + ".snapshot")

    def _pull_warehouse(self) -> None:
        snapshot = read_json(join(self.prefix, "warehouse.json"))
        if snapshot is None:
            return
        database = self.ctx.config.run_warehouse
        marker = self._marker
        if database.is_file() and marker.is_file() and marker.read_text().strip() == snapshot["id"]:
            return
        download_file(join(self.prefix, "warehouse.duckdb"), database)
        database.with_name(database.name + ".wal").unlink(missing_ok=True)
        if database.stat().st_size != snapshot["size"]:
            raise RuntimeError(f"run store: the snapshot of run {self.ctx.run_id}'s warehouse is incomplete")
        marker.write_text(snapshot["id"] + "\n")

    def _push_warehouse(self) -> None:
        database = self.ctx.config.run_warehouse
        if not database.is_file():
            return
        snapshot = {"id": uuid.uuid4().hex, "size": database.stat().st_size}
        upload_file(database, join(self.prefix, "warehouse.duckdb"))
        write_json(join(self.prefix, "warehouse.json"), snapshot)
        self._marker.write_text(snapshot["id"] + "\n")

    # -- the task's view ------------------------------------------------------------------------
    def pull(self) -> None:
        """Before a task: make this worker's copies of the run's state equal to the store's."""
        for tree in self.trees:
            self._pull_tree(*tree)
        self._pull_warehouse()

    def push(self, *, warehouse: bool = False) -> None:
        """After a task (or a stage's persisted output): upload what changed, the indexes last;
        with ``warehouse``, a new snapshot of the run's private tables too."""
        for tree in self.trees:
            self._push_tree(*tree)
        if warehouse:
            self._push_warehouse()

    def remove(self) -> None:
        """The run is published: its prefix in the store is of no further use (its operator files,
        under ``_operator/``, stay)."""
        remove_tree(self.prefix)


def forget_run(run_id: str) -> None:
    """Remove run ``run_id``'s prefix from the deployment's run store, if it has one: the run is
    published (a publish completed by another command than the DAG's ``publish``) or abandoned
    (``dpngram gc --delete``), and its private snapshot must not outlive it."""
    url = configured_run_store()
    if url is not None:
        remove_tree(join(url, run_id))


def sweep_closed(ledger: Any, warehouse: Path) -> list[str]:
    """Delete this machine's copies of the private tables, object-storage staging and operator files
    of runs the ledger has closed: a worker that ran a task of a run keeps its copy until the run
    publishes, which may happen on another worker (the operator files' complete copy is in the run
    store, ``_operator/RUN_ID``). Only with a run store. Returns the run ids swept."""
    local = {p.name.removesuffix(".duckdb") for p in (Path(warehouse) / "runs").glob("*.duckdb")}
    local |= {p.name for p in Path(warehouse).glob("staging/*/*") if p.is_dir()}  # e.g. a pre-check only
    local |= {p.name for p in Path(warehouse).glob("operator/*") if p.is_dir()}  # kept in the store
    if not local:
        return []
    swept = []
    for run_id, _ in ledger.closed_runs():
        if run_id in local:
            remove_run_files(Path(warehouse), run_id)
            Path(warehouse, "runs", f"{run_id}.duckdb.snapshot").unlink(missing_ok=True)
            for staging in Path(warehouse, "staging").glob(f"*/{run_id}"):
                shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(Path(warehouse, "operator", run_id), ignore_errors=True)
            swept.append(run_id)
    return swept
