"""Locate KenLM's command-line tools (`lmplz`, `build_binary`), and run `lmplz`.

`make setup` builds both from the same `kenlm==0.3.0` sdist as the Python module, with
`-DKENLM_MAX_ORDER=6`, into a per-machine cache shared by every clone (see scripts/build_kenlm.sh).
The order limit is compiled in on both sides: the Python module's setup.py defaults to
`MAX_ORDER=6`, so an ARPA/binary built here loads with `kenlm.Model` iff its order is at most
`KENLM_MAX_ORDER` (tests/test_kenlm_bin.py checks that both sides agree).

Search order for a tool: `$DPNGRAM_KENLM_BIN`, then the cache directory
`${XDG_CACHE_HOME:-~/.cache}/dpngram/kenlm-0.3.0-order6/bin`, then `PATH`.

Owns: locating KenLM's tools, ``KENLM_MAX_ORDER``, :func:`run_lmplz` (the benchmarks' public-only and
non-private baselines; the product's model is built by :mod:`dpngram.lm.build`).
Imports: nothing from dpngram; the standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

KENLM_VERSION = "0.3.0"


KENLM_MAX_ORDER = 6


KENLM_TOOLS = ("lmplz", "build_binary")


KENLM_BIN_ENV = "DPNGRAM_KENLM_BIN"


def kenlm_cache_bin_dir() -> Path:
    """The directory `make setup` installs the tools into (mirrors the Makefile's KENLM_BIN)."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "dpngram" / f"kenlm-{KENLM_VERSION}-order{KENLM_MAX_ORDER}" / "bin"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def kenlm_binary(name: str) -> Path:
    """Absolute path of the KenLM tool `name` ('lmplz' or 'build_binary').

    Raises ValueError for another name, FileNotFoundError (saying to run `make setup`) when the
    tool is in none of the searched places.
    """
    if name not in KENLM_TOOLS:
        raise ValueError(f"name: must be one of {', '.join(KENLM_TOOLS)} (got {name!r})")
    searched: list[str] = []
    candidate_dirs: list[tuple[str, Path]] = []
    env_dir = os.environ.get(KENLM_BIN_ENV)
    if env_dir:
        candidate_dirs.append((f"${KENLM_BIN_ENV}={env_dir}", Path(env_dir)))
    cache_dir = kenlm_cache_bin_dir()
    candidate_dirs.append((str(cache_dir), cache_dir))
    for label, directory in candidate_dirs:
        candidate = directory / name
        if _executable(candidate):
            return candidate.resolve()
        searched.append(label)
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path).resolve()
    searched.append("PATH")
    raise FileNotFoundError(
        f"KenLM tool '{name}' not found (searched {', '.join(searched)}): run `make setup` to build it"
    )


def run_lmplz(text: Path, arpa: Path, order: int, memory: str, tmp: Path) -> None:
    """lmplz with explicit -S, --discount_fallback (small corpora) and --skip_symbols (a literal
    <unk> in the text is whitespace; lmplz estimates <unk> itself)."""
    cmd = [
        str(kenlm_binary("lmplz")),
        "-o",
        str(order),
        "-S",
        memory,
        "-T",
        str(tmp),
        "--discount_fallback",
        "--skip_symbols",
        "--text",
        str(text),
        "--arpa",
        str(arpa),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise RuntimeError(f"lmplz failed (exit {done.returncode}): {tail}")
