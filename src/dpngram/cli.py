"""``dpngram`` command line: run a release (or one part of it) in-process, with progress and a summary.

Sub-commands::

    dpngram sample   --out DIR [--users N] [--seed S]        synthetic corpus for trying things out
    dpngram ingest   --input PATH [...]                      ingest only; operator summary (console)
    dpngram run      --input PATH --out DIR [...]            privacy_precheck, the steps of the plan
                                                             (ingest, dpne.k1..kT, dpne.kgrams, ...,
                                                             validation, lm, report), publish
    dpngram baseline --method dpsu-all|dpsu-even|dpsu-single [--k K] --input PATH --out DIR [...]
    dpngram ledger   --dataset NAME [--warehouse PATH]       privacy spend history of a dataset
    dpngram budget   --dataset NAME [--lifetime-epsilon E]   show or change the dataset's lifetime budget
    dpngram gc       [--out DIR] [--run-id ID] [--delete]   open reservations of failed runs
    dpngram audit    [--mechanism NAME] [--fast] [--json]    empirical lower bound on epsilon per mechanism
    dpngram demo                                             sample corpus + Airflow `dags test` run
    dpngram evaluate --model PATH --text FILE [--arpa PATH] [--json]   open-vocab perplexity, top-k, OOV rate

Every :class:`dpngram.config.RunConfig` field is a flag of ``run``/``baseline``/``ingest``
(generated from :func:`dpngram.config.flat_fields`, so flags never drift from the configuration). ``run``
and ``baseline`` run the steps of :mod:`dpngram.orchestration.plan` in this process
(:func:`~dpngram.orchestration.plan.run_release`), the same steps the Airflow DAG runs as tasks.

Errors: a bad parameter, unreadable input, exhausted budget or refused resume (the user errors of
:data:`dpngram.core.errors.USER_ERRORS`) prints one line ``dpngram: error: ...`` and exits 2; a
failed validation prints its failure lines and exits 1; a warehouse locked by another process
prints one line and exits 1; a stage out of memory or disk space prints one line saying whether it
was charged and the command to run next (the same --run-id with a larger --memory-limit when
nothing was charged) and exits 1; anything unexpected prints one line and exits 1 (``--debug``, before
or after the sub-command, shows the traceback). ``run`` prints the quarantine summary (exact
counts per reason: operator console only). Raw input text is never printed; exact input statistics
appear only in ``dpngram ingest``'s operator summary on this console (never in a released file or
log).

Owns: the ``dpngram`` command: argument parsing, flags generated from the configuration, console
progress and summaries, exit codes.
Imports: every layer below (dpngram.demo, dpngram.orchestration, dpngram.stages, dpngram.lm,
dpngram.release, dpngram.engines, dpngram.text, dpngram.config, dpngram.core); rich.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import re
import shlex
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from dpngram.config import SECTIONS, RunConfig, flat_fields
from dpngram.core.errors import (
    USER_ERRORS,
    ConfigError,
    IngestError,
    ResourceExhausted,
    ValidationFailed,
    WarehouseBusy,
)
from dpngram.demo import DEMO_USERS
from dpngram.engines.base import is_remote_path

PROG = "dpngram"


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


#: Short metavars for the paper's symbols.
_METAVARS = {
    "epsilon": "E",
    "delta": "D",
    "max_n": "T",
    "max_contribution": "D0",
    "eta": "ETA",
    "sigma_decay": "C",
    "input": "PATH",
    "out": "DIR",
    "public": "PATH",
    "warehouse": "PATH",
    "dataset": "NAME",
    "run_id": "ID",
    "memory_limit": "SIZE",
    "threads": "N",
    "lifetime_epsilon": "E",
    "lifetime_delta": "D",
    "stage_budget": "STAGE=F,...",
    "exact_max_valid": "N",
    "user_field": "NAME",
    "text_field": "NAME",
}


# ----------------------------------------------------------------------------------------------
# RunConfig -> argparse flags
# ----------------------------------------------------------------------------------------------
def _parse_budget(value: str) -> dict[str, float]:
    """``dpne=0.6,bayes=0.4`` or a JSON object -> {stage: fraction}. A stage named twice is
    refused (``dpne=1,dpne=1`` would otherwise silently keep the last share)."""
    value = value.strip()

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, item in pairs:
            if key in seen:
                raise argparse.ArgumentTypeError(f"stage {key!r} is given twice; give each stage once")
            seen[key] = item
        return seen

    if value.startswith("{"):
        try:
            parsed = json.loads(value, object_pairs_hook=unique)
        except json.JSONDecodeError:
            raise argparse.ArgumentTypeError("expected STAGE=FRACTION,... or a JSON object") from None
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError("expected a JSON object")
        try:
            return {str(k): float(v) for k, v in parsed.items()}
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError("expected numbers as the fractions") from None
    pairs: list[tuple[str, Any]] = []
    for item in filter(None, (p.strip() for p in value.split(","))):
        stage, sep, fraction = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected STAGE=FRACTION (got {item!r})")
        try:
            pairs.append((stage.strip(), float(fraction)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected STAGE=FRACTION (got {item!r})") from None
    return unique(pairs)


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def add_config_flags(
    parser: argparse.ArgumentParser, *, optional: Sequence[str] = (), skip: Sequence[str] = ()
) -> None:
    """One flag per RunConfig parameter by its flat name (``max_n`` -> ``--max-n``,
    ``bayes.clip_count`` -> ``--bayes-clip-count``), grouped by section in ``--help``; defaults
    stay RunConfig's. Fields RunConfig requires are required flags unless listed in ``optional``."""
    groups: dict[str | None, argparse._ArgumentGroup] = {}
    for name, section, _, field in flat_fields():
        if name in skip:
            continue
        if section not in groups:
            title = "Data and privacy" if section is None else SECTIONS[section].TITLE
            groups[section] = parser.add_argument_group(title)
        group = groups[section]
        annotation = _unwrap_optional(field.annotation)
        flag = "--" + name.replace("_", "-")
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        help_text = f"{field.title or name}: {field.description or ''}".rstrip(": ")
        if default is not None:
            help_text += f" (default: {default})"
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": help_text.replace("%", "%%")}
        if annotation is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["metavar"] = _METAVARS.get(name, name.upper())
            if get_origin(annotation) is Literal:
                kwargs["choices"] = list(get_args(annotation))
                kwargs.pop("metavar")
            elif get_origin(annotation) is dict:
                kwargs["type"] = _parse_budget
            elif annotation in (int, float):
                kwargs["type"] = annotation
            if field.is_required() and name not in optional:
                kwargs["required"] = True
        group.add_argument(flag, **kwargs)


