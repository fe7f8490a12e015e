"""Reading a text directory: one input record per file (docs/usage.md, "Input"; rules in records.py).

:func:`text_files` lists the non-hidden entries below the directory, each to be read or
quarantined (confinement: links outside the directory, symlinked subdirectories, files without a
declared extension and non-regular files are not read); :func:`textdir_batches` reads them into
the same :class:`~dpngram.text.records.RecordBatch` es as the other formats. The user of a file is
its relative path without the extension.

Owns: the text-directory reader.
Imports: dpngram.text.records, dpngram.core.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dpngram.core.errors import IngestError
from dpngram.text.records import BATCH_BYTES, BATCH_ROWS, DEFAULT_TEXT_EXTENSIONS, RecordBatch


@dataclass(frozen=True)
class TextFile:
    """One entry below a text directory: ``rel`` (its path relative to the directory, the
    quarantine's source), ``target`` (the file to read: itself, or an allowed link's target) and
    ``skip`` (a quarantine reason: the file is not read at all), or None."""

    rel: str
    target: Path
    skip: str | None = None


def _has_extension(name: str, extensions: tuple[str, ...]) -> bool:
    name = name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return any(name.endswith(ext) for ext in extensions)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def text_files(
    root: Path,
    extensions: tuple[str, ...] = DEFAULT_TEXT_EXTENSIONS,
    follow_external_symlinks: bool = False,
) -> list[TextFile]:
    """Non-hidden entries below ``root`` (recursively, sorted by relative path), each to be read
    or quarantined. Confinement: a symbolic link is resolved and read only if its target lies
    inside ``root`` (or ``follow_external_symlinks``); a symlinked subdirectory is never descended
    (links can loop, and its files would be a second copy or lie outside); a file is read only with
    one of ``extensions`` (lower-case, with the dot; ``.gz`` after it allowed). Nothing here reads
    a file's content."""
    real_root = root.resolve()
    extensions = tuple(e.lower() for e in extensions)
    found: list[TextFile] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        kept = []
        for d in dirnames:
            if d.startswith("."):
                continue
            link = here / d
            if link.is_symlink():
                found.append(TextFile(link.relative_to(root).as_posix(), link, "symlinked_directory"))
            else:
                kept.append(d)
        dirnames[:] = kept
        for name in filenames:
            if name.startswith("."):
                continue
            candidate = here / name
            rel = candidate.relative_to(root).as_posix()
            target, skip = candidate, None
            if candidate.is_symlink():
                target = candidate.resolve()
                if not _inside(target, real_root) and not follow_external_symlinks:
                    skip = "symlink_outside_input"
            if skip is None and not target.is_file():
                skip = "not_a_regular_file"
            if skip is None and not _has_extension(name, extensions):
                skip = "unsupported_extension"
            found.append(TextFile(rel, target, skip))
    return sorted(found, key=lambda f: f.rel)


def _read_no_follow(path: Path) -> bytes:
    """The bytes of ``path``, refusing a symbolic link in its last component (O_NOFOLLOW): a file
    checked by :func:`text_files` cannot be swapped for a link before it is read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _user_of_file(rel_path: str) -> str:
    rel = Path(rel_path)
    name = rel.name
    if name.lower().endswith(".gz"):
        name = name[:-3]
    stem = Path(name).stem if Path(name).suffix else name
    return (rel.parent / stem).as_posix() if rel.parent != Path(".") else stem


def textdir_batches(root: Path, files: list[TextFile] | None = None) -> Iterator[RecordBatch]:
    files = text_files(root) if files is None else files
    if not files:
        raise IngestError(f"input directory {root} contains no (non-hidden) regular files")
    batch = RecordBatch()
    for index, entry in enumerate(files, start=1):
        rel = entry.rel
        batch.read += 1
        if entry.skip is not None:
            batch.bad(rel, None, entry.skip, "")  # never read: no content in the quarantine
        else:
            try:
                data = _read_no_follow(entry.target)
                if data[:2] == b"\x1f\x8b":
                    data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error):
                batch.bad(rel, None, "unreadable_file", "")
            else:
                data = data.removeprefix(b"\xef\xbb\xbf")
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    batch.bad(rel, None, "invalid_utf8", data.decode("utf-8", "replace"))
                else:
                    if not text.strip():
                        batch.bad(rel, None, "empty_text", text)
                    else:
                        batch.good(_user_of_file(rel), index, text)
        if batch.read >= BATCH_ROWS or batch.text_bytes >= BATCH_BYTES:
            yield batch
            batch = RecordBatch()
    if batch.read:
        yield batch
