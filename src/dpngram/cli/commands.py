"""The ``dpngram`` sub-commands: each reads its flags, calls the layer that does the work (the
plan's :func:`~dpngram.orchestration.plan.run_release`, the ledger, the release clean-up, the
audit, the model evaluation) and prints the result (:mod:`dpngram.cli.console`).

Owns: the ``cmd_*`` functions, :func:`check_input`, :func:`resume_hint`, the exit codes.
Imports: every layer below (dpngram.demo, dpngram.audit, dpngram.orchestration, dpngram.lm,
dpngram.release, dpngram.engines, dpngram.text, dpngram.config, dpngram.core), inside the command
that needs it; rich.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dpngram.cli.console import (
    StageProgress,
    format_epsilon,
    make_console,
    print_quarantine,
    print_run_quarantine,
    print_summary,
    run_summary,
)
from dpngram.cli.flags import config_from_args
from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError, IngestError, ResourceExhausted

if TYPE_CHECKING:
    from dpngram.release.forecast import Forecast

PROG = "dpngram"


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def check_input(config: RunConfig) -> None:
    """Refuse, before anything is reserved, an input the run cannot read (a local path that does
    not exist, a Hadoop-style URI without the Spark engine) or a public corpus that is not a file:
    the checks of the DAG's pre-check (:func:`dpngram.release.publish.input_problem`)."""
    from dpngram.release.publish import input_problem, public_problem

    for problem in (input_problem(config), public_problem(config)):
        if problem is not None:
            raise ConfigError(problem)


def cmd_sample(args: argparse.Namespace) -> int:
    from dpngram.text.sample import write_sample

    if args.users < 1:
        raise ConfigError(f"users: must be >= 1 (got {args.users})")
    paths = write_sample(args.out, n_users=args.users, seed=args.seed)
    console = make_console()
    for key, path in paths.items():
        console.print(f"{key}: {path}")
    return EXIT_OK


def cmd_ingest(args: argparse.Namespace) -> int:
    from rich.table import Table

    from dpngram.engines.ingest_stats import ingest_stats
    from dpngram.release.context import RunContext
    from dpngram.release.publish import prepare
    from dpngram.stages.ingest import run_ingest
    from dpngram.text.records import quarantine_refusal

    config = config_from_args(args, out=args.out or ".dpngram/ingest-runs")
    check_input(config)
    config = prepare(config, reserve=False)
    ctx = RunContext(config)
    try:
        with StageProgress(enabled=not args.quiet) as progress:
            progress.on_stage("ingest", "start", {})
            run_ingest(ctx, progress.on_records, enforce_quarantine_limit=False)
            progress.on_stage("ingest", "done", {})
    except IngestError:
        # The error says "see the quarantine summary": show it (stderr: the run failed).
        print_run_quarantine(config, stderr=True)
        raise
    with ctx.engine() as engine:
        stats = ingest_stats(engine, ctx.schema)
    console = make_console()
    table = Table(title="Ingest (exact counts: operator console only, never released)", title_justify="left")
    table.add_column("")
    table.add_column("count", justify="right")
    for key in ("rows_read", "rows_loaded", "rows_quarantined", "users", "documents", "sentences", "tokens"):
        if key in stats:
            table.add_row(key.replace("_", " "), f"{stats[key]:,}")
    console.print(table)
    print_quarantine(console, stats)
    refusal = quarantine_refusal(stats, config.max_quarantine_fraction, f"table {ctx.schema}.quarantine")
    if refusal is not None:  # `ingest` spends nothing: it reports what `run` would refuse
        console.print(f"note: `dpngram run` would refuse this input: {refusal}", markup=False)
    console.print(f"run id {ctx.run_id}; private tables in schema {ctx.schema} of {config.run_warehouse}")
    return EXIT_OK


def _release(args: argparse.Namespace, baseline: str | None = None, baseline_k: int | None = None) -> int:
    from dpngram.config.budget_plan import run_notices
    from dpngram.orchestration.plan import run_release
    from dpngram.release.context import with_run_id

    config = config_from_args(args)
    check_input(config)
    config = with_run_id(config)  # fixed here, so the quarantine of a failed run can be shown
    if not args.quiet:
        for notice in run_notices(config):
            # one line per note however narrow the terminal (log scrapers read them line by line)
            make_console(stderr=True).print(
                f"[yellow]note:[/yellow] {notice}", highlight=False, soft_wrap=True
            )
    try:
        with StageProgress(enabled=not args.quiet) as progress:
            result = run_release(
                config,
                baseline=baseline,
                baseline_k=baseline_k,
                on_stage=progress.on_stage,
                ingest_progress=progress.on_records,
            )
    except IngestError:
        print_run_quarantine(config, stderr=True)
        raise
    except ResourceExhausted as err:
        err.add_note(resume_hint(err, config, getattr(args, "argv", None) or sys.argv[1:]))
        raise
    summary = run_summary(result)
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    else:
        print_summary(summary)
    print_run_quarantine(config, stderr=args.json)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    return _release(args)