def config_from_args(args: argparse.Namespace, **overrides: Any) -> RunConfig:
    values = {name: getattr(args, name, None) for name, *_ in flat_fields()}
    values.update(overrides)
    return RunConfig.build(**values)


# ----------------------------------------------------------------------------------------------
# Output helpers
# ----------------------------------------------------------------------------------------------
def format_epsilon(value: float) -> str:
    """ε for a table: four decimals, or scientific notation where four decimals would show a
    non-zero spend as 0.0000 (below 5e-5), e.g. ``1.000e-06``."""
    if value != 0 and abs(value) < 5e-5:
        return f"{value:.3e}"
    return f"{value:.4f}"


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _check_input(config: RunConfig) -> None:
    """Local inputs must exist; a Hadoop-style URI (``hdfs://``, ``s3a://``) is read by Spark
    itself, so it is accepted only with ``--engine spark`` (and checked when Spark opens it)."""
    if is_remote_path(config.input):
        if config.engine.name != "spark":
            raise ConfigError(
                f"input: {config.input} is a Hadoop-style URI; only the Spark engine reads those "
                "(--engine spark)"
            )
    elif not Path(str(config.input).removeprefix("file://")).exists():
        raise FileNotFoundError(f"input {config.input} does not exist")
    if config.public and not Path(config.public).exists():
        raise FileNotFoundError(f"public corpus {config.public} does not exist")


def released_detail(summary: dict[str, Any]) -> str:
    """What a stage released, for its progress line: the count and the file it went to (a table's
    rows, or a model's n-grams), e.g. ``9,251 rows → lm_counts.parquet``; short enough that the
    line fits 80 columns."""
    count = f"{summary['released_rows']:,}"
    paths = summary.get("paths") or []
    if not paths:
        return f"{count} released"
    name = Path(str(paths[0])).name
    unit = "n-grams" if name.endswith((".arpa", ".binary")) else "rows"
    return f"{count} {unit} → {name}"


