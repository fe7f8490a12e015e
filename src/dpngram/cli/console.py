"""What the ``dpngram`` command prints: stage progress, the release summary, the quarantine.

Exact input statistics (the quarantine's counts per reason, ``dpngram ingest``'s summary) appear
on this operator console only, never in a released file or log. Raw input text is never printed.

Owns: :func:`make_console`, :class:`StageProgress`, :func:`released_detail`, :func:`format_epsilon`,
:func:`run_summary`, :func:`print_summary`, :func:`print_quarantine`, :func:`print_run_quarantine`.
Imports: dpngram.release.context, dpngram.engines.ingest, dpngram.text.records, dpngram.config
(inside the functions that print them); rich.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpngram.config import RunConfig


def format_epsilon(value: float) -> str:
    """ε for a table: four decimals, or scientific notation where four decimals would show a
    non-zero spend as 0.0000 (below 5e-5), e.g. ``1.000e-06``."""
    if value != 0 and abs(value) < 5e-5:
        return f"{value:.3e}"
    return f"{value:.4f}"


def make_console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


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


class StageProgress:
    """Rich progress rows, one per stage (on stderr, so ``--json`` output stays clean)."""

    def __init__(self, enabled: bool) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=make_console(stderr=True),
            transient=False,
            disable=not enabled,
        )
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> StageProgress:
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


def run_summary(result: dict[str, Any]) -> dict[str, Any]:
    """What a finished release reports to the operator (from its report.json: public facts only)."""
    from dpngram.release.storage import POINTER, is_object_url, join, read_json

    if is_object_url(result["release"]):
        release = result["release"].rstrip("/")
        report = read_json(join(release, "report.json"))
        latest = join(release.rsplit("/", 2)[0], POINTER)  # OUT/DATASET/latest.json
    else:
        release = str(Path(result["release"]).resolve())
        report = json.loads((Path(release) / "report.json").read_text(encoding="utf-8"))
        latest = str(Path(release).parent.parent / "latest")  # OUT/DATASET/latest
    privacy = report["privacy"]
    return {
        "run_id": report["run_id"],
        "dataset": report["dataset"],
        "release": release,
        "latest": latest,
        "report": join(release, "report.json"),
        "report_html": join(release, "report.html"),
        "data_docs": join(release, report["validation"]["data_docs"])
        if report["validation"].get("ran")
        else None,
        "ledger": result.get("ledger"),
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


def print_summary(summary: dict[str, Any]) -> None:
    from rich.table import Table

    console = make_console()
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
    for key in ("release", "latest", "report", "report_html", "data_docs", "ledger"):
        if summary.get(key):
            paths.add_row(key, summary[key])
    console.print(counts)
    console.print(spend)
    console.print(paths)


def print_quarantine(console: Any, stats: dict[str, Any]) -> None:
    """Quarantined records by reason (exact counts: operator console only, never released): the
    lines the Airflow ``ingest`` task logs too (:func:`dpngram.text.records.quarantine_summary_lines`)."""
    from dpngram.text.records import quarantine_summary_lines

    for line in quarantine_summary_lines(stats):
        console.print(line, markup=False, highlight=False)


def print_run_quarantine(config: RunConfig, stderr: bool) -> None:
    """The quarantine summary of a run's ingest, if ingest got that far (never raises: it runs
    after a success or on the way out of a failure). A published run's private tables are
    dropped, so its summary comes from its operator report."""
    from dpngram.engines.ingest_stats import ingest_stats
    from dpngram.release.context import RunContext
    from dpngram.stages.report import operator_quarantine

    try:
        ctx = RunContext(config)
        if ctx.release.published:
            stats = operator_quarantine(ctx)
        else:
            with ctx.engine() as engine:
                stats = ingest_stats(engine, ctx.schema)
    except Exception:  # noqa: BLE001 - no finished ingest: nothing to show
        return
    if stats is not None:
        print_quarantine(make_console(stderr=stderr), stats)
