"""The ``dpngram`` argument parser: the sub-commands, their flags and help.

The global flags (--debug, --verbose) are accepted before or after the sub-command.

Owns: :func:`build_parser` and one ``_add_*_command`` per sub-command.
Imports: dpngram.cli (commands, flags), dpngram.audit, dpngram.demo, dpngram.config.
"""

from __future__ import annotations

import argparse
from typing import Any

from dpngram.cli import commands
from dpngram.cli.commands import PROG
from dpngram.cli.flags import add_config_flags
from dpngram.config import RunConfig
from dpngram.demo import DEMO_USERS


def _global_flags(default: Any) -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument(
        "--debug", action="store_true", default=default, help="show tracebacks of unexpected errors"
    )
    flags.add_argument(
        "--verbose", "-v", action="store_true", default=default, help="log stage progress (INFO)"
    )
    return flags


def build_parser() -> argparse.ArgumentParser:
    """The global flags (--debug, --verbose) are accepted before or after the sub-command: the
    sub-commands' copies default to SUPPRESS, so they never overwrite one given before."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        parents=[_global_flags(False)],
        description="Differentially private n-grams from private user text (user-level DP).",
    )
    common = _global_flags(argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_sample_command(sub, common)
    _add_release_commands(sub, common)
    _add_ledger_command(sub, common)
    _add_budget_command(sub, common)
    _add_gc_command(sub, common)
    _add_audit_command(sub, common)
    _add_evaluate_command(sub, common)
    _add_demo_command(sub, common)
    return parser


_Subparsers = argparse._SubParsersAction  # the type of ArgumentParser.add_subparsers()


def _add_sample_command(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``dpngram sample``: write a synthetic sample corpus."""
    p = sub.add_parser("sample", parents=[common], help="write a synthetic sample corpus")
    p.add_argument(
        "--out", required=True, metavar="DIR", help="directory for users.jsonl.gz and public.txt.gz"
    )
    p.add_argument("--users", type=int, default=2000, metavar="N", help="number of users (default: 2000)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="seed (same seed, same files)")
    p.set_defaults(func=commands.cmd_sample)


def _add_release_commands(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """The commands that read the private corpus: ``ingest``, ``run`` and ``baseline``."""
    p = sub.add_parser("ingest", parents=[common], help="ingest only and print the operator summary")
    add_config_flags(p, optional=("out",))
    _ledger_flag(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=commands.cmd_ingest)

    p = sub.add_parser("run", parents=[common], help="run a whole release in this process")
    add_config_flags(p)
    _ledger_flag(p)
    p.add_argument("--json", action="store_true", help="print the final summary as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=commands.cmd_run)

    p = sub.add_parser("baseline", parents=[common], help="release with a DPSU baseline instead of DPNE")
    p.add_argument(
        "--method",
        required=True,
        choices=["dpsu-all", "dpsu-even", "dpsu-single"],
        help="DPNE §3.1.2 baseline",
    )
    p.add_argument("--k", type=int, default=None, metavar="K", help="the single length for dpsu-single")
    add_config_flags(p)
    _ledger_flag(p)
    p.add_argument("--json", action="store_true", help="print the final summary as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=commands.cmd_baseline)


def _ledger_flag(p: argparse.ArgumentParser) -> None:
    """``--ledger URL``: the privacy ledger this command uses (:func:`dpngram.cli.main.main` puts
    it in ``DPNGRAM_LEDGER`` for the process)."""
    p.add_argument(
        "--ledger",
        default=None,
        metavar="URL",
        help="privacy ledger: postgresql://USER:PASSWORD@HOST:PORT/DB, or the path of an embedded DuckDB "
        "file (default: DPNGRAM_LEDGER, else ~/.local/share/dpngram/ledger.duckdb)",
    )


def _add_ledger_command(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``dpngram ledger``: the privacy spend history of a dataset, its forecast, the auditor's
    export and the import of an older ledger."""
    p = sub.add_parser(
        "ledger", parents=[common], help="privacy spend history of a dataset; export; import an older ledger"
    )
    p.add_argument(
        "--dataset",
        default=None,
        metavar="NAME",
        help="the dataset (default: 'default'; with --export: every dataset)",
    )
    _ledger_flag(p)
    p.add_argument("--json", action="store_true", help="print the history as JSON")
    p.add_argument(
        "--schedule",
        default=None,
        metavar="CRON",
        help="refresh schedule (cron or @weekly ...; default: DPNGRAM_SCHEDULE) for the date it would stop",
    )
    p.add_argument(
        "--export",
        choices=["csv", "json"],
        default=None,
        help="write every charge (of --dataset, else of every dataset) to stdout, for an auditor",
    )
    p.add_argument(
        "--import",
        dest="import_path",
        default=None,
        metavar="WAREHOUSE_FILE",
        help="copy the ledger an older dpngram kept in its warehouse file into this ledger",
    )
    p.set_defaults(func=commands.cmd_ledger)


def _add_budget_command(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``dpngram budget``: show or deliberately change a dataset's lifetime budget."""
    p = sub.add_parser(
        "budget",
        parents=[common],
        help="show or change a dataset's lifetime budget (stored in the ledger)",
    )
    p.add_argument("--dataset", default=RunConfig.model_fields["dataset"].default, metavar="NAME")
    _ledger_flag(p)
    p.add_argument("--lifetime-epsilon", type=float, default=None, metavar="E", help="new lifetime epsilon")
    p.add_argument("--lifetime-delta", type=float, default=None, metavar="D", help="new lifetime delta")
    p.set_defaults(func=commands.cmd_budget)


def _add_gc_command(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``dpngram gc``: list (or delete) staging directories of runs that never published."""
    p = sub.add_parser(
        "gc",
        parents=[common],
        help="list unpublished runs (open reservations, staging directories); --delete releases them",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="also list staging directories under DIR/DATASET/runs (every dataset) the ledger does not know",
    )
    p.add_argument(
        "--warehouse",
        default=None,
        metavar="DIR",
        help="this machine's warehouse directory (default: DPNGRAM_WAREHOUSE, else "
        "~/.local/share/dpngram/warehouse)",
    )
    _ledger_flag(p)
    p.add_argument(
        "--older-than",
        type=float,
        default=24.0,
        metavar="HOURS",
        help="only runs untouched for this long (default: 24)",
    )
    p.add_argument("--run-id", default=None, metavar="ID", help="only this run, whatever its age")
    p.add_argument(
        "--delete",
        action="store_true",
        help="delete them, drop their private tables and release their budget reservation "
        "(their ledger charges stay; they can no longer be resumed)",
    )
    p.set_defaults(func=commands.cmd_gc)


def _add_audit_command(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``dpngram audit``: empirical lower bounds on ε (src/dpngram/audit.py)."""
    from dpngram.audit import ALPHA, AUDITS

    p = sub.add_parser(
        "audit",
        parents=[common],
        help="empirical privacy audit: a lower bound on epsilon per mechanism from canary runs",
    )
    p.add_argument(
        "--mechanism", action="append", choices=list(AUDITS), default=None, help="repeatable (default: all)"
    )
    p.add_argument(
        "--runs", type=int, default=None, metavar="N", help="runs per dataset (default: per mechanism)"
    )
    p.add_argument("--fast", action="store_true", help="the fast variant (about a minute in all)")
    p.add_argument(
        "--alpha", type=float, default=ALPHA, metavar="A", help=f"1 - confidence (default {ALPHA})"
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=commands.cmd_audit)


def _add_evaluate_command(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``dpngram evaluate``: metrics of a KenLM model on a text file."""
    p = sub.add_parser(
        "evaluate",
        parents=[common],
        help="perplexities and next-word accuracy of a KenLM model on a text file",
    )
    p.add_argument("--model", required=True, metavar="PATH", help="model.binary or model.arpa")
    p.add_argument("--text", required=True, metavar="FILE", help="plain text (.gz accepted)")
    p.add_argument("--keep-case", action="store_true", help="do not lower-case (a run with lowercase=False)")
    p.add_argument(
        "--arpa",
        default=None,
        metavar="PATH",
        help="ARPA file of the model, for top-k accuracy (default: the model if ARPA, else X.arpa beside)",
    )
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.set_defaults(func=commands.cmd_evaluate)


def _add_demo_command(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``dpngram demo``: the sample corpus and the Airflow DAG."""
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="sample corpus + the Airflow DAG via `airflow dags test` (idempotent set-up)",
    )
    p.add_argument(
        "--users",
        type=int,
        default=DEMO_USERS,
        metavar="N",
        help=f"users in the sample (default: {DEMO_USERS})",
    )
    p.add_argument(
        "--max-n", type=int, default=None, metavar="T", help="longest n-gram (default: RunConfig's)"
    )
    p.add_argument("--epsilon", type=float, default=None, metavar="E", help="epsilon (default: RunConfig's)")
    p.add_argument("--fresh-sample", action="store_true", help="rewrite the sample corpus even if present")
    p.set_defaults(func=commands.cmd_demo)