class _StageProgress:
    """Rich progress rows, one per stage (on stderr, so ``--json`` output stays clean)."""

    def __init__(self, enabled: bool) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=_console(stderr=True),
            transient=False,
            disable=not enabled,
        )
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> _StageProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def on_stage(self, name: str, event: str, summary: dict[str, Any]) -> None:
        if event == "start":
            self.tasks[name] = self.progress.add_task(name, total=1)
            return
        detail = []
        if summary.get("skipped"):
            detail.append("skipped")
        if "released_rows" in summary:
            detail.append(released_detail(summary))
        # The same number as the final table's "ε charged" row for this stage: what the stage added
        # to the run's composed ε (the stage's own ε alone is larger; report.html shows both).
        if summary.get("charged_epsilon") is not None and summary.get("epsilon"):
            detail.append(f"ε charged {format_epsilon(summary['charged_epsilon'])}")
        if summary.get("reused"):
            detail.append("reused")
        text = name + (f" — {', '.join(detail)}" if detail else "")
        self.progress.update(self.tasks[name], completed=1, description=f"[green]✓[/green] {text}")

    def on_records(self, records: int) -> None:
        # Operator console only: the exact number of records read so far.
        task = self.tasks.get("ingest")
        if task is not None:
            self.progress.update(task, description=f"ingest — {records:,} records read")


def _run_summary(result: dict[str, Any]) -> dict[str, Any]:
    """What a finished release reports to the operator (from its report.json: public facts only)."""
    release = Path(result["release"]).resolve()
    report = json.loads((release / "report.json").read_text(encoding="utf-8"))
    privacy = report["privacy"]
    return {
        "run_id": report["run_id"],
        "dataset": report["dataset"],
        "release": str(release),
        "latest": str(release.parent.parent / "latest"),  # OUT/DATASET/latest
        "report": str(release / "report.json"),
        "report_html": str(release / "report.html"),
        "data_docs": str(release / report["validation"]["data_docs"])
        if report["validation"].get("ran")
        else None,
        "ngrams_per_k": report["released"]["ngrams_per_k"],
        "released_tables": {name: t["rows"] for name, t in report["released"]["tables"].items()},
        "epsilon_per_stage": {name: s["charged_epsilon"] for name, s in privacy["stages"].items()},
        "epsilon_total": privacy["total"]["epsilon"],
        "epsilon_basic_composition": privacy["basic_composition"]["epsilon"],
        "epsilon_target": privacy["calibration"]["target_epsilon"],
        "calibration_multiplier": privacy["calibration"]["multiplier"],
        "dpne_policy": (privacy.get("dpne") or {}).get("policy"),
        "delta": privacy["delta"],
        "validation_passed": report["validation"].get("success"),
        "noise": report["noise"]["mode"],
        "differentially_private": privacy.get("differentially_private", True),
        "non_dp_settings": privacy.get("non_dp_settings", []),
    }


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.table import Table

    console = _console()
    counts = Table(title="Released n-grams", title_justify="left", min_width=40)
    counts.add_column("k", justify="right")
    counts.add_column("n-grams", justify="right")
    for k, n in summary["ngrams_per_k"].items():
        counts.add_row(str(k), f"{n:,}")
    if not summary["ngrams_per_k"]:
        for name, n in summary["released_tables"].items():
            counts.add_row(name, f"{n:,}")
    spend = Table(title=f"Privacy spent (δ = {summary['delta']:g})", title_justify="left", min_width=40)
    spend.add_column("stage")
    spend.add_column("ε charged", justify="right")
    for stage, eps in summary["epsilon_per_stage"].items():
        spend.add_row(stage, format_epsilon(eps))
    spend.add_row("[bold]total (composed)[/bold]", f"[bold]{format_epsilon(summary['epsilon_total'])}[/bold]")
    spend.add_row("target (the run's ε)", format_epsilon(summary["epsilon_target"]))
    if summary["calibration_multiplier"] > 1:
        spend.add_row(
            "stage shares scaled by (joint calibration)", f"×{summary['calibration_multiplier']:.4f}"
        )
    if not summary.get("differentially_private", True):
        spend.add_row(
            f"[bold red]NOT DP ({', '.join(summary['non_dp_settings'])}): no guarantee[/bold red]", ""
        )
    paths = Table(title=f"Release {summary['run_id']}", title_justify="left", show_header=False, min_width=40)
    paths.add_column(no_wrap=True)
    paths.add_column(overflow="fold")
    for key in ("release", "latest", "report", "report_html", "data_docs"):
        if summary.get(key):
            paths.add_row(key, summary[key])
    console.print(counts)
    console.print(spend)
    console.print(paths)


