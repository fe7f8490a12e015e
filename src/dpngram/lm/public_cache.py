"""Disk cache of the public corpus's n-gram counts and of the public Kneser-Ney model P
(and of a run's released model; docs/lm.md, "The public-model cache").

Every run with a public corpus needs P in two stages (``lm_counts`` builds the counting domain and
the selection models on it; ``lm`` mixes it into the released model), fitted on the corpus without
its held-out sentences; a run with ``lm_eval_text`` also needs P on the whole corpus (the
public-only baseline there). Before this cache each of them tokenised and counted the whole public
corpus again and fitted Kneser-Ney again. Eight kinds of entries:

* ``counts``: the raw order-1..N counts of one public corpus (``part``: train / all, named with
  the held-out rate: :func:`dpngram.lm.open_model.split_key`), with no vocabulary mapping. Keyed
  by the corpus file's SHA-256, so every later run on the same corpus skips tokenising and
  counting; a run maps them to its vocabulary (:func:`map_to_vocabulary`), which gives exactly the
  counts of counting with that mapping.
* ``models``: P's Kneser-Ney terms (:func:`dpngram.lm.kneser_ney.kneser_ney_terms`), keyed by the
  corpus digest, the part, the order and the public words the run's model vocabulary V_LM keeps.
  A run completes them with its DP-only words, which have no public counts, in a few hundredths
  of a second. The DP vocabulary changes from run to run, but the public words V_LM keeps do not
  whenever every public word fits under ``lm_public_vocab_size`` (Brown: 48,518 words under
  50,000), so a weekly refresh fits P once per public corpus; the ``lm`` stage reuses the
  ``lm_counts`` stage's fit, also across Airflow task processes.
* ``heldout``: the held-out public sentences as the text file the model card's comparison scores
  (:func:`dpngram.lm.open_model.write_heldout_text`), keyed by the corpus digest and the
  lowercasing; reading and tokenising the whole corpus for them cost about 0.4 s a run on Brown.
* ``structure``: the row links of those terms (:func:`dpngram.lm.kneser_ney.terms_structure`: each
  n-gram's context, suffix and last word as row numbers), same key. P carries them, with its
  DP-only unigram rows renumbered, instead of deriving them from its strings in every run.
* ``frequent``: the ``lm_count_domain`` most frequent public n-grams of each order 2..N, the
  counting domain's public part (:func:`dpngram.lm.open_model.public_model_and_frequent`): the key
  of ``models`` plus the cap, since they depend on the same counts. Sorted by the n-gram, with
  each word's code (:func:`word_codes`), so a run turns them into its counting keys with array
  arithmetic instead of splitting and mapping 400,000 strings (about 0.1 s a run on Brown).

* ``public_sentences``: the public corpus tokenised as stage ``bayes`` loads it (one row per
  sentence, :func:`dpngram.mechanisms.bayes.load_public_corpus`), keyed by the corpus digest and
  the lowercasing.

* ``mixtures`` and ``mixture_links``: one run's released model M (the tables and row links of
  λ·Q + (1 − λ)·P′), stored by stage ``lm_counts``, which builds M to score it for the verdict, and
  read by stage ``lm``, which writes it (:func:`dpngram.lm.build.released_mixture`). Keyed by
  everything M is computed from: the released DP vocabulary and noisy counts by content, the
  public corpus by content, the parameters and the released (β, λ); so stage ``lm`` reads an entry
  only for the model it would build itself from the released files (about 0.75 s on SOTU's model
  against 0.1 s to read it). A run whose cache is elsewhere, or gone, builds it again.

**The shared copy.** A deployment whose workers share no disk names a run store
(``DPNGRAM_RUN_STORE``, :mod:`dpngram.release.run_store`); the entries of the
:data:`SHARED_KINDS` are then also kept under ``RUN_STORE/_cache/public/`` (:func:`shared_root`).
A worker whose own cache misses an entry downloads it from there before computing it, and uploads
what it computes (the table files first, ``meta.json``, the mark of a complete entry, last). So the
public model is fitted once per deployment, not once per worker, nor once per task where workers
are short-lived (a KubernetesExecutor pod). The shared copy keeps the :data:`SHARED_KEEP` most
recently used entries of each kind: a worker that downloads an entry writes the small file
:data:`USED` into it, and one that uploads an entry removes the kind's entries beyond that count,
least recently written first (:func:`_prune_shared`). A worker that was reading a removed entry
finds it missing and computes it, so pruning, like deleting the whole shared copy, is always safe.
An unreachable or damaged shared copy is skipped with a warning: the worker computes the entry as
without it.

Only public data is stored: the public corpus's counts, a model fitted on them over V_LM (the
DP vocabulary, a released output, ∪ public words) and models computed from released DP outputs
and that model (post-processing). The directory is ``WAREHOUSE_DIR/cache/public``
(:func:`dpngram.release.identity.public_cache_dir`). Entries are written to a temporary directory
and renamed into place (atomic; a concurrent writer of the same key loses the race harmlessly),
and only the :data:`KEEP` most recently used entries of each kind are kept. A cache that cannot be
read or written is skipped (the caller recomputes; a table entry that cannot be read is replaced by
the result): the cache never changes a result.

Owns: the cache layout and keys, the shared copy's layout. Imports: dpngram.lm.ngram_tables; polars,
fsspec (the shared copy; not dpngram.release.storage: the mechanisms import this module and must
not import the run plumbing, pyproject's contracts).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import polars as pl

from dpngram.lm.ngram_tables import BOS, EOS, UNK

#: Bump when the counting or the model recipe changes: older entries are then never read.
CACHE_VERSION = 1

#: Entries kept per kind (least recently used removed first).
KEEP = {
    "counts": 4,
    "models": 6,
    "structure": 6,
    "frequent": 6,
    "public_sentences": 4,
    "heldout": 4,
    "mixtures": 2,
    "mixture_links": 2,
}

#: Parquet compression of the kinds written in every run (a run's released model: lz4 writes SOTU's
#: in 0.08 s against zstd's 0.13 s, at 1.3x the size); the rest zstd.
FAST_WRITE = {"mixtures": "lz4", "mixture_links": "lz4"}

#: The kinds kept in the shared copy (module docstring): a public corpus's entries, which every run
#: on that corpus reads. Not a run's released mixture (``mixtures``, ``mixture_links``): one per run,
#: the shared copy would keep them all, and stage ``lm`` rebuilds one in about a second.
SHARED_KINDS = frozenset({"counts", "models", "structure", "frequent", "public_sentences", "heldout"})

#: Entries the shared copy keeps per kind (its least recently used removed first): twice a worker's
#: own, as the workers of one deployment may run several public corpora or settings at once.
SHARED_KEEP = {kind: 2 * KEEP[kind] for kind in SHARED_KINDS}

#: The file whose presence marks a table entry as complete; uploaded last.
META = "meta.json"

#: An empty file a worker writes into a shared entry when it downloads it: the entry's last use
#: (object stores keep no access time), which :func:`_prune_shared` ranks entries by.
USED = "used"

#: The environment variable that names the deployment's run store; the same name as
#: :data:`dpngram.release.run_store.RUN_STORE_ENV` (tests/test_lm_public_cache.py checks it).
RUN_STORE_ENV = "DPNGRAM_RUN_STORE"

#: Where in the run store the shared copy is (a run id never starts with "_": no run's prefix).
SHARED_PREFIX = "_cache/public"

T = TypeVar("T")

log = logging.getLogger(__name__)


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes (read every time: a file rewritten within one tick of the clock
    keeps its modification time, so no memo by time and size)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def vocabulary_digest(vocabulary: Iterable[str]) -> str:
    """SHA-256 of a vocabulary as a set (order-independent)."""
    # each word then a NUL byte, the words sorted: one buffer, hashed once
    words = sorted(set(vocabulary))
    return hashlib.sha256("".join(w + "\0" for w in words).encode("utf-8")).hexdigest()


#: The first word codes of :func:`word_codes`: no word (an n-gram shorter than the position), then
#: the markers; the public words follow.
CODE_WORDS = ("", BOS, EOS, UNK)


def word_codes(ngrams: pl.DataFrame, public_words: list[str], order: int) -> pl.DataFrame:
    """``ngrams`` (column ``ngram``, words of V_LM's public part or markers) with columns ``c0`` ..
    ``c{order-1}``: each position's word as its index in :data:`CODE_WORDS` followed by
    ``public_words`` (0: the n-gram has no word there; -1: a word outside both)."""
    words = [*CODE_WORDS, *public_words]
    old = pl.Series(words, dtype=pl.String)
    new = pl.Series(range(len(words)), dtype=pl.Int32)
    split = ngrams.select(w=pl.col("ngram").str.split_exact(" ", order - 1)).unnest("w")
    return ngrams.with_columns(
        pl.Series(f"c{i}", split[f"field_{i}"].fill_null("").replace_strict(old, new, default=-1))
        for i in range(order)
    )


def entry_key(*parts: object) -> str:
    """The key of a cache entry: its parts, :data:`CACHE_VERSION` and the tokenizer's version (the
    entries hold tokens of the public corpus: a rule change must not reuse them)."""
    from dpngram.text.tokenizer import TOKENIZER_VERSION

    payload = [CACHE_VERSION, TOKENIZER_VERSION, *parts]
    return hashlib.sha256(json.dumps(payload, default=str).encode()).hexdigest()[:40]


def map_to_vocabulary(raw: dict[int, pl.DataFrame], vocabulary: Iterable[str]) -> dict[int, pl.DataFrame]:
    """Counts with every token outside ``vocabulary`` read as ``<unk>`` (and re-summed), from raw
    counts whose marker tokens are padding only (:func:`dpngram.lm.open_model.raw_public_counts`).
    Equal to counting with that mapping (tests/test_lm_public_cache.py). When the vocabulary holds
    every public word (every token is an order-1 n-gram of the raw counts), nothing maps and the
    raw counts are returned as they are: the usual case, V_LM keeping all of Brown's words."""
    keep = pl.Series("keep", sorted({*vocabulary, BOS, EOS, UNK}), dtype=pl.String)
    if 1 in raw and bool(raw[1]["ngram"].is_in(keep.implode()).all()):
        return {n: table.select("ngram", pl.col("count").cast(pl.Float64)) for n, table in raw.items()}
    out: dict[int, pl.DataFrame] = {}
    for n, table in raw.items():
        mapped = table.select(
            ngram=pl.col("ngram")
            .str.split(" ")
            .list.eval(pl.when(pl.element().is_in(keep.implode())).then(pl.element()).otherwise(pl.lit(UNK)))
            .list.join(" "),
            count=pl.col("count").cast(pl.Float64),
        )
        out[n] = mapped.group_by("ngram").agg(pl.col("count").sum())
    return out


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _prune(kind_dir: Path, keep: int) -> None:
    entries = [p for p in kind_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in entries[keep:]:
        shutil.rmtree(stale, ignore_errors=True)


def _read_tables(entry: Path) -> dict[int, pl.DataFrame] | None:
    meta = entry / "meta.json"
    if not meta.is_file():
        return None
    orders = json.loads(meta.read_text(encoding="utf-8"))["orders"]
    return {int(n): pl.read_parquet(entry / f"order{int(n)}.parquet") for n in orders}


def _store(entry: Path, fill: Callable[[Path], object], keep: int) -> None:
    """Create the entry directory: ``fill(tmp)`` writes its files into a temporary directory, which
    is then renamed into place (atomic), and the kind keeps its ``keep`` newest entries."""
    kind_dir = entry.parent
    kind_dir.mkdir(parents=True, exist_ok=True)
    tmp = kind_dir / f".{entry.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        fill(tmp)
        try:
            os.replace(tmp, entry)
        except OSError:  # another process stored the same entry first: theirs is identical
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(kind_dir, keep)


def shared_root() -> str | None:
    """The shared copy of this deployment, ``RUN_STORE/_cache/public``, or None (no run store: one
    machine, where the warehouse's cache is the only one)."""
    store = os.environ.get(RUN_STORE_ENV, "").strip()
    return f"{store.rstrip('/')}/{SHARED_PREFIX}" if store else None


def _shared_url(kind: str, key: str) -> str | None:
    """The shared copy's entry of ``kind``/``key``, or None (no shared copy, or a kind kept locally)."""
    root = shared_root() if kind in SHARED_KINDS else None
    return None if root is None else f"{root}/{kind}/{key}"


def _filesystem(url: str):  # noqa: ANN202 - an fsspec filesystem
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()  # another worker may have written since
    return fs, path


def _fetch_shared(entry: Path, kind: str, key: str, name: str | None = None) -> bool:
    """Download the shared copy's entry into ``entry`` (stored like a computed one: a temporary
    directory renamed into place): the file ``name`` of a file entry, else a table entry's
    ``meta.json`` and the tables it lists. False when there is no shared copy or it lacks the entry,
    or cannot be read (a warning; the caller then computes the entry)."""
    url = _shared_url(kind, key)
    if url is None:
        return False
    try:
        fs, path = _filesystem(url)
        if name is None:
            orders = json.loads(fs.cat_file(f"{path}/{META}"))["orders"]
            names = [f"order{int(n)}.parquet" for n in orders] + [META]
        else:
            names = [name]

        def fill(tmp: Path) -> None:
            for file in names:
                fs.get_file(f"{path}/{file}", str(tmp / file))

        _store(entry, fill, KEEP.get(kind, 4))
    except FileNotFoundError:
        return False
    except Exception as err:  # noqa: BLE001 - any storage error: the entry is computed instead
        log.warning(
            "public-model cache: the shared copy's %s entry is unreadable (%s); computing it", kind, err
        )
        return False
    log.info("public-model cache: %s entry %s from the shared copy", kind, key[:12])
    try:  # the entry's last use, so that pruning keeps it; a failure only makes it prune sooner
        fs.pipe_file(f"{path}/{USED}", b"")
    except Exception as err:  # noqa: BLE001 - any storage error (the entry may be pruned already)
        log.debug("public-model cache: could not mark the shared %s entry as used (%s)", kind, err)
    return True


def _share(entry: Path, kind: str, key: str) -> None:
    """Upload a computed entry to the shared copy, ``meta.json`` last (a reader takes an entry
    without it as missing). A failure is a warning: the entry stays local."""
    url = _shared_url(kind, key)
    if url is None or not entry.is_dir():
        return
    files = sorted((p for p in entry.iterdir() if p.is_file()), key=lambda p: (p.name == META, p.name))
    try:
        fs, path = _filesystem(url)
        fs.makedirs(path, exist_ok=True)  # a local or mounted path needs the folder; S3 has none
        for file in files:
            fs.put_file(str(file), f"{path}/{file.name}")
    except Exception as err:  # noqa: BLE001 - any storage error: the local entry stands
        log.warning("public-model cache: could not add the %s entry to the shared copy (%s)", kind, err)
        return
    try:
        _prune_shared(fs, path.rstrip("/").rsplit("/", 1)[0], SHARED_KEEP.get(kind, 8))
    except Exception as err:  # noqa: BLE001 - any storage error: pruning waits for the next upload
        log.warning("public-model cache: could not prune the shared copy's %s entries (%s)", kind, err)


def _modified(info: dict) -> float:
    """A listed file's modification time in seconds (fsspec's local files give ``mtime``; S3 gives
    ``LastModified``, other stores ``last_modified`` or ``created``); 0 if it has none."""
    for field in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(field)
        if value is not None:
            return value.timestamp() if hasattr(value, "timestamp") else float(value)
    return 0.0


def _prune_shared(fs, kind_path: str, keep: int) -> None:  # noqa: ANN001 - an fsspec filesystem
    """Remove the shared copy's entries of one kind beyond the ``keep`` most recently used: an
    entry's last use is its newest file (uploaded, or the :data:`USED` mark of a download). An
    entry still being uploaded has new files, so it ranks among the newest."""
    entries = [info["name"] for info in fs.ls(kind_path, detail=True) if info["type"] == "directory"]
    if len(entries) <= keep:
        return
    last_use = {
        entry: max((_modified(f) for f in fs.ls(entry, detail=True) if f["type"] == "file"), default=0.0)
        for entry in entries
    }
    for stale in sorted(entries, key=lambda e: (last_use[e], e), reverse=True)[keep:]:
        fs.rm(stale, recursive=True)


def _write_tables(entry: Path, tables: dict[int, pl.DataFrame], keep: int, compression: str = "zstd") -> None:
    def fill(tmp: Path) -> None:
        for n, table in tables.items():
            table.write_parquet(tmp / f"order{n}.parquet", compression=compression)
        (tmp / "meta.json").write_text(json.dumps({"orders": sorted(tables)}), encoding="utf-8")

    _store(entry, fill, keep)


def cached_tables(
    cache_dir: Path | None, kind: str, key: str, compute: Callable[[], dict[int, pl.DataFrame]]
) -> dict[int, pl.DataFrame]:
    """``compute()`` through the cache entry ``cache_dir/kind/key`` (None: no cache)."""
    if cache_dir is None:
        return compute()
    entry = Path(cache_dir) / kind / key
    tables = _read_entry(entry)
    if tables is None and not entry.exists() and _fetch_shared(entry, kind, key):
        tables = _read_entry(entry)
    if tables is not None:
        _touch(entry)
        return tables
    # an entry that exists but cannot be read (a damaged file, a copy cut short) is removed, so the
    # result computed now replaces it (here and in the shared copy) instead of every later run
    # computing it again
    shutil.rmtree(entry, ignore_errors=True)
    tables = compute()
    try:
        _write_tables(entry, tables, KEEP.get(kind, 4), FAST_WRITE.get(kind, "zstd"))
    except OSError:  # a read-only or full disk: the result stands, uncached
        return tables
    _share(entry, kind, key)
    return tables


def _read_entry(entry: Path) -> dict[int, pl.DataFrame] | None:
    try:
        return _read_tables(entry)
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None


def cached_file(
    cache_dir: Path | None, kind: str, key: str, name: str, write: Callable[[Path], object]
) -> Path | None:
    """The file ``cache_dir/kind/key/name``, written by ``write(path)`` first when the entry is
    missing (to a temporary directory renamed into place, as the tables are). None without a
    cache or when the entry cannot be stored: the caller then writes its own copy."""
    if cache_dir is None:
        return None
    entry = Path(cache_dir) / kind / key
    if (entry / name).is_file() or (not entry.exists() and _fetch_shared(entry, kind, key, name)):
        _touch(entry)
        return entry / name
    try:
        _store(entry, lambda tmp: write(tmp / name), KEEP.get(kind, 4))
    except OSError:  # a read-only or full disk
        return None
    if not (entry / name).is_file():
        return None
    _share(entry, kind, key)
    return entry / name
