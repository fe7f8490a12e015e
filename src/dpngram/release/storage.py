"""Releases in object storage: ``OUT`` as any fsspec URL (``s3://``, ``gs://``, ``file://``).

On a local ``OUT`` a release is staged in ``OUT/DATASET/runs/RUN_ID.staging`` and published by a
rename and a symlink swap (:class:`dpngram.release.layout.Release`). Object stores have neither, so
:class:`ObjectRelease` publishes in three steps, each safe to repeat after a kill:

1. every staged file is uploaded to ``OUT/DATASET/runs/RUN_ID/``;
2. ``OUT/DATASET/runs/RUN_ID/MANIFEST.json`` (each file's size and SHA-256, the run id and the
   publish stamp) is written last: its presence is what makes the run a complete release;
3. the pointer ``OUT/DATASET/latest.json`` is replaced (one PUT, atomic for readers) to name the run
   and its manifest's SHA-256, unless it names a release published later; two publishers of one
   dataset take the ledger's lock ``publish:OUT/DATASET`` around the read-compare-write.

A reader that follows the pointer (:func:`latest_release`) only ever reaches a run whose manifest
exists, so it never sees a partial release; :func:`fetch_verified` downloads a file and checks it
against the manifest. The staging itself stays on the machine that runs the tasks, under the
warehouse directory (``WAREHOUSE/staging/DATASET/RUN_ID``); workers that share no disk share it
through the run store (:mod:`dpngram.release.run_store`).

Credentials and endpoints are fsspec's: for S3, the usual ``AWS_*`` variables
(``AWS_ENDPOINT_URL`` for an S3-compatible server).

Owns: :func:`is_object_url`, :func:`filesystem`, :class:`ObjectRelease`, :func:`latest_release`,
:func:`read_manifest`, :func:`fetch_verified`, :class:`ChecksumMismatch`, :func:`upload_file`,
:func:`read_json`, :func:`write_json`, :func:`remove_tree`.
Imports: dpngram.release.layout, dpngram.core; fsspec.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpngram.release.layout import MANIFEST, StagedFiles, build_manifest, sha256_file

#: The pointer object naming a dataset's newest release on object storage.
POINTER = "latest.json"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


def is_object_url(location: str | os.PathLike[str]) -> bool:
    """True for a URL with a scheme other than ``file://`` (``s3://``, ``gs://``, ``memory://``):
    a location on object storage. A plain path and ``file://`` are local."""
    match = _SCHEME.match(str(location))
    return bool(match) and match.group(1).lower() != "file"


def local_path(location: str | os.PathLike[str]) -> Path:
    """A local location (plain path or ``file://`` URL) as a path."""
    return Path(str(location).removeprefix("file://"))


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for a URL (no double slashes)."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and the path inside it. Listings are not cached: another
    worker may have written since."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    return fs, path


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return bool(fs.exists(path))


def read_json(url: str) -> Any:
    """A JSON object at ``url``; None when there is none."""
    fs, path = filesystem(url)
    try:
        return json.loads(fs.cat_file(path))
    except FileNotFoundError:
        return None