# ----------------------------------------------------------------------------------------------
# Commands
# ----------------------------------------------------------------------------------------------
def cmd_sample(args: argparse.Namespace) -> int:
    from dpngram.text.sample import write_sample

    if args.users < 1:
        raise ConfigError(f"users: must be >= 1 (got {args.users})")
    paths = write_sample(args.out, n_users=args.users, seed=args.seed)
    console = _console()
    for key, path in paths.items():
        console.print(f"{key}: {path}")
    return EXIT_OK


def cmd_ingest(args: argparse.Namespace) -> int:
    from rich.table import Table

    from dpngram.engines.ingest import ingest_stats
    from dpngram.release.context import RunContext
    from dpngram.release.publish import prepare
    from dpngram.stages.ingest import run_ingest
    from dpngram.text.records import quarantine_refusal

    config = config_from_args(args, out=args.out or ".dpngram/ingest-runs")
    _check_input(config)
    config = prepare(config, reserve=False)
    ctx = RunContext(config)
    try:
        with _StageProgress(enabled=not args.quiet) as progress:
            progress.on_stage("ingest", "start", {})
            run_ingest(ctx, progress.on_records, enforce_quarantine_limit=False)
            progress.on_stage("ingest", "done", {})
    except IngestError:
        # The error says "see the quarantine summary": show it (stderr: the run failed).
        _print_run_quarantine(config, stderr=True)
        raise
    with ctx.engine() as engine:
        stats = ingest_stats(engine, ctx.schema)
    console = _console()
    table = Table(title="Ingest (exact counts: operator console only, never released)", title_justify="left")
    table.add_column("")
    table.add_column("count", justify="right")
    for key in ("rows_read", "rows_loaded", "rows_quarantined", "users", "documents", "sentences", "tokens"):
        if key in stats:
            table.add_row(key.replace("_", " "), f"{stats[key]:,}")
    console.print(table)
    _print_quarantine(console, stats)
    refusal = quarantine_refusal(stats, config.max_quarantine_fraction, f"table {ctx.schema}.quarantine")
    if refusal is not None:  # `ingest` spends nothing: it reports what `run` would refuse
        console.print(f"note: `dpngram run` would refuse this input: {refusal}", markup=False)
    console.print(f"run id {ctx.run_id}; private tables in schema {ctx.schema} of {config.warehouse}")
    return EXIT_OK


def _print_quarantine(console: Any, stats: dict[str, Any]) -> None:
    """Quarantined records by reason (exact counts: operator console only, never released): the
    lines the Airflow ``ingest`` task logs too (:func:`dpngram.text.records.quarantine_summary_lines`)."""
    from dpngram.text.records import quarantine_summary_lines

    for line in quarantine_summary_lines(stats):
        console.print(line, markup=False, highlight=False)


def _print_run_quarantine(config: RunConfig, stderr: bool) -> None:
    """The quarantine summary of a run's ingest, if ingest got that far (never raises: it runs
    after a success or on the way out of a failure)."""
    from dpngram.engines.ingest import ingest_stats
    from dpngram.release.context import RunContext

    try:
        ctx = RunContext(config)
        with ctx.engine() as engine:
            stats = ingest_stats(engine, ctx.schema)
    except Exception:  # noqa: BLE001 - no finished ingest: nothing to show
        return
    _print_quarantine(_console(stderr=stderr), stats)


