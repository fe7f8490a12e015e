"""Scenario ``default-check``: the current DPSU default against the defaults it replaced, in one run.

Issue "Scale" asks that every new default release at least as many n-grams as the default of the
day it was filed (the policy Gaussian) on SOTU and a 200k-user generated corpus, with spurious
fraction <= eta. The scenarios that chose the default compared each step with the step before
(``sips``: DP-SIPS against the policy Gaussian; ``sips-admission``: admission against plain
DP-SIPS), on different days and commits. This one runs them side by side on the same ingest of
each corpus, at the paper's parameters (T = 5, delta 1e-7, eta 0.01, Delta0 100, ``dpne=1``, no
public corpus), ``--repeat`` runs each:

* ``default``: no override (today: DP-SIPS with admission by the first round);
* ``plain-dp-sips``: DP-SIPS without admission (ratio 16; the default from 2026-11-24);
* ``policy-gaussian``: the default when the issue was filed;
* ``weighted``: one round of the weighted Gaussian (the paper's DPSU).

Writes ``results/dpne_default_check.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from dpne.budget import evaluate_on_corpora
from dpne.common import PAPER, REFERENCE, RESULTS, SPEED_T, header, released_bars, write_result

CHECK_EPSILONS = (4.0, 1.0)
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "plain-dp-sips": {"dpsu_policy": "dp-sips", "dpsu_sips_ratio": 16.0, "dpsu_sips_admission": False},
    "policy-gaussian": {"dpsu_policy": "policy-gaussian", "dpsu_policy_cap": 10.0},
    "weighted": {"dpsu_policy": "weighted"},
}
#: The default the issue was filed against, and the bar each default must clear.
ISSUE_DEFAULT = "policy-gaussian"


def check_summary(record: dict[str, Any]) -> dict[str, Any]:
    """Per corpus and epsilon: each configuration's released total (mean, sd), the default's ratio to
    every other one, its spurious fraction against eta, and whether it clears the issue's bars
    (>= the issue-day default; on SOTU at eps 4 also >= 5,450)."""
    eta = PAPER["eta"]
    summary: dict[str, Any] = {"reference_sotu_eps4_mean": statistics.fmean(REFERENCE["released_total_runs"])}
    for label, result in record["corpora"].items():
        for eps in CHECK_EPSILONS:
            runs = {c: result["runs"][f"{c} eps={eps:g}"] for c in CONFIGS}
            totals = {c: r["released_total"] for c, r in runs.items()}
            default = totals["default"]["mean"]
            spurious = runs["default"]["spurious_fraction"]["mean"]
            cell: dict[str, Any] = {
                "released_total": totals,
                "default_over": {
                    c: round(default / t["mean"], 4) for c, t in totals.items() if c != "default"
                },
                "spurious_fraction": {c: r["spurious_fraction"]["mean"] for c, r in runs.items()},
                "default_at_least_issue_default": default >= totals[ISSUE_DEFAULT]["mean"],
                "default_spurious_within_eta": spurious <= eta,
            }
            if label == "sotu" and eps == 4.0:
                cell["default_at_least_5450"] = default >= 5450
            summary[f"{label} eps={eps:g}"] = cell
    return summary


def mode_default_check(args: argparse.Namespace) -> None:
    """Run every configuration of :data:`CONFIGS` on SOTU (when ``../shared`` has it) and
    ``--users`` (200k) generated users at eps 4 and 1, ``--repeat`` runs each."""
    workdir = Path(args.workdir) / "default_check"
    users = (args.users or [200_000])[0]
    record = header(
        "dpne_default_check",
        {
            **PAPER,
            "max_n": SPEED_T,
            "epsilons": list(CHECK_EPSILONS),
            "repeat": args.repeat,
            "generated_repeat": args.generated_repeat or args.repeat,
            "generated_users": users,
            "configs": CONFIGS,
            "issue_default": ISSUE_DEFAULT,
            "other_parameters": "defaults otherwise (sigma_decay 1.2, dpne_threshold_delta 0.1, "
            "variant auto); "
            "no public corpus, as the issue's SOTU figure is set",
        },
    )
    evaluate_on_corpora(
        workdir,
        users,
        CONFIGS,
        CHECK_EPSILONS,
        args.repeat,
        record,
        "dpne_default_check.json",
        generated_repeat=args.generated_repeat,
    )
    record["summary"] = check_summary(record)
    write_result("dpne_default_check.json", record)
    check_figure(record)


def check_figure(record: dict[str, Any]) -> None:
    """results/dpne_default_check.png: released n-grams per configuration, one panel per corpus and
    epsilon (mean and sd of the runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(label, eps) for label in record["corpora"] for eps in CHECK_EPSILONS]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.8 * len(panels), 4), squeeze=False)
    names = ["weighted", "policy-gaussian", "plain-dp-sips", "default"]
    ticks = ["weighted\n(1 round)", "policy\nGaussian\n(issue day)", "plain\nDP-SIPS", "default\n(admission)"]
    for ax, (label, eps) in zip(axes[0], panels, strict=True):
        released_bars(
            ax,
            record["corpora"][label]["runs"],
            names,
            label,
            eps,
            ["#bbbbbb", "#3182bd", "#999999", "#e6550d"],
            ticks,
        )
    fig.suptitle(
        "The DPSU default against the defaults it replaced (T = 5, delta 1e-7, eta 0.01)", fontsize=10
    )
    fig.tight_layout()
    out = RESULTS / "dpne_default_check.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