def json_bytes(payload: Any) -> bytes:
    """The bytes :func:`write_json` writes for ``payload`` (indented, sorted keys, a final newline)."""
    return (json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n").encode()


def write_json(url: str, payload: Any) -> None:
    """Write a JSON object in one PUT (a reader sees the old object or the new, never half)."""
    fs, path = filesystem(url)
    fs.pipe_file(path, json_bytes(payload))


def read_bytes(url: str) -> bytes | None:
    """The bytes of the object at ``url``; None when there is none."""
    fs, path = filesystem(url)
    try:
        return bytes(fs.cat_file(path))
    except FileNotFoundError:
        return None


def upload_file(local: Path, url: str) -> None:
    fs, path = filesystem(url)
    fs.put_file(str(local), path)


def download_file(url: str, local: Path, check: Callable[[Path], None] | None = None) -> None:
    """Download to ``local`` through a temporary sibling and a rename (never half a file);
    ``check(tmp)`` may refuse the bytes (raise) before they take the final name."""
    fs, path = filesystem(url)
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_name(f".{local.name}.partial")
    fs.get_file(path, str(tmp))
    try:
        if check is not None:
            check(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, local)


def list_files(url: str) -> list[str]:
    """Every file under ``url``, relative to it (POSIX), sorted; [] when there is none."""
    fs, path = filesystem(url)
    try:
        found = fs.find(path)
    except FileNotFoundError:
        return []
    root = path.rstrip("/") + "/"
    return sorted(p[len(root) :] for p in found if p.startswith(root))


def remove_tree(url: str) -> None:
    """Remove everything under ``url`` (nothing there is fine)."""
    fs, path = filesystem(url)
    with contextlib.suppress(FileNotFoundError):
        if fs.exists(path):
            fs.rm(path, recursive=True)


class ChecksumMismatch(RuntimeError):
    """A downloaded file does not match the SHA-256 its release's manifest records."""


class ObjectRelease(StagedFiles):
    """One run of one dataset whose ``OUT`` is on object storage: staged locally in ``staging``,
    published by upload, manifest and pointer (module docstring)."""

    def __init__(self, out_url: str, run_id: str, dataset: str, staging: Path) -> None:
        if not dataset or dataset in ("runs", "latest") or "/" in dataset or dataset.startswith("."):
            raise ValueError(f"dataset: {dataset!r} is not a safe directory name")
        self.out_dir = str(out_url).rstrip("/")
        self.dataset = dataset
        self.run_id = run_id
        self.home = join(self.out_dir, dataset)
        self.runs = join(self.home, "runs")
        self.final = join(self.runs, run_id)
        self.staging = Path(staging)

    @property
    def staged_name(self) -> str:
        """What the ledger records as the run's staging: ``OUT/DATASET/runs/RUN_ID.staging`` (a
        name, not an object), from which :func:`release_for_staged` rebuilds the release."""
        return self.final + ".staging"

    @property
    def latest(self) -> str:
        return join(self.home, POINTER)

    @property
    def published(self) -> bool:
        return exists(join(self.final, MANIFEST))

    @property
    def root(self) -> Path:
        """The local staging directory (the release's files as this machine has them)."""
        return self.staging

    def publish(self, lock: Callable[[], contextlib.AbstractContextManager[Any]] | None = None) -> str:
        """Upload, manifest, pointer (module docstring); then remove the local staging. Idempotent:
        after a kill it finishes what the last attempt began. ``lock``: a context manager factory
        held around the pointer's read-compare-write (the ledger's ``publish:OUT/DATASET`` lock)."""
        if read_bytes(join(self.final, MANIFEST)) is None:
            if not self.staging.is_dir():
                raise FileNotFoundError(f"nothing staged for run {self.run_id} in {self.staging}")
            manifest = build_manifest(self.staging, self.run_id, self.dataset)
            for rel in manifest["files"]:
                upload_file(self.staging / rel, join(self.final, rel))
            write_json(join(self.final, MANIFEST), manifest)  # the commit point
        with lock() if lock is not None else contextlib.nullcontext():
            self.point_latest()
        shutil.rmtree(self.staging, ignore_errors=True)
        return self.final

    def point_latest(self) -> bool:
        """Point ``OUT/DATASET/latest.json`` at this (published) release unless it names a release
        published later. The pointer carries the SHA-256 of the manifest object's bytes (what
        ``sha256sum MANIFEST.json`` prints). Returns whether it names this release now."""
        raw = read_bytes(join(self.final, MANIFEST))
        if raw is None:
            raise FileNotFoundError(f"run {self.run_id} is not published in {self.final}")
        manifest = json.loads(raw)
        current = read_json(self.latest)
        if current and current.get("run_id") != self.run_id:
            if str(current.get("published_at", "")) > str(manifest["published_at"]):
                return False
        manifest_sha = hashlib.sha256(raw).hexdigest()
        write_json(
            self.latest,
            {
                "run_id": self.run_id,
                "dataset": self.dataset,
                "release": f"runs/{self.run_id}",
                "published_at": manifest["published_at"],
                "manifest_sha256": manifest_sha,
            },
        )
        return True


def release_for_staged(staged: str, run_id: str, dataset: str, staging: Path) -> ObjectRelease | None:
    """The object-storage release a ledger ``staging`` name (``OUT/DATASET/runs/RUN_ID.staging``)
    stands for, or None when it is not one (a local staging path)."""
    suffix = f"/{dataset}/runs/{run_id}.staging"
    if not is_object_url(staged) or not staged.endswith(suffix):
        return None
    return ObjectRelease(staged[: -len(suffix)], run_id, dataset, staging)


# -- readers: downstream teams and the consumer DAG --------------------------------------------
def latest_release(out: str, dataset: str) -> str:
    """The location of ``dataset``'s newest complete release under ``out``: on object storage the
    run the pointer ``latest.json`` names (its manifest checked against the pointer), locally the
    directory the ``latest`` symlink resolves to. FileNotFoundError when nothing is published."""
    if not is_object_url(out):
        link = local_path(out) / dataset / "latest"
        if not link.exists():
            raise FileNotFoundError(f"dataset '{dataset}' has no published release in {out}")
        return str(link.resolve())
    home = join(str(out), dataset)
    pointer = read_json(join(home, POINTER))
    if pointer is None:
        raise FileNotFoundError(f"dataset '{dataset}' has no published release in {out} (no {POINTER})")
    release = join(home, pointer["release"])
    raw = read_bytes(join(release, MANIFEST))
    if raw is None or hashlib.sha256(raw).hexdigest() != pointer.get("manifest_sha256"):
        raise ChecksumMismatch(f"{join(home, POINTER)} names {release}, whose manifest does not match it")
    return release


def read_manifest(release: str) -> dict[str, Any]:
    """A published release's manifest (local directory or URL)."""
    if is_object_url(release):
        manifest = read_json(join(release, MANIFEST))
    else:
        path = local_path(release) / MANIFEST
        manifest = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    if manifest is None:
        raise FileNotFoundError(f"{release} has no {MANIFEST}: not a complete release")
    return manifest


def fetch_verified(release: str, rel: str, cache: Path) -> Path:
    """A file of a published release on this machine, checked against the release's manifest:
    downloaded into ``cache/RUN_ID/rel`` (reused when already there and matching), or read in
    place for a local release. :class:`ChecksumMismatch` when the bytes do not match."""
    manifest = read_manifest(release)
    expected = manifest["files"].get(rel)
    if expected is None:
        raise FileNotFoundError(f"{release} has no {rel} (not in its {MANIFEST})")

    def verify(path: Path) -> None:
        actual = sha256_file(path)
        if actual != expected["sha256"]:
            raise ChecksumMismatch(
                f"{rel} of {release}: SHA-256 {actual[:12]}... does not match the manifest's "
                f"{expected['sha256'][:12]}..."
            )

    if is_object_url(release):
        target = Path(cache) / manifest["run_id"] / rel
        if not (target.is_file() and sha256_file(target) == expected["sha256"]):
            download_file(join(release, rel), target, check=verify)  # bad bytes never take its name
    else:
        target = local_path(release) / rel
    verify(target)
    return target