def _release(args: argparse.Namespace, baseline: str | None = None, baseline_k: int | None = None) -> int:
    from dpngram.config.budget_plan import run_notices
    from dpngram.orchestration.plan import run_release
    from dpngram.release.context import new_run_id

    config = config_from_args(args)
    _check_input(config)
    if not config.run_id:  # fixed here, so the quarantine of a failed run can be shown
        config = config.with_values(run_id=new_run_id())
    if not args.quiet:
        for notice in run_notices(config):
            # one line per note however narrow the terminal (log scrapers read them line by line)
            _console(stderr=True).print(f"[yellow]note:[/yellow] {notice}", highlight=False, soft_wrap=True)
    try:
        with _StageProgress(enabled=not args.quiet) as progress:
            result = run_release(
                config,
                baseline=baseline,
                baseline_k=baseline_k,
                on_stage=progress.on_stage,
                ingest_progress=progress.on_records,
            )
    except IngestError:
        _print_run_quarantine(config, stderr=True)
        raise
    except ResourceExhausted as err:
        err.add_note(_resume_hint(err, config, getattr(args, "argv", None) or sys.argv[1:]))
        raise
    summary = _run_summary(result)
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    else:
        _print_summary(summary)
    _print_run_quarantine(config, stderr=args.json)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    return _release(args)


def cmd_baseline(args: argparse.Namespace) -> int:
    return _release(args, baseline=args.method, baseline_k=args.k)


