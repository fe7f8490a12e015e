"""Importing the ledger an older dpngram kept inside its warehouse file (``dpngram ledger
--import``): until 2026-12 the privacy ledger was the schema ``ledger`` of the one DuckDB warehouse
file; now it is a store of its own (:mod:`dpngram.release.ledger_store`). Nothing is overwritten
and the import can be repeated.

Owns: :func:`import_legacy`.
Imports: dpngram.release.ledger, dpngram.core; duckdb.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpngram.core.errors import ConfigError
from dpngram.release.ledger import Ledger


def _legacy_rows(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The ledger tables of an older dpngram's warehouse file (read-only), as rows of the columns
    the current statements take; columns an even older ledger lacked get their defaults."""
    import duckdb

    if not path.is_file():
        raise ConfigError(f"ledger import: {path} is not a file")
    try:
        old = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as err:
        first = (str(err).splitlines() or [""])[0]
        raise ConfigError(f"ledger import: cannot open {path} as a DuckDB file ({first})") from None

    def columns(table: str) -> set[str]:
        sql = "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'ledger' AND table_name = ?"
        return {r[0] for r in old.execute(sql, [table]).fetchall()}

    def fetch(sql: str) -> list[dict[str, Any]]:
        cursor = old.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    try:
        if not columns("privacy_spend"):
            raise ConfigError(
                f"ledger import: {path} holds no privacy ledger (no table ledger.privacy_spend)"
            )
        status = "status" if "status" in columns("privacy_spend") else "'final' AS status"
        rows = {
            "spends": fetch(
                "SELECT dataset, run_id, stage, epsilon, delta, events, recorded_at, "
                f"{status} FROM ledger.privacy_spend"
            ),
            "runs": [],
            "budgets": [],
            "identity": [],
        }
        if columns("runs"):
            staging = "staging" if "staging" in columns("runs") else "NULL AS staging"
            rows["runs"] = fetch(
                "SELECT run_id, dataset, fingerprint, reserved_epsilon, reserved_delta, state, "
                f"created_at, {staging}, NULL AS warehouse FROM ledger.runs"
            )
        if columns("lifetime_budget"):
            rows["budgets"] = fetch(
                "SELECT dataset, lifetime_epsilon AS epsilon, lifetime_delta AS delta, updated_at "
                "FROM ledger.lifetime_budget WHERE lifetime_epsilon IS NOT NULL OR lifetime_delta IS NOT NULL"
            )
        if columns("warehouse_identity"):
            rows["identity"] = fetch(
                "SELECT id, secret FROM ledger.warehouse_identity ORDER BY created_at, id LIMIT 1"
            )
        return rows
    finally:
        old.close()


def import_legacy(ledger: Ledger, warehouse_file: Path) -> dict[str, int]:
    """Copy the ledger an older dpngram kept inside its warehouse file (schema ``ledger`` of
    ``warehouse_file``) into ``ledger``: every charge and run it does not hold yet, each lifetime
    limit where it has none (a limit it holds is kept: limits change only with ``dpngram
    budget``), and the old ledger's identity when it has none yet (so the staging directories of
    unfinished runs stay resumable). Idempotent. Returns how many rows of each kind were added."""
    old = _legacy_rows(Path(warehouse_file))

    def body() -> dict[str, int]:
        before = _ledger_sizes(ledger)
        for row in old["spends"]:
            ledger.execute("ledger/import_spend", **row)
        for row in old["runs"]:
            ledger.execute("ledger/import_run", **row)
        for row in old["budgets"]:
            ledger.execute("ledger/import_lifetime", **row)
        added = {name: _ledger_sizes(ledger)[name] - before[name] for name in before}
        added["identity"] = 0
        if old["identity"] and ledger.identity(create=False) is None:
            ledger.execute("ledger/identity_init", **old["identity"][0])
            added["identity"] = 1
        return added

    return ledger.in_transaction(body)


def _ledger_sizes(ledger: Ledger) -> dict[str, int]:
    """How many charges, runs and lifetime limits the ledger holds (inside its transaction)."""
    datasets = ledger.datasets()
    return {
        "charges": len(ledger.export()),
        "runs": sum(len(ledger.runs_of(d)) for d in datasets),
        "lifetime_budgets": sum(1 for d in datasets if ledger.lifetime(d) != (None, None)),
    }
