"""``make bench``: every ``benchmarks/*_bench.py`` with no arguments, plus ``make test-platform``,
resumable.

The whole suite takes hours on two cores (``results/bench_run.json`` records each step's seconds),
so a run that stops part-way (a closed terminal, a reboot, Ctrl-C) does not start over: the next
``make bench`` on the same commit skips the steps that already passed and runs the rest. The
progress lives in ``benchmarks/.data/bench_progress.json`` (gitignored); each step's output also
goes to ``benchmarks/.data/bench_logs/STEP.log``.

A run resumes only when the code that the benchmarks run (``src/``, ``sql/``, ``benchmarks/`` except
``results/``) is the code the progress was recorded on (the same commit, or a later one that changed
only other files, such as the results themselves) and has no uncommitted change; otherwise it starts
over and says why. ``--resume-from RECORD`` resumes from a ``bench_run.json`` record instead of the
local progress, on the same condition: a run spread over machines (a session's machine is not the
next one's) goes on from the record committed last. ``--restart`` starts over anyway; ``--only STEP ...`` runs
the named steps whatever their state; ``--list`` prints the steps, their state and their last
duration without running anything.

Every step runs even if an earlier one fails; the failures are listed at the end and the exit
status is 1. ``results/bench_run.json`` (written after every step) records the commit, the
machine, each step's status, seconds and finishing time, and how many invocations the run took.

Usage: ``python benchmarks/run_all.py [--platform-command CMD] [--restart | --only STEP ... | --list]
[--resume-from RECORD]``
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import DATA, RESULTS, ROOT, machine, now

BENCHMARKS = ROOT / "benchmarks"
PROGRESS = DATA / "bench_progress.json"
LOGS = DATA / "bench_logs"
RECORD = RESULTS / "bench_run.json"
PLATFORM_STEP = "test-platform"

#: What ``make test-platform`` runs; the Makefile passes its own command with --platform-command.
DEFAULT_PLATFORM_COMMAND = (
    "bash scripts/system_deps.sh && .venv/bin/python -m pytest -m platform -s --timeout 1500 "
    "tests/test_platform.py"
)

#: Paths whose uncommitted changes make a recorded progress unusable (the code the steps run).
CODE_PATHS = ("src", "sql", "benchmarks", ":(exclude)benchmarks/results")


#: Signals that stop a step rather than fail it: Ctrl-C, ``kill``, a closed terminal. A step that
#: ends by one of them is recorded as interrupted (the next run starts with it), not as failed.
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


#: Seconds a stopped step gets for its clean-ups before the rest of its process group is killed.
STOP_GRACE = 120


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@dataclass(frozen=True)
class Step:
    name: str
    command: list[str]


def bench_steps(platform_command: str) -> list[Step]:
    """The platform test, then every ``benchmarks/*_bench.py`` in name order, each with no arguments;
    a script that declares ``BENCH_STEPS`` (the scenarios its no-argument run runs, in order) is one
    step per scenario instead, named ``SCRIPT:SCENARIO`` and run as ``SCRIPT SCENARIO``."""
    steps = [Step(PLATFORM_STEP, ["bash", "-c", platform_command])]
    for script in sorted(BENCHMARKS.glob("*_bench.py")):
        command = [sys.executable, str(script.relative_to(ROOT))]
        scenarios = declared_scenarios(script)
        if not scenarios:
            steps.append(Step(script.name, command))
        steps.extend(Step(f"{script.name}:{name}", [*command, name]) for name in scenarios)
    return steps


def declared_scenarios(script: Path) -> tuple[str, ...]:
    """The script's module-level ``BENCH_STEPS`` tuple of scenario names, read without importing the
    script (its imports are heavy); () when it declares none."""
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "BENCH_STEPS" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            if not (isinstance(value, tuple) and all(isinstance(v, str) for v in value)):
                raise ValueError(f"{script.name}: BENCH_STEPS must be a tuple of scenario names")
            return value
    return ()


def code_identity() -> tuple[str | None, bool]:
    """(HEAD, whether the code the benchmarks run has uncommitted changes); (None, True) outside git."""
    try:
        head = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--", *CODE_PATHS))
    except (OSError, subprocess.CalledProcessError):
        return None, True
    return head, dirty


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def load_progress(
    head: str | None, dirty: bool, restart: bool, resume_from: Path | None = None
) -> tuple[dict[str, Any], str | None]:
    """The recorded progress to resume, or a fresh one with the reason it is fresh (None: resumed, or
    nothing to resume). The progress is this checkout's own, or with ``resume_from`` the steps of a
    ``bench_run.json`` record (one copied from another machine, say). It resumes when it was
    recorded on HEAD, or on a commit whose benchmarked code (:data:`CODE_PATHS`) is HEAD's."""
    fresh = {"commit": head, "started": now(), "invocations": 0, "steps": {}}
    source = resume_from or PROGRESS
    if not source.is_file():
        return fresh, (f"{resume_from} does not exist" if resume_from else None)
    try:
        old = json.loads(source.read_text(encoding="utf-8"))
        if resume_from is not None:
            old = progress_from_record(old)
    except (OSError, ValueError, KeyError, TypeError):
        return fresh, f"{source} is unreadable"
    if restart:
        return fresh, "--restart"
    if dirty or head is None:
        return fresh, "the benchmarked code (src/, sql/, benchmarks/) has uncommitted changes"
    recorded = str(old.get("commit"))
    if recorded != head and not same_code(recorded, head):
        return fresh, (
            f"the progress was recorded on {recorded[:10]}, HEAD is {head[:10]}, "
            "and the benchmarked code differs"
        )
    return old, None


def progress_from_record(record: dict[str, Any]) -> dict[str, Any]:
    """The progress a ``results/bench_run.json`` record describes (its steps that ran)."""
    keys = ("status", "seconds", "finished", "invocation")
    return {
        "commit": record["git_commit"],
        "started": record["started"],
        "invocations": record["invocations"],
        "steps": {
            row["name"]: {k: row[k] for k in keys if row.get(k) is not None}
            for row in record["steps"]
            if row.get("status", "not run") != "not run"
        },
    }


def same_code(commit: str, head: str) -> bool:
    """Whether ``commit`` and ``head`` hold the same benchmarked code (False for an unknown commit)."""
    diff = subprocess.run(
        ["git", "-C", str(ROOT), "diff", "--quiet", commit, head, "--", *CODE_PATHS],
        capture_output=True,
    )
    return diff.returncode == 0


def save_progress(progress: dict[str, Any]) -> None:
    PROGRESS.parent.mkdir(parents=True, exist_ok=True)
    tmp = PROGRESS.with_suffix(".tmp")
    tmp.write_text(json.dumps(progress, indent=2) + "\n", encoding="utf-8")
    tmp.replace(PROGRESS)


def last_durations() -> dict[str, float]:
    """Each step's seconds in the committed ``results/bench_run.json`` (for the time-left estimate)."""
    try:
        record = json.loads(RECORD.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {s["name"]: s["seconds"] for s in record.get("steps", []) if s.get("seconds") is not None}


def minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def run_step(step: Step, log: Path) -> tuple[int, float]:
    """Run one step from the repository root, its output to the terminal and to ``log``; (exit status,
    seconds). The step runs in a process group of its own; Ctrl-C (or a stop signal to the runner)
    sends SIGINT to that whole group, so that pytest and the benchmarks run their clean-ups (the
    platform test stops its PostgreSQL, Redis, S3 server and Airflow services), waits up to
    :data:`STOP_GRACE` seconds, kills what is left, and propagates."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        out.write(f"$ {shlex.join(step.command)}\n")
        proc = subprocess.Popen(
            step.command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                out.write(line)
            code = proc.wait()
        except KeyboardInterrupt:
            _stop_group(proc)
            raise
    return code, time.monotonic() - start


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGINT to the step's process group (clean-ups run), then SIGKILL to what is left after
    :data:`STOP_GRACE` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def write_record(progress: dict[str, Any], steps: list[Step]) -> None:
    """``results/bench_run.json``: the run as far as it got, every step in order."""
    rows = []
    for step in steps:
        state = progress["steps"].get(step.name, {})
        rows.append(
            {
                "name": step.name,
                "status": state.get("status", "not run"),
                "seconds": state.get("seconds"),
                "finished": state.get("finished"),
                "invocation": state.get("invocation"),
            }
        )
    passed = [r for r in rows if r["status"] == "passed"]
    payload = {
        "benchmark": "make bench (benchmarks/run_all.py)",
        "date": now(),
        "git_commit": progress["commit"],
        "started": progress["started"],
        "invocations": progress["invocations"],
        "complete": len(passed) == len(rows),
        "steps_passed": len(passed),
        "steps": rows,
        "total_seconds": round(sum(r["seconds"] or 0 for r in rows), 1),
        "machine": machine(),
        "note": "each step with no arguments, as `make bench` runs it; the steps of one run may span "
        "several invocations on the same commit (resumed), so machine.load_average is the last one's",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def print_list(steps: list[Step], progress: dict[str, Any], previous: dict[str, float]) -> None:
    for step in steps:
        state = progress["steps"].get(step.name, {})
        status = state.get("status", "to run")
        took = state.get("seconds", previous.get(step.name))
        print(f"  {step.name:<32} {status:<12} {minutes(took) if took is not None else '-'}")


def _time_left(remaining: list[Step], previous: dict[str, float]) -> str:
    """The progress line's estimate from the last recorded run: the time left when every remaining
    step was timed there, else what the timed ones took (an estimate that counts an untimed step as
    0 s would mislead)."""
    timed = [previous[s.name] for s in remaining if s.name in previous]
    if not timed:
        return ""
    if len(timed) == len(remaining):
        return f"; about {minutes(sum(timed))} left by the last recorded run"
    took = minutes(sum(timed))
    return f"; {len(timed)} of the {len(remaining)} steps left took {took} in the last recorded run"


def run_steps(
    todo: list[Step], steps: list[Step], progress: dict[str, Any], previous: dict[str, float]
) -> str:
    """Run ``todo`` in order, saving the progress and the record after each step; "interrupted" when
    Ctrl-C, or a stop signal to the runner or the step, stopped a step (the step is recorded as
    such, and the next run starts with it), else "done"."""
    for i, step in enumerate(todo, start=1):
        hint = _time_left(todo[i - 1 :], previous)
        print(f"\n== [{i}/{len(todo)}] {step.name} ({shlex.join(step.command)}){hint}", flush=True)
        try:
            code, seconds = run_step(step, LOGS / f"{step.name}.log")
            if -code in STOP_SIGNALS:  # the step was stopped, e.g. with the runner ignoring SIGINT
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            progress["steps"][step.name] = {
                "status": "interrupted",
                "finished": now(),
                "invocation": progress["invocations"],
            }
            save_progress(progress)
            write_record(progress, steps)
            print(f"\nmake bench: interrupted in {step.name}; `make bench` resumes here", file=sys.stderr)
            return "interrupted"
        progress["steps"][step.name] = {
            "status": "passed" if code == 0 else f"failed ({code})",
            "seconds": round(seconds, 1),
            "finished": now(),
            "invocation": progress["invocations"],
        }
        save_progress(progress)
        write_record(progress, steps)
        print(
            f"== {step.name}: {'passed' if code == 0 else f'FAILED (exit {code})'} in {minutes(seconds)}",
            flush=True,
        )
    return "done"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--platform-command", default=DEFAULT_PLATFORM_COMMAND, help="the test-platform step's shell command"
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--restart", action="store_true", help="start over, whatever was recorded")
    group.add_argument(
        "--only", nargs="+", metavar="STEP", help="run these steps (names as --list prints them)"
    )
    group.add_argument("--list", action="store_true", help="print the steps and their state, run nothing")
    parser.add_argument(
        "--resume-from",
        type=Path,
        metavar="RECORD",
        help="resume the run a bench_run.json record describes (e.g. one committed from another "
        "machine), if its benchmarked code is HEAD's",
    )
    args = parser.parse_args(argv)

    steps = bench_steps(args.platform_command)
    head, dirty = code_identity()
    progress, reason = load_progress(head, dirty, args.restart, args.resume_from)
    previous = last_durations()
    if args.list:
        print(f"make bench at {str(head)[:10]}{' (uncommitted changes)' if dirty else ''}:")
        print_list(steps, progress, previous)
        return 0
    names = {s.name for s in steps}
    if args.only:
        unknown = sorted(set(args.only) - names)
        if unknown:
            parser.error(f"no step named {', '.join(unknown)}; the steps: {', '.join(sorted(names))}")
        todo = [s for s in steps if s.name in args.only]
    else:
        todo = [s for s in steps if progress["steps"].get(s.name, {}).get("status") != "passed"]
    if reason:
        print(f"make bench: starting over ({reason})")
    elif progress["steps"] and not args.only:
        print(
            f"make bench: resuming at {str(head)[:10]}: "
            f"{len(steps) - len(todo)} of {len(steps)} steps passed already"
        )
    progress["invocations"] += 1
    save_progress(progress)
    # Ctrl-C, kill and a closed terminal stop the run the same way, also when it was started in the
    # background, where SIGINT is ignored (and the steps, which inherit that, would ignore it too)
    before = {stop: signal.signal(stop, _stop) for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        outcome = run_steps(todo, steps, progress, previous)
    finally:
        for stop, handler in before.items():
            signal.signal(stop, handler)
    if outcome == "interrupted":
        return 130
    failed = [
        s.name for s in steps if progress["steps"].get(s.name, {}).get("status", "").startswith("failed")
    ]
    print(f"\nmake bench at {str(head)[:10]}:")
    print_list(steps, progress, previous)
    print(f"record: {RECORD.relative_to(ROOT)}; logs: {LOGS.relative_to(ROOT)}/")
    if failed:
        print(
            f"failed benchmarks: {' '.join(failed)} (their logs above; `make bench` re-runs only them)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
