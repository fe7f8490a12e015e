"""A run's identity: the fingerprint of its parameters and its input, and the resume check.

:func:`fingerprint` is taken by :func:`dpngram.release.publish.prepare` and stored with the run id
in the ledger (``ledger.runs``). A second ``prepare`` of the same run id (a resume: re-running a
killed CLI run, clearing an Airflow run) must match it, else :func:`compare` refuses with one line
naming what changed. That stops a resume from mixing two inputs (the first's private tables with
the second's report) or two budgets.

The input part holds the resolved path, size, modification time and a SHA-256 of the content: of
the whole file when it is at most :data:`FULL_HASH_BYTES`, else of its first and last
:data:`BLOCK_BYTES` (plus the size). A directory (``textdir``) is fingerprinted by its sorted file
list (relative name, size, mtime) and the hash of each file's first/last block. A remote URI
(``hdfs://``, ``s3a://``) is identified by its text only. The fingerprint holds sizes, times and
hashes: no content.

Parameters that only set resources (memory, threads, Spark settings) may change on a resume (e.g.
more memory after an out-of-memory kill); every other parameter may not.

The staging directory carries the same identity (:func:`staging_token`, :func:`check_staging`),
because reuse is driven by the files staged there while the fingerprint lives in the privacy
ledger: ``OUT/DATASET/runs/RUN_ID.staging/.run-identity.json`` holds the ledger's random id and an
HMAC-SHA256 of the run id and its registered fingerprint, keyed by the ledger's secret (no path,
no content hash in clear). A resume whose ledger is another one, or whose ledger registered
the run with another fingerprint, is refused with one line before it reserves anything; every
stage checks it again before it reuses a staged output (:func:`dpngram.release.spend.spend_once`).

Owns: :func:`fingerprint`, :func:`compare`, :func:`staging_token`, :func:`check_staging`; the
warehouse directory's layout (:func:`operator_dir`, :func:`public_cache_dir`, :func:`remove_run_files`).
Imports: dpngram.release.layout, dpngram.engines.base, dpngram.config, dpngram.core.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
from pathlib import Path
from typing import Any

from dpngram.config import RunConfig
from dpngram.core.errors import ResumeError
from dpngram.engines.base import is_remote_path
from dpngram.release.layout import IDENTITY_FILE, Release, is_temporary, write_json_atomic

#: Files up to this size are hashed whole ("when cheap": ~0.1 s at SHA-256 speeds).
FULL_HASH_BYTES = 64 << 20
#: Larger files: the first and last this many bytes are hashed.
BLOCK_BYTES = 1 << 20

#: Parameters that change only resources, not what the run computes: a resume may change them.
#: ``warehouse`` is where this machine keeps the run's private tables: each Airflow worker may have
#: its own (the run's tables reach it through the run store, docs/orchestration.md).
#: ``max_quarantine_fraction`` is a go/no-go threshold checked before any draw: a run refused by
#: it may be resumed with a higher one.
RESOURCE_PARAMETERS = frozenset(
    {"run_id", "memory_limit", "threads", "spark_conf", "max_quarantine_fraction", "warehouse"}
)


def _file_hash(path: Path, size: int, full_limit: int | None = None) -> tuple[str, str]:
    """(kind, hex digest): the whole file up to ``full_limit`` bytes, else its first and last
    :data:`BLOCK_BYTES` and its size."""
    digest = hashlib.sha256()
    full_limit = FULL_HASH_BYTES if full_limit is None else full_limit
    with path.open("rb") as fh:
        if size <= max(full_limit, 2 * BLOCK_BYTES):
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
            return "sha256", digest.hexdigest()
        digest.update(fh.read(BLOCK_BYTES))
        fh.seek(size - BLOCK_BYTES)
        digest.update(fh.read(BLOCK_BYTES))
        digest.update(str(size).encode())
        return "sha256-first-last-1MiB", digest.hexdigest()


def input_fingerprint(location: str) -> dict[str, Any]:
    """Path, size, mtime and content hash of a run's input (see the module docstring)."""
    if is_remote_path(location):
        return {"path": location, "kind": "remote", "hash": None}
    path = Path(str(location).removeprefix("file://")).resolve()
    if not path.exists():  # the library API allows it; ingest will refuse it
        return {"path": str(path), "kind": "missing", "hash": None}
    if path.is_dir():
        digest = hashlib.sha256()
        total, latest, files = 0, 0, 0
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            stat = file.stat()
            total, latest, files = total + stat.st_size, max(latest, stat.st_mtime_ns), files + 1
            _, value = _file_hash(file, stat.st_size, full_limit=2 * BLOCK_BYTES)
            digest.update(f"{file.relative_to(path).as_posix()}\0{stat.st_size}\0{value}\n".encode())
        return {
            "path": str(path),
            "kind": "directory",
            "files": files,
            "size": total,
            "mtime_ns": latest,
            "hash_kind": "sha256-of-files",
            "hash": digest.hexdigest(),
        }
    stat = path.stat()
    kind, value = _file_hash(path, stat.st_size)
    return {
        "path": str(path),
        "kind": "file",
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "hash_kind": kind,
        "hash": value,
    }