def cmd_ledger(args: argparse.Namespace) -> int:
    """A dataset's spend history. An unknown dataset (a typo) is an error naming the known ones
    (exit 2), not an empty history; the table fits an 80-column terminal (the run id, the one
    long value, folds onto a second line rather than widening it)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from dpngram.engines.duckdb import Warehouse
    from dpngram.release.ledger import Ledger

    path = Path(args.warehouse)
    if not path.is_file():
        raise FileNotFoundError(f"warehouse {path} does not exist (no run has used it yet)")
    with Warehouse(path, read_only=True) as wh:
        ledger = Ledger(wh.con, create=False)
        known = ledger.datasets()
        if args.dataset not in known:
            names = ", ".join(known) if known else "none (no run has used this warehouse's ledger)"
            raise ConfigError(
                f"dataset '{args.dataset}' is not in the ledger of {path}; known datasets: {names}"
            )
        rows = ledger.entries(args.dataset)
    entries = [
        {
            "run_id": r["run_id"],
            "stage": r["stage"],
            "epsilon": float(r["epsilon"]),
            "delta": float(r["delta"]),
            "recorded_at": str(r["recorded_at"]),
        }
        for r in rows
    ]
    totals = {
        "epsilon": sum(e["epsilon"] for e in entries),
        "delta": sum(e["delta"] for e in entries),
        "runs": len({e["run_id"] for e in entries}),
    }
    if args.json:
        sys.stdout.write(
            json.dumps({"dataset": args.dataset, "entries": entries, "total": totals}, indent=2) + "\n"
        )
        return EXIT_OK
    table = Table(
        title=f"Privacy ledger of dataset '{args.dataset}' (runs add up by basic composition)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("recorded at", no_wrap=True)
    table.add_column("run", overflow="fold", ratio=1)
    table.add_column("stage", no_wrap=True)
    table.add_column("ε", justify="right", no_wrap=True)
    table.add_column("δ", justify="right", no_wrap=True)
    for e in entries:
        table.add_row(
            e["recorded_at"][:16], e["run_id"], e["stage"], format_epsilon(e["epsilon"]), f"{e['delta']:.3g}"
        )
    table.add_section()
    table.add_row(
        "",
        f"[bold]{totals['runs']} run(s)[/bold]",
        "[bold]total[/bold]",
        f"[bold]{format_epsilon(totals['epsilon'])}[/bold]",
        f"[bold]{totals['delta']:.3g}[/bold]",
    )
    Console(highlight=False).print(table)
    return EXIT_OK


def cmd_budget(args: argparse.Namespace) -> int:
    """Show a dataset's lifetime budget and what counts against it; with --lifetime-epsilon /
    --lifetime-delta, set or change it (the only way to change a stored limit)."""
    from dpngram.core.budget import Budget
    from dpngram.engines.duckdb import Warehouse
    from dpngram.release.ledger import Ledger

    for name in ("lifetime_epsilon", "lifetime_delta"):
        value = getattr(args, name)
        if value is not None and not (value > 0 and (name == "lifetime_epsilon" or value < 1)):
            raise ConfigError(
                f"{name}: must be > 0{' and < 1' if name == 'lifetime_delta' else ''} (got {value})"
            )
    changing = args.lifetime_epsilon is not None or args.lifetime_delta is not None
    if not changing and not Path(args.warehouse).is_file():
        raise FileNotFoundError(f"warehouse {args.warehouse} does not exist (no run has used it yet)")
    with Warehouse(args.warehouse) as wh:
        ledger = Ledger(wh.con)
        before = ledger.lifetime(args.dataset)
        if changing:
            ledger.set_lifetime(args.dataset, args.lifetime_epsilon, args.lifetime_delta)
        lifetime_eps, lifetime_delta = ledger.lifetime(args.dataset)
        used: Budget = ledger.committed(args.dataset)

    def shown(value: float | None, fmt: str) -> str:
        return "no limit" if value is None else format(value, fmt)

    console = _console()
    if changing:
        console.print(
            f"dataset '{args.dataset}': lifetime epsilon {shown(before[0], '.4g')} -> "
            f"{shown(lifetime_eps, '.4g')}, delta {shown(before[1], '.3g')} -> {shown(lifetime_delta, '.3g')}"
        )
    console.print(
        f"dataset '{args.dataset}': lifetime epsilon {shown(lifetime_eps, '.4g')}, delta "
        f"{shown(lifetime_delta, '.3g')}; committed epsilon {used.epsilon:.4g}, delta {used.delta:.3g} "
        "(charges, plus the reservations of runs still open)"
    )
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    """What failed runs left behind: every run the warehouse's ledger has not closed (holding a
    budget reservation, or suspended), wherever its staging directory is and whatever happened to
    it, and the staging directories under ``OUT/DATASET/runs`` of every dataset (``--out``; and under
    the old shared ``OUT/runs``) the ledger does not know. Lists
    them with what --delete would release; --delete closes their ledger runs (their reservations
    are released, their charges stay), drops their private run schemas and removes their staging
    directories. An interrupted publish (a kill between the rename of a complete release and the
    ``latest`` swap) is completed, not deleted. ``--run-id`` selects one run whatever its age."""
    import shutil
    import time

    from dpngram.engines.duckdb import Warehouse
    from dpngram.release.layout import LegacyLayoutError, check_out_layout
    from dpngram.release.ledger import Ledger
    from dpngram.release.publish import complete_publishes

    console = _console()
    now = time.time()

    def age_of(staging: Path) -> float | None:
        try:
            stamps = [p.stat().st_mtime for p in staging.rglob("*")] + [staging.stat().st_mtime]
        except OSError:
            return None
        return (now - max(stamps)) / 3600

    def selected(run_id: str, hours: float) -> bool:
        return run_id == args.run_id if args.run_id else hours >= args.older_than

    found: list[tuple[str, Path | None, str]] = []  # (run id, staging to remove, description)
    known: set[str] = set()
    warehouse = Path(args.warehouse)
    wh = Warehouse(warehouse) if warehouse.is_file() else None
    try:
        if wh is not None:
            ledger = Ledger(wh.con)
            for path in complete_publishes(ledger):
                console.print(f"completed the interrupted publish of {path} (its reservation is released)")
            for run in ledger.open_runs():
                known.add(run["run_id"])
                staging = Path(run["staging"]) if run["staging"] else None
                staged_age = age_of(staging) if staging is not None and staging.is_dir() else None
                hours = min(run["age_seconds"] / 3600, staged_age if staged_age is not None else float("inf"))
                if not selected(run["run_id"], hours):
                    continue
                reserved, charged = run["reserved"], run["charged"]
                holds = (
                    f"reserves epsilon {reserved.epsilon:.4g}, delta {reserved.delta:.3g}"
                    if run["state"] == "open"
                    else "reserves nothing (suspended: it drew no noise)"
                )
                if staging is None:
                    where = "staging unknown"
                elif staged_age is not None:
                    where = f"staging {staging}"
                else:
                    where = f"staging {staging} is gone or unreadable"
                found.append(
                    (
                        run["run_id"],
                        staging if staged_age is not None else None,
                        f"run {run['run_id']} (dataset {run['dataset']}, {hours:.1f} h old): {holds}; "
                        f"charged epsilon {charged.epsilon:.4g}, delta {charged.delta:.3g}; {where}",
                    )
                )
        out = Path(args.out) if args.out else None
        # every dataset's OUT/DATASET/runs, and the old shared OUT/runs (listed so it can be cleaned)
        stagings = sorted([*out.glob("*/runs/*.staging"), *out.glob("runs/*.staging")]) if out else []
        for staging in stagings:
            run_id = staging.name.removesuffix(".staging")
            hours = age_of(staging)
            if run_id in known or hours is None or not selected(run_id, hours):
                continue
            found.append(
                (run_id, staging, f"run {run_id} ({hours:.1f} h old): staging {staging}, not in the ledger")
            )
        if out is not None:
            try:
                check_out_layout(out)
            except LegacyLayoutError as err:
                console.print(f"note: {err}")
        if not found:
            scope = f"run {args.run_id}" if args.run_id else f"run older than {args.older_than:g} h"
            console.print(
                f"no unpublished {scope} in {warehouse}" + (f" or under {args.out}" if args.out else "")
            )
            return EXIT_OK
        for _, _, description in found:
            console.print(f"{'deleting' if args.delete else 'would release'}: {description}")
        if not args.delete:
            console.print(
                "run again with --delete to release their reservations, drop their private tables and "
                "remove their staging directories (their ledger charges stay; they can no longer be resumed)"
            )
            return EXIT_OK
        for run_id, staging, _ in found:
            if wh is not None:
                Ledger(wh.con).close_run(run_id)
                wh.drop_run_schema(run_id)
            if staging is not None:
                shutil.rmtree(staging)
    finally:
        if wh is not None:
            wh.close()
    console.print(f"deleted {len(found)} unpublished run{'' if len(found) == 1 else 's'}")
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    """Run the empirical privacy audit; exit 1 if a lower bound exceeds its claimed epsilon."""
    from rich.table import Table

    from dpngram.audit import AUDITS, run_audit

    if args.runs is not None and args.runs < 20:
        raise ConfigError(f"runs: must be >= 20 (got {args.runs})")
    if not 0 < args.alpha < 1:
        raise ConfigError(f"alpha: must be in (0, 1) (got {args.alpha})")
    results = [
        run_audit(name, args.runs, fast=args.fast, alpha=args.alpha) for name in args.mechanism or AUDITS
    ]
    if args.json:
        sys.stdout.write(json.dumps([r.to_dict() for r in results], indent=2, sort_keys=True) + "\n")
    else:
        table = Table(
            title=f"Empirical privacy audit (lower bounds hold with probability >= {1 - args.alpha:g})",
            title_justify="left",
        )
        for column in ("mechanism", "claimed ε", "δ", "ε lower bound", "runs per dataset", ""):
            table.add_column(column, justify="left" if column in ("mechanism", "") else "right")
        for r in results:
            verdict = "ok" if r.ok else "[bold red]LOWER BOUND ABOVE THE CLAIM: a bug[/bold red]"
            table.add_row(
                r.mechanism,
                f"{r.claimed_epsilon:.4f}",
                f"{r.delta:.3g}",
                f"{r.epsilon_lower_bound:.4f}",
                f"{r.runs_per_dataset:,}",
                verdict,
            )
        _console().print(table)
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Perplexities, OOV rate and next-word accuracy of a KenLM model on a text file."""
    from dpngram.lm.evaluate import SPELL_ALPHABET, SPELL_MEAN_LENGTH, evaluate_file

    result = evaluate_file(args.model, args.text, lowercase=not args.keep_case, arpa_path=args.arpa)
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return EXIT_OK
    print(f"sentences {result['sentences']}  tokens {result['tokens']}  order {result['order']}")
    print(f"perplexity (OOVs as <unk>)  {result['perplexity']:.3f}  (rewards a small vocabulary)")
    print(f"perplexity without OOVs     {result['perplexity_without_oov']:.3f}  (OOV events left out)")
    print(
        f"open-vocabulary perplexity  {result['open_vocab_perplexity']:.3f}  (an OOV costs p(<unk>) x the"
        f" same spelling probability for every model: 1/{SPELL_ALPHABET} per character, mean length"
        f" {SPELL_MEAN_LENGTH})"
    )
    print(f"OOV rate                    {result['oov_rate']:.4f}")
    if result["top1_accuracy"] is None:
        print(f"next-word accuracy          n/a: {result['accuracy_note']}")
    else:
        n = result["prediction_events"]
        print(
            f"top-1 next-word accuracy    {result['top1_accuracy']:.4f}  (the true next word is the"
            f" model's most probable word; {n} predictions, OOV targets are misses)"
        )
        print(
            f"top-3 next-word accuracy    {result['top3_accuracy']:.4f}  (the true next word is among"
            " its 3 most probable)"
        )
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from dpngram.demo import run_demo

    return run_demo(users=args.users, max_n=args.max_n, epsilon=args.epsilon, fresh_sample=args.fresh_sample)


