"""Where the privacy ledger is kept: a narrow storage interface and its two backends.

The ledger's logic (:class:`dpngram.release.ledger.Ledger`) talks to a :class:`LedgerStore` only:
it runs the ledger's SQL statements (``sql/ledger/*.sql``, written once in DuckDB's dialect) by
name inside a transaction, and takes named cross-process locks. Two backends:

* :class:`DuckDBLedgerStore`: an embedded DuckDB file, the default on one machine. Without a
  configured ledger it is one per-user file, ``$XDG_DATA_HOME/dpngram/ledger.duckdb`` (default
  ``~/.local/share/dpngram/ledger.duckdb``), whatever the working directory, so a run started from
  another folder sees the same lifetime spend. Each transaction opens the file, does its work and
  closes it again, so concurrent processes (two datasets' Airflow tasks) take turns instead of
  locking each other out for a whole stage; a busy file is retried for :data:`BUSY_SECONDS`.
* :class:`PostgresLedgerStore`: PostgreSQL, for deployments whose Airflow has several workers.
  The same statements, transpiled once by sqlglot; check-and-spend takes the dataset's row lock
  (an ``UPDATE`` of its ``lifetime_budget`` row, held until commit), so two workers racing for a
  dataset's last budget are serialised by the database and the second re-reads what the first
  committed. Named locks are PostgreSQL advisory locks held on a connection of their own: a
  killed worker's locks go with its connection.

The location is a URL (:func:`ledger_location`): ``--ledger URL`` / :data:`LEDGER_ENV`
(``postgresql://USER:PASSWORD@HOST:PORT/DB``, or a path or ``duckdb:///PATH`` for an embedded
file), which the Airflow DAG fills from the connection ``dpngram_ledger``; else the per-user file.
:func:`describe_location` shows it without its password.

Migrations: ``sql/ledger/migrations/NNN_name.sql``, applied in order, each once, in one
transaction that also records it in ``ledger.schema_version`` (PostgreSQL: under a transaction
advisory lock, so two workers starting at once do not both migrate).

Owns: :class:`LedgerStore`, :class:`LedgerTransaction`, the two backends, :func:`open_store`,
:func:`ledger_location`, :func:`default_ledger_path`, :func:`describe_location`, the migrations.
Imports: dpngram.engines.sql, dpngram.core; duckdb, psycopg2 (PostgreSQL only), sqlglot.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import threading
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from dpngram.core.errors import ConfigError, LedgerBusy
from dpngram.engines.sql import SQL_PACKAGE, load_sql

#: Environment variable naming the ledger (a URL or path); ``--ledger`` and the DAG set it too.
LEDGER_ENV = "DPNGRAM_LEDGER"
#: How long a transaction waits for a busy embedded ledger file before giving up.
BUSY_SECONDS = 120.0
#: Serialises ledger transactions between threads of one process (DuckDB: one connection at a
#: time per process keeps the file-lock retries simple).
PROCESS_LOCK = threading.RLock()

#: This process's in-memory DuckDB session for embedded-ledger transactions: (pid, connection, in
#: use). Kept between transactions; each attaches the ledger file and detaches it again, which
#: releases DuckDB's lock on the file as closing a connection did (tested). A forked child starts
#: its own (a DuckDB handle must not cross a fork).
_SESSION: list[Any] = [None, None, False]


def _session() -> Any:
    """The process's idle in-memory session, marked in use; a fresh connection if it is in use
    (a transaction inside a transaction). Hand it back with :func:`_release`. Under
    :data:`PROCESS_LOCK`."""
    import duckdb

    pid, con, busy = _SESSION
    if pid == os.getpid() and con is not None and not busy:
        _SESSION[2] = True
        return con
    if pid == os.getpid() and busy:
        return duckdb.connect(":memory:", config={"threads": 1})
    con = duckdb.connect(":memory:", config={"threads": 1})
    _SESSION[:] = [os.getpid(), con, True]
    return con


def _release(con: Any) -> None:
    """Detach the ledger file from ``con`` (from :func:`_session`) and hand the session back; a
    nested transaction's own connection is closed. A session that cannot detach is closed and
    dropped: the next transaction opens a new one, and closing releases the file either way."""
    if con is not _SESSION[1]:
        con.close()
        return
    try:
        con.execute("USE memory")
        con.execute("DETACH DATABASE IF EXISTS dpngram_ledger")  # not attached: a failed ATTACH
        _SESSION[2] = False
    except Exception:  # noqa: BLE001 - whatever went wrong, closing releases the file
        _SESSION[:] = [None, None, False]
        con.close()


def default_ledger_path() -> Path:
    """The per-user embedded ledger: ``$XDG_DATA_HOME/dpngram/ledger.duckdb`` (XDG's default
    ``~/.local/share``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dpngram" / "ledger.duckdb"


def ledger_location(url: str | None = None) -> str:
    """The ledger to use: ``url`` when given, else :data:`LEDGER_ENV`, else the per-user file
    (:func:`default_ledger_path`). Never relative to the working directory: a relative path is
    resolved here, once."""
    chosen = (url or os.environ.get(LEDGER_ENV, "")).strip() or str(default_ledger_path())
    kind, target = _parse(chosen)
    return target if kind == "postgresql" else str(Path(target).expanduser().resolve())


def describe_location(location: str) -> str:
    """The location as it may be shown: a PostgreSQL URL without its password."""
    kind, target = _parse(location)
    if kind != "postgresql":
        return target
    parts = urlsplit(target)
    if parts.password is None:
        return target
    netloc = parts.netloc.replace(":" + parts.password + "@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def is_shared(location: str) -> bool:
    """Whether the ledger is a server every machine reaches (PostgreSQL), not a local file."""
    return _parse(location)[0] == "postgresql"


def _parse(location: str) -> tuple[str, str]:
    """('postgresql', libpq URL) or ('duckdb', path)."""
    text = location.strip()
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*)://", text)
    if match is None:
        return "duckdb", text
    scheme = match.group(1).lower()
    if scheme in ("postgresql", "postgres") or scheme.startswith(("postgresql+", "postgres+")):
        return "postgresql", "postgresql://" + text[match.end() :]
    if scheme == "duckdb":
        return "duckdb", text[match.end() :] or str(default_ledger_path())
    if scheme == "file":
        return "duckdb", text[len("file://") :]
    raise ConfigError(
        f"ledger: {scheme}:// is not a ledger location; use postgresql://USER:PASSWORD@HOST:PORT/DB "
        "or the path of an embedded DuckDB file"
    )


class LedgerTransaction(Protocol):
    """One open transaction of a :class:`LedgerStore`: statements by name (``ledger/spent``),
    values bound as ``$name`` parameters."""

    def rows(self, name: str, **params: Any) -> list[tuple]: ...

    def records(self, name: str, **params: Any) -> list[dict[str, Any]]: ...

    def execute(self, name: str, **params: Any) -> None: ...


class LedgerStore(Protocol):
    """What the ledger needs from its storage: transactions over the ledger's statements, and
    named locks that hold across processes and machines."""

    kind: str
    location: str

    def transaction(self) -> contextlib.AbstractContextManager[LedgerTransaction]:
        """BEGIN ... COMMIT (ROLLBACK on an exception). A conflict with a concurrent transaction
        raises :class:`RetryTransaction` (the caller runs its body again)."""

    def lock(self, name: str, *, wait: float | None = None) -> contextlib.AbstractContextManager[bool]:
        """Hold the named lock for the block (yields True), waiting at most ``wait`` seconds
        (None: as long as it takes; 0: not at all, yields False when it is held elsewhere)."""

    def close(self) -> None: ...


class RetryTransaction(Exception):
    """A transaction conflicted with a concurrent one and was rolled back: run it again."""


def open_store(location: str | None = None) -> LedgerStore:
    """The store at ``location`` (default: :func:`ledger_location`), migrated to the current
    schema."""
    kind, target = _parse(ledger_location(location))
    if kind == "postgresql":
        return PostgresLedgerStore(target)
    return DuckDBLedgerStore(Path(target))


# ----------------------------------------------------------------------------------------------
# Migrations: sql/ledger/migrations/NNN_name.sql, in order
# ----------------------------------------------------------------------------------------------
@functools.cache
def migrations() -> tuple[tuple[int, str, str], ...]:
    """(version, name, DuckDB SQL) of every migration, in order."""
    folder = resources.files(SQL_PACKAGE).joinpath("ledger", "migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{3})_([a-z0-9_]+)\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    return tuple(sorted(found))


@functools.cache
def postgres_sql(text: str) -> str:
    """A ledger statement (DuckDB dialect, ``$name`` parameters) as PostgreSQL with psycopg2's
    ``%(name)s`` parameters; comments dropped (a ``%`` in one would be read as a parameter)."""
    import sqlglot

    statements = sqlglot.transpile(text, read="duckdb", write="postgres", comments=False)
    return ";\n".join(statements)


def _statement(name: str) -> str:
    return load_sql(name)


# ----------------------------------------------------------------------------------------------
# DuckDB: the embedded default
# ----------------------------------------------------------------------------------------------
class _DuckDBTransaction:
    def __init__(self, con: Any) -> None:
        self.con = con

    def rows(self, name: str, **params: Any) -> list[tuple]:
        return self.con.execute(_statement(name), params).fetchall()

    def records(self, name: str, **params: Any) -> list[dict[str, Any]]:
        cursor = self.con.execute(_statement(name), params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def execute(self, name: str, **params: Any) -> None:
        self.con.execute(_statement(name), params)


class DuckDBLedgerStore:
    """The ledger in an embedded DuckDB file, attached for one transaction at a time."""

    kind = "duckdb"

    #: Files this process has migrated already (a migration check per transaction is wasted work).
    _migrated: set[str] = set()

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        if self.path.is_dir():
            raise ConfigError(f"ledger: {self.path} is a directory, not a DuckDB file")

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    def _connect(self) -> Any:
        """A connection with the ledger file attached as ``dpngram_ledger`` (and in use), waiting
        up to :data:`BUSY_SECONDS` while another process holds the file. The connection is this
        process's :func:`_session` (an in-memory DuckDB kept between transactions: opening one
        took 15 ms of the 17-20 ms a transaction cost, attaching and detaching the file 1-3 ms),
        or a fresh one when the session is already in a transaction (a nested one)."""
        import duckdb

        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + BUSY_SECONDS
        pause = 0.01
        while True:
            con = _session()
            try:
                # attached under a fixed name: a file called ledger.duckdb would otherwise be a
                # catalog named like the schema ``ledger``, and every ``ledger.x`` ambiguous
                quoted = "'" + str(self.path).replace("'", "''") + "'"
                con.execute(f"ATTACH {quoted} AS dpngram_ledger")
                con.execute("USE dpngram_ledger")
                return con
            except duckdb.IOException as err:
                _release(con)
                first = (str(err).splitlines() or [""])[0]
                if "lock" not in first.lower():
                    raise RuntimeError(f"cannot open the ledger {self.path}: {first}") from None
                if time.monotonic() > deadline:
                    holder = re.search(r"\(PID (\d+)\)", first)
                    raise LedgerBusy(
                        f"ledger {self.path} stayed busy for {BUSY_SECONDS:.0f} s"
                        + (f" (held by process {holder.group(1)})" if holder else "")
                        + "; retry"
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.25)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[LedgerTransaction]:
        import duckdb

        with PROCESS_LOCK:
            con = self._connect()
            try:
                self._migrate(con)
                con.execute("BEGIN TRANSACTION")
                try:
                    yield _DuckDBTransaction(con)
                except duckdb.TransactionException:
                    con.execute("ROLLBACK")
                    raise RetryTransaction() from None
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                try:
                    con.execute("COMMIT")
                except duckdb.TransactionException:
                    raise RetryTransaction() from None
            finally:
                _release(con)

    def _migrate(self, con: Any) -> None:
        key = str(self.path.resolve())
        if key in self._migrated:
            return
        con.execute("CREATE SCHEMA IF NOT EXISTS ledger")
        con.execute(
            "CREATE TABLE IF NOT EXISTS ledger.schema_version "
            "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
        )
        done = {r[0] for r in con.execute("SELECT version FROM ledger.schema_version").fetchall()}
        for version, name, text in migrations():
            if version in done:
                continue
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(text)
                con.execute("INSERT INTO ledger.schema_version VALUES (?, ?, now())", [version, name])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        self._migrated.add(key)

    @contextlib.contextmanager
    def lock(self, name: str, *, wait: float | None = None) -> Iterator[bool]:
        """An exclusive ``flock`` on ``LEDGER.locks/NAME-HASH.lock`` beside the file: released by
        the kernel when the holding process dies."""
        import fcntl

        folder = self.path.with_name(self.path.name + ".locks")
        folder.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]
        path = folder / f"{slug}-{hashlib.sha256(name.encode()).hexdigest()[:12]}.lock"
        with path.open("a+") as fh:
            got = _poll(lambda: _try_flock(fh.fileno()), wait)
            try:
                yield got
            finally:
                if got:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def close(self) -> None:
        """Nothing stays attached between transactions (the process's in-memory session stays)."""


def _try_flock(fd: int) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _poll(attempt: Any, wait: float | None) -> bool:
    """Call ``attempt()`` until it returns True or ``wait`` seconds have passed (None: forever)."""
    deadline = None if wait is None else time.monotonic() + wait
    pause = 0.05
    while True:
        if attempt():
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
        pause = min(pause * 1.5, 1.0)


# ----------------------------------------------------------------------------------------------
# PostgreSQL: one ledger for every worker
# ----------------------------------------------------------------------------------------------
class _PostgresTransaction:
    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    def rows(self, name: str, **params: Any) -> list[tuple]:
        self.cursor.execute(postgres_sql(_statement(name)), params)
        return self.cursor.fetchall()

    def records(self, name: str, **params: Any) -> list[dict[str, Any]]:
        self.cursor.execute(postgres_sql(_statement(name)), params)
        names = [d[0] for d in self.cursor.description]
        return [dict(zip(names, row, strict=True)) for row in self.cursor.fetchall()]

    def execute(self, name: str, **params: Any) -> None:
        self.cursor.execute(postgres_sql(_statement(name)), params)


#: The advisory-lock key of the migrations (any fixed 64-bit number).
_MIGRATION_LOCK = 0x64706E6772616D  # "dpngram"


class PostgresLedgerStore:
    """The ledger in a PostgreSQL database (schema ``ledger``): one connection for transactions,
    opened on first use; each named lock holds a connection of its own."""

    kind = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url
        self.location = describe_location(url)
        self._con: Any = None

    def _connect(self) -> Any:
        try:
            import psycopg2
        except ImportError:
            raise ConfigError(
                "ledger: a PostgreSQL ledger needs the postgres extra (pip install 'dpngram[postgres]')"
            ) from None
        try:
            con = psycopg2.connect(self.url, connect_timeout=10, application_name="dpngram-ledger")
        except psycopg2.OperationalError as err:
            first = (str(err).strip().splitlines() or ["cannot connect"])[0]
            raise LedgerBusy(f"ledger {self.location}: {first}") from None
        with con.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")
        con.commit()
        return con

    def _connection(self) -> Any:
        if self._con is None or self._con.closed:
            self._con = self._connect()
            self._migrate(self._con)
        return self._con

    @contextlib.contextmanager
    def transaction(self) -> Iterator[LedgerTransaction]:
        import psycopg2
        from psycopg2 import errorcodes

        with PROCESS_LOCK:
            con = self._connection()
            try:
                with con.cursor() as cur:
                    yield _PostgresTransaction(cur)
                con.commit()
            except psycopg2.OperationalError as err:
                con.rollback() if not con.closed else None
                if err.pgcode in (errorcodes.SERIALIZATION_FAILURE, errorcodes.DEADLOCK_DETECTED):
                    raise RetryTransaction() from None
                if con.closed:
                    self._con = None
                raise
            except BaseException:
                if not con.closed:
                    con.rollback()
                raise

    def _migrate(self, con: Any) -> None:
        with con.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            cur.execute("CREATE SCHEMA IF NOT EXISTS ledger")
            cur.execute(
                "CREATE TABLE IF NOT EXISTS ledger.schema_version "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMP NOT NULL)"
            )
            cur.execute("SELECT version FROM ledger.schema_version")
            done = {r[0] for r in cur.fetchall()}
            for version, name, text in migrations():
                if version in done:
                    continue
                cur.execute(postgres_sql(text))
                cur.execute("INSERT INTO ledger.schema_version VALUES (%s, %s, now())", (version, name))
        con.commit()

    @contextlib.contextmanager
    def lock(self, name: str, *, wait: float | None = None) -> Iterator[bool]:
        """A session advisory lock keyed by a hash of ``name``, on a connection of its own."""
        con = self._connect()
        key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        try:
            con.autocommit = True

            def attempt() -> bool:
                with con.cursor() as cur:
                    cur.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                    return bool(cur.fetchone()[0])

            got = _poll(attempt, wait)
            yield got
        finally:
            con.close()  # releases the lock with the session

    def close(self) -> None:
        if self._con is not None and not self._con.closed:
            self._con.close()
        self._con = None