def fingerprint(config: RunConfig) -> dict[str, Any]:
    """The identity of a run: its parameters (all but :data:`RESOURCE_PARAMETERS`) and its input."""
    parameters = {k: v for k, v in config.flat().items() if k not in RESOURCE_PARAMETERS}
    parameters_hash = hashlib.sha256(repr(sorted(parameters.items())).encode()).hexdigest()
    return {
        "version": 1,
        "parameters": parameters,
        "parameters_sha256": parameters_hash,
        "input": input_fingerprint(config.input),
    }


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What changed between two fingerprints, as short phrases (no content)."""
    changed: list[str] = []
    old_params, new_params = stored.get("parameters", {}), current.get("parameters", {})
    for name in sorted(set(old_params) | set(new_params)):
        if name in RESOURCE_PARAMETERS:
            continue
        if old_params.get(name) != new_params.get(name):
            changed.append(f"{name} {_show(old_params.get(name))} -> {_show(new_params.get(name))}")
    old_in, new_in = stored.get("input", {}), current.get("input", {})
    if old_in.get("path") != new_in.get("path"):
        if "input" not in old_params or old_params.get("input") == new_params.get("input"):
            changed.append("input path")
    elif old_in.get("kind") == "remote":
        pass
    elif old_in.get("size") != new_in.get("size"):
        changed.append(f"input size {old_in.get('size')} -> {new_in.get('size')} bytes")
    elif old_in.get("hash") != new_in.get("hash"):
        changed.append("input content (hash)")
    elif old_in.get("hash_kind") != "sha256" and old_in.get("mtime_ns") != new_in.get("mtime_ns"):
        # only the first/last blocks were hashed: a new mtime may hide a change in the middle
        changed.append("input modification time (a large input is hashed only at its ends)")
    return changed


def compare(stored: dict[str, Any], current: dict[str, Any]) -> None:
    """Refuse a resume whose parameters or input differ from the run's first start."""
    changed = differences(stored, current)
    if changed:
        raise ResumeError(
            f"run_id: this run id was started with other parameters or input ({'; '.join(changed)}); "
            "resume with the original ones, or start a new run with a new --run-id"
        )


def operator_dir(config: RunConfig) -> Path:
    """Where a run's operator-only files live (outside the published release): in the warehouse
    directory, ``WAREHOUSE/operator/RUN_ID``."""
    assert config.run_id and config.warehouse
    return Path(config.warehouse) / "operator" / config.run_id


def remove_run_files(warehouse: Path, run_id: str) -> None:
    """Delete a run's DuckDB file in ``warehouse`` and what DuckDB keeps beside it."""
    database = Path(warehouse) / "runs" / f"{run_id}.duckdb"
    for path in (database, database.with_name(database.name + ".wal")):
        path.unlink(missing_ok=True)
    shutil.rmtree(database.with_name(database.name + ".tmp"), ignore_errors=True)


