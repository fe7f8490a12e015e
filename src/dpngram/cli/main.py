"""The entry point of the ``dpngram`` console script: parse, run the sub-command, and turn every
error into one line and an exit code.

Errors: a bad parameter, unreadable input, exhausted budget or refused resume (the user errors of
:data:`dpngram.core.errors.USER_ERRORS`) prints one line ``dpngram: error: ...`` and exits 2; a
failed validation prints its failure lines and exits 1; a warehouse locked by another process
prints one line and exits 1; a stage out of memory or disk space prints one line saying whether it
was charged and the command to run next (the same --run-id with a larger --memory-limit when
nothing was charged) and exits 1; anything unexpected prints one line and exits 1 (``--debug``, before
or after the sub-command, shows the traceback).

Owns: :func:`main`, the one-line error messages and their exit codes.
Imports: dpngram.cli (commands, parser), dpngram.engines.base, dpngram.core.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from dpngram.cli.commands import EXIT_FAILED, EXIT_USAGE, PROG
from dpngram.cli.parser import build_parser
from dpngram.core.errors import USER_ERRORS, LedgerBusy, ResourceExhausted, ValidationFailed, WarehouseBusy
from dpngram.engines.base import is_remote_path


def _error(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")


def _with_notes(message: str, err: BaseException) -> str:
    """The error's one line with its notes appended (e.g. what a failed run left reserved, and the
    command that resumes or releases it: :func:`dpngram.orchestration.plan.after_failure`)."""
    notes = [" ".join(str(n).split()) for n in getattr(err, "__notes__", [])]
    return "; ".join([message, *notes])


def _one_line(err: BaseException) -> str:
    """A one-line description of an unexpected error. Database errors can quote values from the
    data they failed on, so their message is withheld (it is shown with --debug)."""
    name = type(err).__name__
    module = type(err).__module__ or ""
    if module.split(".")[0] in ("duckdb", "_duckdb", "pyarrow", "polars"):
        return f"unexpected {name} (message withheld: it may quote private data)"
    first = (str(err).strip().splitlines() or [""])[0][:300]
    return f"unexpected {name}: {first}" if first else f"unexpected {name}"


#: A negative number as an option's value (``--epsilon -1e-7``). argparse takes ``-1e-7`` for an
#: option (its own pattern misses exponents), so such values are joined to their flag first.
_NEGATIVE_NUMBER = re.compile(r"^-(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$|^-(?:inf|infinity|nan)$", re.I)


def _join_negative_values(argv: Sequence[str]) -> list[str]:
    """``--flag -1e-7`` -> ``--flag=-1e-7``, so a negative value reaches the parameter's validation
    (which refuses it by name) instead of argparse's "expected one argument"."""
    out: list[str] = []
    for token in argv:
        if (
            out
            and _NEGATIVE_NUMBER.match(token)
            and out[-1].startswith("--")
            and "=" not in out[-1]
            and len(out[-1]) > 2
        ):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


_OS_HINTS = {
    errno.ENOTDIR: "a part of the path is a file, not a directory: remove it or choose another path",
    errno.EEXIST: "a file is in the way where a directory is needed: remove it or choose another path",
    errno.EISDIR: "it is a directory where a file is needed: choose another path",
    errno.EACCES: "permission denied: make it writable for this user or choose another path",
    errno.EPERM: "operation not permitted: make it writable for this user or choose another path",
    errno.EROFS: "the file system is read-only: choose a writable path",
    errno.ENOSPC: "the disk is full: free space, then run the command again",
    errno.EDQUOT: "the disk quota is exhausted: free space, then run the command again",
}


def _os_error_line(err: OSError, args: argparse.Namespace) -> str:
    """One line for a filesystem failure: the path, what is wrong, which flag it belongs to and
    what to do. Paths are the operator's own (flags and the layout under them), never data."""
    path = err.filename if err.filename is not None else None
    what = err.strerror or type(err).__name__
    hint = _OS_HINTS.get(err.errno or -1, "check the path and its permissions")
    flag = ""
    if path is not None:
        resolved = Path(str(path)).absolute()
        for name in ("out", "warehouse", "input", "public"):
            value = getattr(args, name, None)
            if not value or is_remote_path(str(value)):
                continue
            base = Path(str(value)).absolute()
            if resolved == base or base in resolved.parents or resolved in base.parents:
                flag = f" (--{name} {value})"
                break
    where = f"cannot use {path}{flag}" if path is not None else "a filesystem operation failed"
    return f"{where}: {what}; {hint}"


@contextlib.contextmanager
def _ledger_for_this_command(location: str | None) -> Iterator[None]:
    """``--ledger URL``: the ledger every part of this command uses (``DPNGRAM_LEDGER`` while it
    runs; the previous value is restored, for callers that run several commands in one process)."""
    from dpngram.release.ledger_store import LEDGER_ENV

    if not location:
        yield
        return
    previous = os.environ.get(LEDGER_ENV)
    os.environ[LEDGER_ENV] = location
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(LEDGER_ENV, None)
        else:
            os.environ[LEDGER_ENV] = previous


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpngram`` console script; returns the process exit code."""
    parser = build_parser()
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(_join_negative_values(raw_argv))
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    func: Callable[[argparse.Namespace], int] = args.func
    args.argv = raw_argv  # to print a resume command
    try:
        with _ledger_for_this_command(getattr(args, "ledger", None)):
            return func(args)
    except ValidationFailed as err:
        if args.debug:
            raise
        _error("\n".join([str(err), *(f"  {n}" for n in getattr(err, "__notes__", []))]))
        return EXIT_FAILED
    except USER_ERRORS as err:
        if args.debug:
            raise
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if (
            isinstance(err, FileNotFoundError)
            and err.filename
            and not message.startswith(("input", "public"))
        ):
            message = f"{err.strerror or 'not found'}: {err.filename}"
        _error(_with_notes(message, err))
        return EXIT_USAGE
    except (WarehouseBusy, LedgerBusy) as err:
        if args.debug:
            raise
        _error(_with_notes(str(err), err))
        return EXIT_FAILED
    except ResourceExhausted as err:
        if args.debug:
            raise
        hint = "; ".join(getattr(err, "__notes__", []))
        _error(f"{err}, {hint}" if hint else str(err))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _error("interrupted; nothing was published")
        return 130
    except OSError as err:  # a filesystem failure: say which path, which flag, and what to do
        if args.debug:
            raise
        notes = "; ".join(getattr(err, "__notes__", []))
        line = _os_error_line(err, args)
        _error(f"{line}; {notes}" if notes else line)
        return EXIT_FAILED
    except Exception as err:  # noqa: BLE001 - the CLI's last line of defence
        if args.debug:
            raise
        _error(_with_notes(f"{_one_line(err)}; run with --debug for the traceback", err))
        return EXIT_FAILED
