"""Scenario ``sips-admission``: DP-SIPS with admission by the first round (docs/dpne.md,
"Admission by the first round"), its (ratio, z) tuned on public text, then evaluated against the
previous default (plain DP-SIPS, ratio 16) on SOTU and the generated corpus.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from dpne.budget import brown_users, budget_runs, evaluate_on_corpora
from dpne.common import (
    PAPER,
    REFERENCE,
    RESULTS,
    SPEED_T,
    best_by_gain,
    header,
    released_bars,
    write_result,
)

ADMISSION_EPSILONS = (4.0, 1.0)
#: The previous default: plain DP-SIPS, 2 rounds, ratio 16, no admission.
PREVIOUS_DEFAULT: dict[str, Any] = {"dpsu_sips_ratio": 16.0, "dpsu_sips_admission": False}
#: Step 1 of the public-text tuning (Brown as pseudo-users): the budget ratio q and the admission
#: floor z, with admission at every level.
ADMISSION_GRID: dict[str, dict[str, Any]] = {
    f"q{q:g}-z{z:g}": {
        "dpsu_sips_ratio": 16.0,
        "dpsu_sips_admission": True,
        "dpsu_sips_admission_ratio": q,
        "dpsu_sips_admission_floor": z,
        "dpsu_sips_admission_max_n": SPEED_T,
    }
    for q in (1.0, 2.0, 3.0, 4.0)
    for z in (1.0, 1.5, 2.0, 2.5)
}
#: Step 2: at step 1's (q, z), admission for the vocabulary and the levels k <= max_n only (plain
#: DP-SIPS at ratio 16 beyond).
MAX_N_GRID = tuple(range(1, SPEED_T + 1))


def admission_choice(grid: dict[str, Any], names: Any) -> tuple[str, dict[str, float]]:
    """The grid entry with the largest geometric mean over the epsilons of its released total
    relative to the previous default's (on Brown: public text only)."""
    return best_by_gain(grid, names, "previous-default", ADMISSION_EPSILONS)


def admission_summary(record: dict[str, Any]) -> dict[str, Any]:
    """Per corpus and epsilon: released totals (mean, sd), per-k means, the gain over the previous
    default and the spurious fractions (benchmark-only ground truth)."""
    summary: dict[str, Any] = {"reference_sotu_eps4_mean": statistics.fmean(REFERENCE["released_total_runs"])}
    for label, result in record["corpora"].items():
        for eps in ADMISSION_EPSILONS:
            runs = {c: result["runs"][f"{c} eps={eps:g}"] for c in ("previous-default", "default")}
            summary[f"{label} eps={eps:g}"] = {
                **{c: r["released_total"] for c, r in runs.items()},
                "per_k": {c: r["released_per_k_mean"] for c, r in runs.items()},
                "gain": round(
                    runs["default"]["released_total"]["mean"]
                    / runs["previous-default"]["released_total"]["mean"],
                    4,
                ),
                "spurious_fraction": {c: r["spurious_fraction"]["mean"] for c, r in runs.items()},
            }
    return summary