def public_cache_dir(config: RunConfig) -> Path:
    """The public-model cache (:mod:`dpngram.lm.public_cache`): ``WAREHOUSE/cache/public``, shared
    by the runs of that warehouse. Public data only."""
    assert config.warehouse
    return Path(config.warehouse) / "cache" / "public"


def staging_token(run_id: str, registered: dict[str, Any], ledger: tuple[str, str]) -> dict[str, Any]:
    """What a run's staging directory carries: the ledger's id and a keyed digest of the run id
    and the fingerprint the ledger registered for it (``ledger``: (id, secret) from
    :meth:`dpngram.release.ledger.Ledger.identity`)."""
    ledger_id, secret = ledger
    canonical = json.dumps(registered, sort_keys=True, default=str)
    digest = hmac.new(bytes.fromhex(secret), f"{run_id}\0{canonical}".encode(), hashlib.sha256)
    return {"version": 2, "run_id": run_id, "ledger_id": ledger_id, "run_digest": digest.hexdigest()}


def _staged_files(staging: Path) -> bool:
    """Whether ``staging`` holds anything but unfinished writes (a kill while creating it)."""
    return any(
        p.is_file() and not is_temporary(p.name) and p.name != IDENTITY_FILE for p in staging.rglob("*")
    )


def check_staging(release: Release, token: dict[str, Any], ledger_location: str) -> bool:
    """Refuse (one-line :class:`ResumeError`) a staging directory that belongs to another run
    identity: another privacy ledger, or another fingerprint of this run id. Returns whether the
    directory already carries this identity (False: it is new, or holds only unfinished writes,
    and the caller writes ``token`` with :func:`write_staging_token` before staging anything)."""
    staging = release.staging
    if not staging.is_dir():
        return False
    path = staging / IDENTITY_FILE
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        stored = None
    except (OSError, ValueError):
        stored = {}
    where = f"{staging} (run '{release.run_id}')"
    if stored is None:
        if not _staged_files(staging):
            return False
        raise ResumeError(
            f"run_id: {where} carries no run identity (staged by an older dpngram, or by hand); "
            "it cannot be resumed safely: start a new run with a new --run-id"
        )
    # "warehouse_id": written by a dpngram that kept the ledger in the warehouse file
    if stored.get("ledger_id", stored.get("warehouse_id")) != token["ledger_id"]:
        raise ResumeError(
            f"run_id: {where} was started with another privacy ledger than {ledger_location}; resume "
            "it with the ledger it was started with, or start a new run with a new --run-id"
        )
    if stored.get("run_digest") != token["run_digest"] or stored.get("run_id") != release.run_id:
        raise ResumeError(
            f"run_id: {where} was staged for other parameters or input than the ledger "
            "registered for the run; start a new run with a new --run-id"
        )
    return True


def write_staging_token(release: Release, token: dict[str, Any]) -> None:
    """Write the run identity into the staging directory (created here)."""
    write_json_atomic(release.staging / IDENTITY_FILE, token)


def verify_staging(release: Release, ledger: Any) -> None:
    """The check a stage makes before it reuses anything staged: the staging directory must carry
    the identity of the run the ledger registered (``ledger``: a
    :class:`~dpngram.release.ledger.Ledger`). A staging directory of a run the ledger does not
    know, or without an identity but with staged files, is refused."""
    if release.published:
        return  # published: the ledger decides (a published run is never resumed)
    run = ledger.run(release.run_id)
    if run is None:
        if release.staging.is_dir() and (
            (release.staging / IDENTITY_FILE).exists() or _staged_files(release.staging)
        ):
            raise ResumeError(
                f"run_id: {release.staging} (run '{release.run_id}') was not started with the "
                f"privacy ledger {ledger.location}; resume it with the ledger it was started with, or "
                "start a new run with a new --run-id"
            )
        return
    token = staging_token(release.run_id, run["fingerprint"], ledger.identity())
    if not check_staging(release, token, ledger.location):
        write_staging_token(release, token)
