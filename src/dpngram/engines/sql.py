"""The SQL loader: statement text from the ``dpngram.sql`` package data, with safe identifiers.

SQL lives in ``sql/<stage>/<statement>.sql`` at the repository root, written once in DuckDB's
dialect, and ships inside the installed package as ``dpngram.sql`` (read with
:mod:`importlib.resources`, so a non-editable install needs no source tree). :func:`load_sql`
reads ``load_sql("dpne/level_table", schema=...)``: identifiers (schema and table names) are
substituted into ``{name}`` placeholders after validation (:func:`safe_identifier`); values are
bound as ``$name`` parameters by the engine, never formatted in. A line ``-- include: stage/_name``
is replaced by the fragment ``sql/stage/_name.sql`` (fragments start with ``_`` and are not
statements on their own), so SQL that several statements share is written once.
:func:`run_schema_name` names the schema that holds one run's private working tables.
:func:`statement_name` maps a loaded text back to its ``stage/statement`` name, so that an engine's
statement profile (``DPNGRAM_SQL_PROFILE``, :mod:`dpngram.engines.duckdb`) can say which file ran.

Owns: :func:`load_sql`, :func:`statement_name`, identifier validation, the run-schema name.
Imports: nothing from dpngram; the standard library only.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

SQL_PACKAGE = "dpngram.sql"


_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def safe_identifier(name: str) -> str:
    """Validate a schema/table identifier before it is substituted into SQL text."""
    if not _IDENT_RE.match(name):
        raise ValueError(f"not a safe SQL identifier: {name!r}")
    return name


def load_sql(name: str, **identifiers: str) -> str:
    """Text of ``sql/NAME.sql`` with ``{identifier}`` placeholders filled (validated names only)."""
    text = _sql_text(name)
    if identifiers:
        text = text.format(**{k: safe_identifier(v) for k, v in identifiers.items()})
    if len(_STATEMENT_NAMES) < _STATEMENT_NAMES_MAX:
        _STATEMENT_NAMES[text] = name
    return text


#: Loaded text -> ``stage/statement``: a run loads a few hundred distinct texts (one per statement
#: and identifier set); the bound keeps a long-lived process (a test session) from growing it.
_STATEMENT_NAMES: dict[str, str] = {}
_STATEMENT_NAMES_MAX = 20_000


def statement_name(sql: str) -> str:
    """The ``stage/statement`` a text was loaded from, or ``inline:`` and its first words (SQL that
    an engine builds itself, e.g. a DROP)."""
    name = _STATEMENT_NAMES.get(sql)
    return name if name is not None else "inline: " + " ".join(sql.split()[:4])


_INCLUDE_RE = re.compile(r"^-- include: ([a-z_]+/_[a-z_]+)[ \t]*$", re.MULTILINE)


@functools.cache
def _sql_text(name: str) -> str:
    """``sql/NAME.sql`` (``NAME`` is ``stage/statement``) from the installed package data, with its
    ``-- include: stage/_fragment`` lines replaced by the fragments' text (one level: a fragment
    cannot include another)."""
    text = _package_file(name)
    return _INCLUDE_RE.sub(lambda match: _package_file(match.group(1)).rstrip("\n"), text)


def _package_file(name: str) -> str:
    return resources.files(SQL_PACKAGE).joinpath(f"{name}.sql").read_text(encoding="utf-8")


def run_schema_name(run_id: str) -> str:
    """Schema holding one run's private working tables."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", run_id)[:50]
    return safe_identifier(f"run_{cleaned}")