def mode_sips_admission(args: argparse.Namespace) -> None:
    """Tune (ratio, z) on Brown pseudo-users (public) at eps 4 and 1 (``--tuning-repeat`` runs per
    point), then run the choice and the previous default on SOTU and ``--users`` (200k) generated
    users (``--repeat`` runs each). Writes ``results/dpne_sips_admission.json`` and ``.png``."""
    workdir = Path(args.workdir) / "admission"
    users = (args.users or [200_000])[0]
    record = header(
        "dpne_sips_admission",
        {
            **PAPER,
            "max_n": SPEED_T,
            "epsilons": list(ADMISSION_EPSILONS),
            "repeat": args.repeat,
            "tuning_repeat": args.tuning_repeat,
            "generated_users": users,
            "grid": ADMISSION_GRID,
            "previous_default": PREVIOUS_DEFAULT,
            "other_parameters": "defaults: dp-sips 2 rounds, sigma_decay 1.2, dpne_threshold_delta 0.1, "
            "variant auto, no public corpus",
        },
    )
    grid = budget_runs(
        workdir,
        "brown",
        brown_users(),
        {"previous-default": PREVIOUS_DEFAULT, **ADMISSION_GRID},
        ADMISSION_EPSILONS,
        args.tuning_repeat,
    )
    record["public_tuning_brown"] = grid
    name, scores = admission_choice(grid, ADMISSION_GRID)
    record["choice"] = {"name": name, "overrides": ADMISSION_GRID[name], "scores_vs_previous_default": scores}
    write_result("dpne_sips_admission.json", record)
    print(f"chosen on Brown (step 1): {name} {ADMISSION_GRID[name]}", flush=True)
    levels = {f"{name}-max{m}": {**ADMISSION_GRID[name], "dpsu_sips_admission_max_n": m} for m in MAX_N_GRID}
    step2 = budget_runs(
        workdir,
        "brown",
        brown_users(),
        {"previous-default": PREVIOUS_DEFAULT, **levels},
        ADMISSION_EPSILONS,
        args.tuning_repeat,
    )
    record["public_tuning_brown_max_n"] = step2
    best, level_scores = admission_choice(step2, levels)
    record["choice_max_n"] = {
        "name": best,
        "overrides": levels[best],
        "scores_vs_previous_default": level_scores,
    }
    write_result("dpne_sips_admission.json", record)
    print(f"chosen on Brown (step 2): {best} {levels[best]}", flush=True)
    configs = {"previous-default": PREVIOUS_DEFAULT, "default": levels[best]}
    evaluate_on_corpora(
        workdir, users, configs, ADMISSION_EPSILONS, args.repeat, record, "dpne_sips_admission.json"
    )
    record["summary"] = admission_summary(record)
    write_result("dpne_sips_admission.json", record)
    admission_figure(record)


def admission_figure(record: dict[str, Any]) -> None:
    """results/dpne_sips_admission.png: the Brown grid (gain over the previous default per ratio,
    one line per z and epsilon) and the evaluation (released n-grams per corpus and epsilon)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(label, eps) for label in record["corpora"] for eps in ADMISSION_EPSILONS]
    fig, axes = plt.subplots(1, len(panels) + 2, figsize=(3.6 * (len(panels) + 2), 4), squeeze=False)
    grid = record["public_tuning_brown"]["runs"]
    ax = axes[0][0]
    zs = sorted({v["dpsu_sips_admission_floor"] for v in ADMISSION_GRID.values()})
    ratios = sorted({v["dpsu_sips_admission_ratio"] for v in ADMISSION_GRID.values()})
    for eps, style in zip(ADMISSION_EPSILONS, ("-", "--"), strict=True):
        base = grid[f"previous-default eps={eps:g}"]["released_total"]["mean"]
        for z in zs:
            ys = [grid[f"q{q:g}-z{z:g} eps={eps:g}"]["released_total"]["mean"] / base for q in ratios]
            ax.plot(ratios, ys, style, marker="o", markersize=3, label=f"z={z:g}, eps={eps:g}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("budget ratio q (round 2 / round 1)")
    ax.set_ylabel("released / previous default")
    ax.set_title("Brown (public) tuning", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    ax = axes[0][1]
    step2 = record["public_tuning_brown_max_n"]["runs"]
    first = record["choice"]["name"]
    for eps in ADMISSION_EPSILONS:
        base = step2[f"previous-default eps={eps:g}"]["released_total"]["mean"]
        ys = [step2[f"{first}-max{m} eps={eps:g}"]["released_total"]["mean"] / base for m in MAX_N_GRID]
        ax.plot(MAX_N_GRID, ys, marker="o", label=f"eps={eps:g}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("admission for levels k <= max_n")
    ax.set_ylabel("released / previous default")
    ax.set_title(f"Brown: at {first}, the levels with admission", fontsize=9)
    ax.legend(fontsize=7)
    for ax, (label, eps) in zip(axes[0][2:], panels, strict=True):
        released_bars(
            ax,
            record["corpora"][label]["runs"],
            ["previous-default", "default"],
            label,
            eps,
            ["#999999", "#e6550d"],
            ["plain DP-SIPS\n(previous)", "admission\n(default)"],
        )
    fig.suptitle(
        "DP-SIPS with admission by the first round (T = 5, delta 1e-7, eta 0.01, Delta0 100)", fontsize=10
    )
    fig.tight_layout()
    out = RESULTS / "dpne_sips_admission.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