# ----------------------------------------------------------------------------------------------
# Parser and entry point
# ----------------------------------------------------------------------------------------------
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
    p.set_defaults(func=cmd_sample)


def _add_release_commands(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """The commands that read the private corpus: ``ingest``, ``run`` and ``baseline``."""
    p = sub.add_parser("ingest", parents=[common], help="ingest only and print the operator summary")
    add_config_flags(p, optional=("out",))
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("run", parents=[common], help="run a whole release in this process")
    add_config_flags(p)
    p.add_argument("--json", action="store_true", help="print the final summary as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("baseline", parents=[common], help="release with a DPSU baseline instead of DPNE")
    p.add_argument(
        "--method",
        required=True,
        choices=["dpsu-all", "dpsu-even", "dpsu-single"],
        help="DPNE §3.1.2 baseline",
    )
    p.add_argument("--k", type=int, default=None, metavar="K", help="the single length for dpsu-single")
    add_config_flags(p)
    p.add_argument("--json", action="store_true", help="print the final summary as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_baseline)


def _add_ledger_command(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``dpngram ledger``: the privacy spend history of a dataset."""
    p = sub.add_parser("ledger", parents=[common], help="privacy spend history of a dataset")
    p.add_argument("--dataset", default=RunConfig.model_fields["dataset"].default, metavar="NAME")
    p.add_argument("--warehouse", default=RunConfig.model_fields["warehouse"].default, metavar="PATH")
    p.add_argument("--json", action="store_true", help="print the history as JSON")
    p.set_defaults(func=cmd_ledger)


def _add_budget_command(sub: _Subparsers, common: argparse.ArgumentParser) -> None:
    """``dpngram budget``: show or deliberately change a dataset's lifetime budget."""
    p = sub.add_parser(
        "budget",
        parents=[common],
        help="show or change a dataset's lifetime budget (stored in the ledger)",
    )
    p.add_argument("--dataset", default=RunConfig.model_fields["dataset"].default, metavar="NAME")
    p.add_argument("--warehouse", default=RunConfig.model_fields["warehouse"].default, metavar="PATH")
    p.add_argument("--lifetime-epsilon", type=float, default=None, metavar="E", help="new lifetime epsilon")
    p.add_argument("--lifetime-delta", type=float, default=None, metavar="D", help="new lifetime delta")
    p.set_defaults(func=cmd_budget)


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
    p.add_argument("--warehouse", default=RunConfig.model_fields["warehouse"].default, metavar="PATH")
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
    p.set_defaults(func=cmd_gc)


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
    p.set_defaults(func=cmd_audit)


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
    p.set_defaults(func=cmd_evaluate)


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
    p.set_defaults(func=cmd_demo)


def _resume_hint(err: ResourceExhausted, config: RunConfig, argv: Sequence[str]) -> str:
    """What to run after a stage ran out of a resource: the same command with the same --run-id
    (nothing was charged) or without it (a new run: the stage had drawn its noise), with twice
    the memory limit when memory ran out on DuckDB. Operator-given flags only, no data."""
    drop = {"--run-id"}
    memory = err.resource == "memory" and config.engine.name == "duckdb"
    if memory:
        drop.add("--memory-limit")
    command: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in drop:
            skip = "=" not in token
            continue
        command.append(token)
    if not err.charged:
        command += ["--run-id", err.run_id]
    if memory:
        command += ["--memory-limit", _doubled(config.engine.memory_limit)]
        how = "with more memory"
    elif err.resource == "memory":
        how = "with more memory for Spark (--spark-conf)"
    else:
        how = "after freeing disk space"
    return f"{how}: {shlex.join([PROG, *command])}"


def _doubled(limit: str) -> str:
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*$", limit)
    if not match:
        return limit
    value = float(match.group(1)) * 2
    return f"{int(value) if value.is_integer() else value:g}{match.group(2)}"


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
    except WarehouseBusy as err:
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


if __name__ == "__main__":
    raise SystemExit(main())
