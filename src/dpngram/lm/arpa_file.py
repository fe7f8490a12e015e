"""The ARPA file: the format's rules (:func:`check_model`), the writer and the reader.


ARPA validity rules enforced by :func:`write_arpa` (what KenLM's ``build_binary`` needs): exact
``\\data\\`` counts, every n-gram's context (prefix) and suffix present at order n - 1, ``<s>``,
``</s>``, ``<unk>`` among the unigrams, log10 probabilities <= 0, no backoff column at the top
order. Memory: the tables are polars frames (one row per n-gram), never per-user data.

Owns: the ARPA rules, :func:`write_arpa`, :func:`read_arpa`, :class:`WrittenArpa`.
Imports: dpngram.lm.ngram_tables, dpngram.core; polars.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from dpngram.core.errors import ArpaError
from dpngram.lm.ngram_tables import BOS, EOS, UNK, ArpaModel, ngram_context, ngram_suffix, strictly_sorted


def check_model(model: ArpaModel, *, links: bool = True) -> None:
    """Raise :class:`ArpaError` unless the tables satisfy the ARPA rules (module docstring).
    Closure is tested by deriving the model's structure (kept: what adapting, mixing or scoring it
    needs next), or with ``links=False`` by membership only, for a model read just to be checked
    (the model.arpa suite: 0.36 s against 0.68 s on SOTU's model)."""
    order = model.order
    if sorted(model.tables) != list(range(1, order + 1)):
        raise ArpaError("orders: every order 1..N must be present")
    unigrams = set(model.tables[1]["ngram"].to_list())
    for marker in (BOS, EOS, UNK):
        if marker not in unigrams:
            raise ArpaError(f"unigrams: {marker} is missing")
    for n, t in model.tables.items():
        # strictly sorted (every table this package builds) is unique, and cheaper to see than hashing
        if not strictly_sorted(t["ngram"]) and t["ngram"].n_unique() != t.height:
            raise ArpaError(f"order {n}: duplicate n-grams")
        if t.filter(pl.col("logprob") > 0).height or t["logprob"].null_count():
            raise ArpaError(f"order {n}: log10 probabilities must be <= 0")
        if n == order and t["backoff"].null_count() != t.height:
            raise ArpaError(f"order {n}: the top order has no backoff")
    if links or model.derived_structure() is not None:
        model.structure()  # closure: every context and suffix listed one order below
    else:
        _check_closed(model)


def _check_closed(model: ArpaModel) -> None:
    """Closure (every n-gram's context and suffix, its first and last n - 1 words, listed one order
    below) by two membership tests per order, without deriving the row links."""
    for n in range(2, model.order + 1):
        lower = model.tables[n - 1]["ngram"].implode()
        parts = model.tables[n].select(context=ngram_context(), suffix=ngram_suffix())
        for name in ("context", "suffix"):
            missing = parts.filter(~pl.col(name).is_in(lower))[name].n_unique()
            if missing:
                raise ArpaError(f"order {n}: {missing} n-gram {name}(s) missing at order {n - 1}")


@dataclass(frozen=True)
class WrittenArpa:
    """An ARPA file as :func:`write_arpa` wrote it: the model (its tables checked by the ARPA rules
    before writing), the counts declared in ``\\data\\`` and the SHA-256 of the bytes written."""

    model: ArpaModel
    declared: dict[int, int]
    sha256: str


class _HashingWriter:
    """A binary file that also feeds every byte written to a hash (polars writes through ``write``)."""

    def __init__(self, fh: BinaryIO, digest: Any) -> None:
        self._fh, self._digest = fh, digest

    def write(self, data: bytes) -> int:
        self._digest.update(data)
        return self._fh.write(data)

    def flush(self) -> None:
        self._fh.flush()


def write_arpa(model: ArpaModel, path: str | os.PathLike[str], *, digest: Any = None) -> dict[int, int]:
    """Check the rules, then write the ARPA file (atomically: ``path.tmp`` then rename). Returns
    the counts per order written in ``\\data\\``. ``digest`` (a ``hashlib`` object, optional) is
    updated with every byte written: step ``lm`` validates the tables it wrote and tells the file
    apart from them by that digest (:func:`dpngram.validation.validate_model`)."""
    check_model(model)
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    counts = model.counts()
    with open(tmp, "wb") as raw:
        fh: Any = raw if digest is None else _HashingWriter(raw, digest)
        fh.write(b"\\data\\\n")
        for n, c in counts.items():
            fh.write(f"ngram {n}={c}\n".encode())
        for n in counts:
            fh.write(f"\n\\{n}-grams:\n".encode())
            t = model.tables[n]
            cols = [pl.col("logprob").round(7).cast(pl.String), pl.col("ngram")]
            if n < model.order:
                cols.append(pl.col("backoff").round(7).cast(pl.String))
            # one line per n-gram, written by polars (no Python string per line)
            lines = t.select(pl.concat_str(cols, separator="\t").alias("line"))
            lines.write_csv(fh, include_header=False, quote_style="never")
            if not t.height:
                fh.write(b"\n")
        fh.write(b"\n\\end\\\n")
    os.replace(tmp, target)
    return counts


def read_arpa(path: str | os.PathLike[str]) -> tuple[dict[int, int], ArpaModel]:
    """Parse an ARPA file: (counts declared in ``\\data\\``, the tables as read). Raises
    :class:`ArpaError` on a malformed file (one line, no data values).

    A file laid out as :func:`write_arpa` and KenLM write it is parsed column-wise by polars
    (:func:`_read_regular_arpa`); anything else goes through the line-by-line reader, which also
    names the first bad line."""
    regular = _read_regular_arpa(path)
    return regular if regular is not None else _read_arpa_lines(path)


def _read_regular_arpa(path: str | os.PathLike[str]) -> tuple[dict[int, int], ArpaModel] | None:
    """The fast path of :func:`read_arpa`, or None when the file is not regular: the first
    non-blank line ``\\data\\``, then only ``ngram N=C`` lines, then ``\\N-grams:`` sections of
    2- or 3-field tab-separated lines with numeric fields, then ``\\end\\``."""
    try:
        # every line whole, read by polars' parallel CSV reader (a byte that separates no field in
        # an ARPA file, no quoting); a line holding that byte, or bytes that are not UTF-8, makes
        # this fail and the line-by-line reader decide. SOTU's model: 0.1 s against 0.5 s for
        # str.split of the whole file.
        lines = pl.read_csv(
            path, has_header=False, separator="\x01", quote_char=None, schema={"line": pl.String}
        )
    except (pl.exceptions.PolarsError, UnicodeDecodeError, OSError):
        return None
    lines = lines.with_row_index("i").filter(pl.col("line").str.strip_chars() != "")
    ends = lines.filter(pl.col("line") == "\\end\\")["i"]
    if not ends.len() or not lines.height or lines["line"][0] != "\\data\\":
        return None
    lines = lines.filter(pl.col("i") < ends[0]).slice(1)
    header = pl.col("line").str.starts_with("\\") & pl.col("line").str.ends_with("-grams:")
    headers = lines.with_row_index("pos").filter(header)
    if not headers.height:
        return None
    data = lines.slice(0, int(headers["pos"][0]))["line"]
    if not data.str.contains(r"^ngram [0-9]+=[0-9]+$").all():
        return None
    declared = {int(n): int(c) for n, c in (line[6:].split("=") for line in data.to_list())}
    bounds = [*headers["pos"].to_list(), lines.height]
    tables: dict[int, pl.DataFrame] = {}
    for k, name in enumerate(headers["line"].to_list()):
        order = name[1:-7]
        if not order.isdigit() or int(order) in tables:
            return None
        rows = lines.slice(bounds[k] + 1, bounds[k + 1] - bounds[k] - 1).select(
            tabs=pl.col("line").str.count_matches("\t", literal=True),
            fields=pl.col("line").str.split_exact("\t", 2),
        )
        if not rows["tabs"].is_between(1, 2).all():
            return None
        table = rows.unnest("fields").select(
            ngram=pl.col("field_1"),
            logprob=pl.col("field_0").cast(pl.Float64, strict=False),
            backoff=pl.col("field_2").cast(pl.Float64, strict=False),
            bad=(pl.col("field_0").cast(pl.Float64, strict=False).is_null())
            | (pl.col("field_2").is_not_null() & pl.col("field_2").cast(pl.Float64, strict=False).is_null()),
        )
        if table["bad"].any():
            return None
        tables[int(order)] = table.drop("bad")
    return declared, ArpaModel(dict(sorted(tables.items())))


def _read_arpa_lines(path: str | os.PathLike[str]) -> tuple[dict[int, int], ArpaModel]:
    """:func:`read_arpa` line by line (any layout the format allows; names the first bad line)."""
    declared: dict[int, int] = {}
    rows: dict[int, list[tuple[str, float, float | None]]] = {}
    section: int | None = None
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if line == "\\data\\":
                section = 0
                continue
            if line == "\\end\\":
                break
            if line.startswith("\\") and line.endswith("-grams:"):
                try:
                    section = int(line[1:-7])
                except ValueError:
                    raise ArpaError(f"line {line_no}: bad section header") from None
                rows.setdefault(section, [])
                continue
            if section == 0:
                if not line.startswith("ngram "):
                    raise ArpaError(f"line {line_no}: bad \\data\\ line")
                n, c = line[6:].split("=")
                declared[int(n)] = int(c)
                continue
            if section is None:
                raise ArpaError(f"line {line_no}: text before \\data\\")
            fields = line.split("\t")
            if len(fields) not in (2, 3):
                raise ArpaError(f"line {line_no}: expected 2 or 3 tab-separated fields")
            try:
                logprob = float(fields[0])
                backoff = float(fields[2]) if len(fields) == 3 else None
            except ValueError:
                raise ArpaError(f"line {line_no}: non-numeric probability or backoff") from None
            rows[section].append((fields[1], logprob, backoff))
    tables = {
        n: pl.DataFrame(
            r, schema={"ngram": pl.String, "logprob": pl.Float64, "backoff": pl.Float64}, orient="row"
        )
        for n, r in sorted(rows.items())
    }
    return declared, ArpaModel(tables)