def cmd_baseline(args: argparse.Namespace) -> int:
    return _release(args, baseline=args.method, baseline_k=args.k)


def _ledger_dataset(ledger, dataset: str) -> None:
    """Refuse an unknown dataset (a typo) with an error naming the known ones (exit 2)."""
    known = ledger.datasets()
    if dataset not in known:
        names = ", ".join(known) if known else "none (no run has used this ledger)"
        raise ConfigError(
            f"dataset '{dataset}' is not in the ledger {ledger.location}; known datasets: {names}"
        )


def cmd_ledger(args: argparse.Namespace) -> int:
    """A dataset's spend history and what its lifetime budget still allows; ``--export`` writes
    every charge (of ``--dataset``, or of every dataset) as CSV or JSON for an auditor, ``--import``
    copies an older dpngram's ledger out of its warehouse file. An unknown dataset (a typo) is an
    error naming the known ones (exit 2), not an empty history; the table fits an 80-column
    terminal (the run id, the one long value, folds onto a second line rather than widening it)."""
    from dpngram.release.ledger import open_ledger
    from dpngram.release.ledger_import import import_legacy

    with open_ledger() as ledger:
        if args.import_path:
            added = import_legacy(ledger, Path(args.import_path))
            make_console().print(
                f"imported into the ledger {ledger.location} from {args.import_path}: "
                + ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in added.items())
                + " (rows it already held were kept as they were)"
            )
            return EXIT_OK
        if args.export:
            if args.dataset is not None:
                _ledger_dataset(ledger, args.dataset)
            _export_ledger(ledger.export(args.dataset), args.export)
            return EXIT_OK
        dataset = args.dataset or RunConfig.model_fields["dataset"].default
        _ledger_dataset(ledger, dataset)
        rows = ledger.entries(dataset)
        forecast = ledger.forecast(dataset)
        location = ledger.location
    entries, totals = _ledger_entries(rows)
    stop = _schedule_sentence(args.schedule, forecast.runs_left)
    if args.json:
        sys.stdout.write(
            json.dumps(_ledger_json(dataset, location, entries, totals, forecast, stop), indent=2) + "\n"
        )
        return EXIT_OK
    _print_ledger_table(dataset, entries, totals)
    console = make_console()
    console.print(forecast.sentence(), highlight=False)
    if stop:
        console.print(stop, highlight=False)
    console.print(f"ledger: {location}", highlight=False)
    return EXIT_OK


def _ledger_entries(rows: list[dict]) -> tuple[list[dict], dict]:
    """A dataset's ledger rows as ``dpngram ledger`` shows them, and their totals (basic
    composition over runs: sums, and the number of runs)."""
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
    return entries, totals


def _ledger_json(
    dataset: str, location: str, entries: list[dict], totals: dict, forecast: Forecast, stop: str | None
) -> dict:
    """``dpngram ledger --json``: the entries, their totals and the budget forecast."""
    return {
        "dataset": dataset,
        "ledger": location,
        "entries": entries,
        "total": totals,
        "forecast": {
            "runs_left": forecast.runs_left,
            "per_run": None
            if forecast.per_run is None
            else {"epsilon": forecast.per_run.epsilon, "delta": forecast.per_run.delta},
            "limited_by": forecast.limited_by,
            "schedule": stop,
        },
    }


def _schedule_sentence(schedule: str | None, runs_left: int | None) -> str | None:
    """When the refresh schedule (``--schedule``, else ``DPNGRAM_SCHEDULE``) would stop."""
    import datetime as dt
    import os

    from dpngram.release.forecast import schedule_stop

    chosen = schedule or os.environ.get("DPNGRAM_SCHEDULE") or None
    return schedule_stop(chosen, runs_left, dt.datetime.now(dt.UTC))


