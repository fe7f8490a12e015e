"""The on-disk layout of a release: one constant per published path, and the staged directory.

Releases are kept apart per dataset: a run of dataset DATASET writes everything it publishes under
``OUT/DATASET/runs/RUN_ID.staging``; :class:`Release` publishes it by one ``rename`` to
``OUT/DATASET/runs/RUN_ID`` followed by an atomic swap of the ``OUT/DATASET/latest`` symlink, so a
failed run never leaves a partial release, the previous one stays ``latest``, and a run of another
dataset into the same OUT never moves this dataset's ``latest``. Every path a stage writes or a
reader opens is a constant (or function) here, relative to the release root.

An OUT written by an older dpngram (``OUT/runs/…``, ``OUT/latest``, one shared ``latest`` for every
dataset) is refused, not migrated (:func:`check_out_layout`): which dataset an old release belongs
to is in its report, but the privacy ledger also holds the staging paths of unfinished runs and
downstream readers hold paths into ``OUT/runs``, so moving files behind their backs is the
operator's decision. The message says what to move where.

Owns: release paths, :class:`Release`, :func:`check_out_layout`, :func:`write_json_atomic`,
:func:`replace_tree`.
Imports: nothing from dpngram; the standard library only.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# -- released tables (DP keys or DP-noisy values only) -----------------------------------------
VOCABULARY = "released/vocabulary.parquet"  # S_1: token
KGRAMS = "released/kgrams.parquet"  # S_2..S_T merged: k, ngram
TRIGRAM_DIST = "released/trigram_dist.parquet"  # Bayesian θ: w1, w2, w3, prob (noisy)
SYNTHETIC_SEQUENCES = "released/synthetic_sequences.parquet"  # Chen et al.: seq_id, text
NGRAM_COUNTS_NOISY = "released/ngram_counts_noisy.parquet"  # Chen et al.: ngram, noisy_count
LM_COUNTS = "released/lm_counts.parquet"  # n, ngram, noisy_count
OOV_WORDS = "released/oov_words.parquet"  # TrieHH: word


def level_path(k: int) -> str:
    """One DPNE level's released k-grams (merged into :data:`KGRAMS` by step ``dpne.kgrams``)."""
    return f"released/kgrams/k={k}.parquet"


def baseline_path(method: str) -> str:
    """A DPSU baseline's released n-grams (``dpngram baseline``; for comparison only)."""
    return f"released/baseline_{method}.parquet"


# -- language model ------------------------------------------------------------------------------
MODEL_ARPA = "model/model.arpa"
MODEL_BINARY = "model/model.binary"
MODEL_CARD = "model/MODEL_CARD.md"

# -- validation (Great Expectations) ---------------------------------------------------------------
VALIDATION_RESULTS = "validation/results.json"
MODEL_VALIDATION_RESULTS = "validation/model_results.json"
DATA_DOCS_DIR = "validation/data_docs"

# -- report ------------------------------------------------------------------------------------------
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"
PARTS_DIR = "report.parts"  # per-stage report fragments, merged into report.json by step report
#: Wall-clock seconds per stage: OPERATOR-ONLY (they grow with the private input's size), kept in
#: the run's operator directory (dpngram.release.identity.operator_dir), never in the release.
TIMINGS_DIR = "timings"
#: The staging directory's run identity (dpngram.release.identity.check_staging): the ledger's
#: random id and a digest of the run's fingerprint keyed by the ledger's secret. Removed when the
#: release is published.
IDENTITY_FILE = ".run-identity.json"
#: Every published file with its size and SHA-256, the run id and the publish stamp: written last
#: into a release (:func:`write_manifest`), so a consumer checks what it downloaded against it, and
#: on object storage its presence is what makes ``runs/RUN_ID`` a complete release.
MANIFEST = "MANIFEST.json"

#: What each released table's non-key columns hold (docs/usage.md, "What comes out"): DP-noisy values, or
#: post-processing of them. A table not listed holds keys only.
NOISY_COLUMNS: dict[str, dict[str, str]] = {
    "trigram_dist": {"prob": "DP-noisy: softmax of Gaussian-noised logits (docs/bayes_sensitivity.md)"},
    "ngram_counts_noisy": {"noisy_count": "DP-noisy: Laplace-noised counts, made consistent (docs/synth.md)"},
    "lm_counts": {
        "noisy_count": "DP-noisy: Gaussian-noised counts above a noisy threshold (docs/lm_privacy.md)"
    },
    "synthetic_sequences": {"text": "post-processing: sampled from the DP-noisy n-gram counts"},
}