def _export_ledger(rows: list[dict], fmt: str) -> None:
    """Every charge as CSV (one row each, the events as JSON text) or JSON, on stdout."""
    import csv

    cleaned = [{k: (str(v) if k == "recorded_at" else v) for k, v in row.items()} for row in rows]
    if fmt == "json":
        for row in cleaned:
            row["events"] = json.loads(row["events"])
        sys.stdout.write(json.dumps(cleaned, indent=2) + "\n")
        return
    columns = [
        *("dataset", "run_id", "stage", "epsilon", "delta"),
        *("status", "recorded_at", "run_state", "events"),
    ]
    writer = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(cleaned)


def _print_ledger_table(dataset: str, entries: list[dict], totals: dict) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"Privacy ledger of dataset '{dataset}' (runs add up by basic composition)",
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


def cmd_budget(args: argparse.Namespace) -> int:
    """Show a dataset's lifetime budget and what counts against it; with --lifetime-epsilon /
    --lifetime-delta, set or change it (the only way to change a stored limit)."""
    from dpngram.core.budget import Budget
    from dpngram.release.ledger import check_lifetime_values, open_ledger

    check_lifetime_values(args.lifetime_epsilon, args.lifetime_delta)
    changing = args.lifetime_epsilon is not None or args.lifetime_delta is not None
    with open_ledger() as ledger:
        if not changing:
            _ledger_dataset(ledger, args.dataset)
        before = ledger.lifetime(args.dataset)
        if changing:
            ledger.set_lifetime(args.dataset, args.lifetime_epsilon, args.lifetime_delta)
        lifetime_eps, lifetime_delta = ledger.lifetime(args.dataset)
        used: Budget = ledger.committed(args.dataset)
        forecast = ledger.forecast(args.dataset)

    def shown(value: float | None, fmt: str) -> str:
        return "no limit" if value is None else format(value, fmt)

    console = make_console()
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
    if forecast.per_run is not None and forecast.runs_left is not None:
        console.print(forecast.sentence(), highlight=False)
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    """What failed runs left behind: every run the ledger has not closed (holding a budget
    reservation, or suspended), wherever its staging directory is and whatever happened to it,
    and the staging directories under ``OUT/DATASET/runs`` of every dataset (``--out``; and under
    the old shared ``OUT/runs``) the ledger does not know. Lists them with what --delete would
    release; --delete closes their ledger runs (their reservations are released, their charges
    stay), deletes their private tables and removes their staging directories. An interrupted
    publish (a kill after the commit point, before ``latest`` moved) is completed, not deleted.
    The private tables of runs already closed that are still in this machine's warehouse
    directory are listed, and deleted with --delete. ``--run-id`` selects one run whatever its age."""
    from dpngram.config.run import warehouse_directory
    from dpngram.release.cleanup import UnpublishedRuns
    from dpngram.release.ledger import open_ledger

    console = make_console()
    try:
        warehouse = warehouse_directory(args.warehouse)
    except ValueError as err:
        raise ConfigError(f"warehouse: {err}") from None
    with open_ledger() as ledger:
        runs = UnpublishedRuns(ledger, warehouse, args.out)
        for path in runs.complete_publishes():
            console.print(f"completed the interrupted publish of {path} (its reservation is released)")
        leftovers = runs.closed_leftovers(args.run_id)
        for run_id in leftovers:
            console.print(
                f"{'deleting' if args.delete else 'would delete'}: the private tables of run {run_id}, "
                f"closed in the ledger (published or released), which nothing can use ({warehouse})"
            )
        if args.delete:
            runs.drop_leftovers(leftovers)
        found = runs.find(args.run_id, args.older_than)
        note = runs.layout_note()
        if note is not None:
            console.print(f"note: {note}")
        if not found:
            scope = f"run {args.run_id}" if args.run_id else f"run older than {args.older_than:g} h"
            console.print(
                f"no unpublished {scope} in the ledger {ledger.location}"
                + (f" or under {args.out}" if args.out else "")
            )
            if leftovers and not args.delete:
                console.print("run again with --delete to delete those private tables")
            return EXIT_OK
        for run in found:
            console.print(f"{'deleting' if args.delete else 'would release'}: {run.description}")
        if not args.delete:
            console.print(
                "run again with --delete to release their reservations, delete their private tables and "
                "remove their staging directories (their ledger charges stay; they can no longer be resumed)"
            )
            return EXIT_OK
        runs.delete(found)
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
        make_console().print(table)
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


def resume_hint(err: ResourceExhausted, config: RunConfig, argv: Sequence[str]) -> str:
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