def is_temporary(name: str) -> bool:
    """A file name of an unfinished write (:func:`write_json_atomic`, :meth:`Release.writing`,
    plot files): never published."""
    return name.endswith((".tmp", ".partial")) or (name.startswith(".") and ".partial" in name)


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON via a temporary file and rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
    os.chmod(tmp, 0o644)  # mkstemp creates 0600; releases are read by other users
    os.replace(tmp, path)


def replace_tree(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` via a sibling temp dir and renames (never half a tree)."""
    tmp = target.with_name(f".{target.name}.partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(source, tmp)
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)


#: Names the old, shared layout used directly under OUT (and the new one uses under OUT/DATASET):
#: never a dataset name.
RESERVED_NAMES = ("runs", "latest")


class LegacyLayoutError(ValueError):
    """OUT holds releases in the layout before releases were kept per dataset."""


def check_out_layout(out_dir: str | os.PathLike[str]) -> None:
    """Refuse an OUT that holds the old shared layout (``OUT/runs``, ``OUT/latest``), with one line
    saying what to move where (:class:`LegacyLayoutError`). Each old release's dataset is read from
    its report (``report.json``, or the staged ``report.parts/parameters.json``)."""
    out = Path(out_dir)
    runs, latest = out / "runs", out / "latest"
    if not (runs.is_dir() or latest.is_symlink() or latest.exists()):
        return
    datasets: set[str] = set()
    for run in sorted(runs.iterdir()) if runs.is_dir() else []:
        for report in (run / REPORT_JSON, run / PARTS_DIR / "parameters.json"):
            try:
                payload = json.loads(report.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            name = payload.get("dataset") or (payload.get("parameters") or {}).get("dataset")
            if isinstance(name, str):
                datasets.add(name)
                break
    if len(datasets) <= 1:
        name = next(iter(datasets), "default")
        old = " ".join(str(p) for p in (runs, latest) if p.is_symlink() or p.exists())
        target = out / name
        how = (
            f"its releases are of dataset '{name}': move them with `mkdir -p {target} && mv {old} {target}/`"
        )
    else:
        how = (
            f"its releases are of datasets {sorted(datasets)}: move each runs/RUN_ID to "
            f"{out}/DATASET/runs/ (report.json names its dataset) and re-create DATASET/latest"
        )
    raise LegacyLayoutError(
        f"out: {out} holds releases in the old shared layout (runs/, latest) that releases are no "
        f"longer published in (now OUT/DATASET/runs, OUT/DATASET/latest); {how}, or choose another "
        "output directory"
    )


def published_files(directory: Path) -> list[str]:
    """The files of a staged release that are published (relative POSIX paths, sorted): not the
    unfinished writes, the run identity or an earlier manifest."""
    return sorted(
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and not is_temporary(p.name) and p.name not in (IDENTITY_FILE, MANIFEST)
    )


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_manifest(directory: Path, run_id: str, dataset: str) -> dict[str, Any]:
    """The manifest of the release staged in ``directory`` (:data:`MANIFEST`): each published
    file's size and SHA-256, and ``published_at``, the publish stamp (UTC, microseconds) by which
    ``latest`` names the newest release."""
    files = {
        rel: {"size": (directory / rel).stat().st_size, "sha256": sha256_file(directory / rel)}
        for rel in published_files(directory)
    }
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"version": 1, "run_id": run_id, "dataset": dataset, "published_at": stamp, "files": files}


class StagedFiles:
    """Writing into a staged release: :meth:`path` and :meth:`writing`, relative to :attr:`root`."""

    @property
    def root(self) -> Path:
        raise NotImplementedError

    def path(self, *parts: str) -> Path:
        """A path inside the (staging) release; parent directories are created."""
        target = self.root.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    @contextmanager
    def writing(self, *parts: str) -> Iterator[Path]:
        """Yield a temporary path; on success it is renamed to ``parts`` (never half-written)."""
        target = self.path(*parts)
        tmp = target.with_name(f".{target.name}.partial")
        if tmp.exists():
            tmp.unlink()
        yield tmp
        os.replace(tmp, target)


class Release(StagedFiles):
    """The output directory of one run of one dataset: staged, then published atomically."""

    def __init__(self, out_dir: str | os.PathLike[str], run_id: str, dataset: str) -> None:
        if not dataset or dataset in RESERVED_NAMES or "/" in dataset or dataset.startswith("."):
            raise ValueError(f"dataset: {dataset!r} is not a safe directory name")
        self.out_dir = Path(out_dir)
        self.dataset = dataset
        self.run_id = run_id
        self.home = self.out_dir / dataset
        self.runs = self.home / "runs"
        self.final = self.runs / run_id
        self.staging = self.runs / f"{run_id}.staging"

    @property
    def published(self) -> bool:
        return self.final.is_dir()

    @property
    def root(self) -> Path:
        """Where this run's files are now: the staging dir until published, then the final one."""
        return self.final if self.published else self.staging

    @property
    def staged_name(self) -> str:
        """What the ledger records as the run's staging: the resolved staging directory."""
        return str(self.staging.resolve())

    def publish(self) -> Path:
        """Rename staging -> runs/RUN_ID, then point the dataset's ``latest`` at it unless a newer release is
        ``latest``. Idempotent: after a kill between the rename and the swap, calling it again
        finishes the publish.

        The rename is the commit point: what it renames is complete (temporary files are removed
        first) and from then on the release is never modified. The directory's modification time
        is set just before the rename: it is the release's publish stamp, so that ``latest``
        always names the newest complete release even when an interrupted publish is completed
        after a later one (:meth:`point_latest`)."""
        if not self.published:
            if not self.staging.is_dir():
                raise FileNotFoundError(f"nothing staged for run {self.run_id} in {self.staging}")
            # Leftovers of writes a crash interrupted (e.g. a kill between a temporary file and
            # its rename) are never published.
            for leftover in [p for p in self.staging.rglob("*") if p.is_file() and is_temporary(p.name)]:
                leftover.unlink()
            write_json_atomic(
                self.staging / MANIFEST, build_manifest(self.staging, self.run_id, self.dataset)
            )
            os.utime(self.staging)  # the publish stamp
            os.replace(self.staging, self.final)
        identity = self.final / IDENTITY_FILE
        if identity.exists():  # the staging directory's run identity is not part of the release
            stamp = self.final.stat()
            identity.unlink()
            os.utime(self.final, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        self.point_latest()
        return self.final

    @property
    def latest(self) -> Path:
        """``OUT/DATASET/latest``: a relative symlink to the dataset's newest release."""
        return self.home / "latest"

    def point_latest(self) -> bool:
        """Atomically point ``OUT/DATASET/latest`` at this (published) release, unless it names a
        complete release published after this one. Returns whether ``latest`` names this release now."""
        link = self.latest
        current = (self.home / os.readlink(link)) if link.is_symlink() else None
        if current is not None and current.is_dir() and current.resolve() != self.final.resolve():
            if current.stat().st_mtime_ns > self.final.stat().st_mtime_ns:
                return False  # a newer release is latest
        tmp_link = self.home / f".latest.{os.getpid()}"
        if tmp_link.is_symlink() or tmp_link.exists():
            tmp_link.unlink()
        tmp_link.symlink_to(Path("runs") / self.run_id)
        os.replace(tmp_link, link)
        return True


#: The assets a release of a dataset updates, and where each is under the dataset's latest
#: release (docs/orchestration.md, "Assets").
ASSET_KINDS = {"release": "", "ngrams": "released", "language_model": "model"}


def asset_key(dataset: str, kind: str, out: str | os.PathLike[str]) -> tuple[str, str]:
    """(name, URI) of the Airflow asset of kind ``kind`` (:data:`ASSET_KINDS`) of ``dataset``
    published into ``out``: one set of assets per dataset, named ``dpngram_DATASET_KIND``, whose
    URI is where the dataset's latest release keeps it, e.g. ``s3://releases/dpngram/chats/latest/
    model`` (on object storage ``latest`` is reached through the pointer ``latest.json``), or
    ``file:///srv/out/chats/latest/model`` for a local ``out``. A consumer schedules on the one
    dataset it wants by declaring this name and URI."""
    text = str(out)
    if "://" in text and not text.startswith("file://"):
        base = text.rstrip("/")
    else:
        base = "file://" + str(Path(text.removeprefix("file://")).resolve())
    uri = "/".join(part for part in (base, dataset, "latest", ASSET_KINDS[kind]) if part)
    return f"dpngram_{dataset}_{kind}", uri
