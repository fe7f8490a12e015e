"""Scenarios ``sips`` and ``sips-speed``: the DP-SIPS policy, tuned on public text, against the
other policies.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
from pathlib import Path
from typing import Any

from dpne.budget import (
    brown_users,
    budget_runs,
    evaluate_on_corpora,
)
from dpne.common import (
    PAPER,
    REFERENCE,
    RESULTS,
    SPEED_T,
    best_by_gain,
    corpus,
    git_commit,
    header,
    released_bars,
    write_result,
)
from dpne.jobs import (
    run_job,
)
from dpne.table4 import (
    mean_sd,
)

# ----------------------------------------------------------------------------------------------
# DP-SIPS (Swanberg, Desfontaines & Haney 2023): the parallel DPSU policy, tuned on public text
# ----------------------------------------------------------------------------------------------
SIPS_EPSILONS = (4.0, 1.0)
#: The public-text grid (Brown as pseudo-users): R rounds and the geometric budget ratio.
SIPS_GRID: dict[str, dict[str, Any]] = {
    "sips-R1": {"dpsu_policy": "dp-sips", "dpsu_sips_rounds": 1},
    **{
        f"sips-R{r}-ratio{q:g}": {"dpsu_policy": "dp-sips", "dpsu_sips_rounds": r, "dpsu_sips_ratio": q}
        for r in (2, 3, 4)
        for q in (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    },
}
#: The policies compared (the rest of the configuration at its defaults: c = 1.2, theta = 0.1).
SIPS_BASELINES: dict[str, dict[str, Any]] = {
    "weighted": {"dpsu_policy": "weighted"},
    "policy-gaussian": {"dpsu_policy": "policy-gaussian", "dpsu_policy_cap": 10.0},
}


def sips_choice(grid: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, float]]:
    """The grid entry with the largest geometric mean over the epsilons of its released total
    relative to the weighted policy's (on Brown: public text only)."""
    best, scores = best_by_gain(grid, SIPS_GRID, "weighted", SIPS_EPSILONS)
    return best, SIPS_GRID[best], scores


def sips_round_seconds(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean seconds of each DP-SIPS round (histogram SQL, draw) per release (vocabulary, level k)."""
    rows: dict[str, dict[str, list[float]]] = {}
    for r in reps:
        for t in r.get("sips_timings", []):
            key = f"{t['label']} round {t['round']}"
            rows.setdefault(key, {"histogram_seconds": [], "draw_seconds": []})
            rows[key]["histogram_seconds"].append(t["histogram_seconds"])
            rows[key]["draw_seconds"].append(t["draw_seconds"])
    return {k: {n: round(statistics.fmean(v), 3) for n, v in row.items()} for k, row in rows.items()}


def mode_sips(args: argparse.Namespace) -> None:
    """Tune DP-SIPS (R, ratio) on Brown pseudo-users (public) at eps 4 and 1, then compare the
    chosen setting with the weighted policy and the policy Gaussian on SOTU and ``--users`` (200k)
    generated users, ``--repeat`` runs each: released n-grams, spurious fraction (benchmark-only
    ground truth), DPNE seconds and the per-round SQL seconds. Writes ``results/dpne_sips.json``
    and ``results/dpne_sips.png``."""
    workdir = Path(args.workdir) / "sips"
    users = (args.users or [200_000])[0]
    record = header(
        "dpne_sips",
        {
            **PAPER,
            "max_n": SPEED_T,
            "epsilons": list(SIPS_EPSILONS),
            "repeat": args.repeat,
            "tuning_repeat": args.tuning_repeat,
            "generated_users": users,
            "grid": SIPS_GRID,
            "baselines": SIPS_BASELINES,
            "other_parameters": "defaults: sigma_decay 1.2, dpne_threshold_delta 0.1, variant auto",
        },
    )
    if args.sips_choice:
        name = args.sips_choice
        record["choice"] = {"name": name, "overrides": SIPS_GRID[name], "given_on_command_line": True}
    else:
        grid = budget_runs(
            workdir,
            "brown",
            brown_users(),
            {**SIPS_BASELINES, **SIPS_GRID},
            SIPS_EPSILONS,
            args.tuning_repeat,
        )
        record["public_tuning_brown"] = grid
        name, _, scores = sips_choice(grid)
        record["choice"] = {"name": name, "overrides": SIPS_GRID[name], "scores_vs_weighted": scores}
        write_result("dpne_sips.json", record)
    print(f"chosen on Brown: {name} {SIPS_GRID[name]}", flush=True)
    configs = {**SIPS_BASELINES, "dp-sips": SIPS_GRID[name]}
    evaluate_on_corpora(workdir, users, configs, SIPS_EPSILONS, args.repeat, record, "dpne_sips.json")
    summary: dict[str, Any] = {"reference_sotu_eps4_mean": statistics.fmean(REFERENCE["released_total_runs"])}
    for label, result in record["corpora"].items():
        for eps in SIPS_EPSILONS:
            row = {c: result["runs"][f"{c} eps={eps:g}"]["released_total"]["mean"] for c in configs}
            row["sips_over_policy_gaussian"] = round(row["dp-sips"] / row["policy-gaussian"], 4)
            row["sips_over_weighted"] = round(row["dp-sips"] / row["weighted"], 4)
            row["spurious_fraction"] = {
                c: result["runs"][f"{c} eps={eps:g}"]["spurious_fraction"]["mean"] for c in configs
            }
            row["dpne_seconds"] = {
                c: result["runs"][f"{c} eps={eps:g}"]["dpne_seconds"]["mean"] for c in configs
            }
            summary[f"{label} eps={eps:g}"] = row
    record["summary"] = summary
    print(json.dumps(summary, indent=1))
    write_result("dpne_sips.json", record)
    sips_figure(record)


def mode_sips_speed(args: argparse.Namespace) -> None:
    """DPNE seconds of the three policies at eps 4 on ``--users`` generated users, alternating
    (weighted, policy Gaussian, dp-sips) ``--repeat`` times on one ingest, so that they share the
    machine's load; with dp-sips' per-round seconds. Added to ``results/dpne_sips.json`` as
    ``speed``."""
    workdir = Path(args.workdir) / "sips"
    users = (args.users or [200_000])[0]
    path = corpus(users)
    label = f"generated-{users}"
    base = run_job(workdir, f"{label}-ingest", {"input": str(path), "max_n": SPEED_T, "spurious": False})
    source = {"schema": base["schema"], "warehouse": base["warehouse"]}
    record = json.loads((RESULTS / "dpne_sips.json").read_text(encoding="utf-8"))
    choice = record["choice"]["overrides"]
    configs = {**SIPS_BASELINES, "dp-sips": choice}
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    for i in range(args.repeat):
        for name, overrides in configs.items():
            job = run_job(
                workdir,
                f"speed-{label}-{name}-rep{i}",
                {
                    "input": str(path),
                    "max_n": SPEED_T,
                    "clone_from": source,
                    "spurious": False,
                    "overrides": {**overrides, "epsilon": 4.0},
                },
            )
            rows[name].append(
                {
                    "dpne_seconds": job["timing"]["dpne_seconds"],
                    "stage_seconds": job["timing"]["stage_seconds"],
                    "released_total": job["released_total"],
                    "load_average_1min_before_after": job["load_average_1min_before_after"],
                    "sips_timings": job.get("sips_timings", []),
                }
            )
    speed: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "corpus": label,
        "epsilon": 4.0,
        "note": "alternating runs on one ingest, spurious check off; DPNE seconds only",
    }
    for name, runs in rows.items():
        speed[name] = {"dpne_seconds": mean_sd([r["dpne_seconds"] for r in runs]), "runs": runs}
    speed["dp-sips"]["round_seconds"] = sips_round_seconds(rows["dp-sips"])
    record["speed"] = speed
    print(json.dumps({k: v["dpne_seconds"] for k, v in speed.items() if isinstance(v, dict)}, indent=1))
    print(json.dumps(speed["dp-sips"]["round_seconds"], indent=1))
    write_result("dpne_sips.json", record)


def sips_figure(record: dict[str, Any]) -> None:
    """results/dpne_sips.png: released n-grams per policy, per corpus and epsilon; the Brown grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(label, eps) for label in record["corpora"] for eps in SIPS_EPSILONS]
    grid = record.get("public_tuning_brown")
    n = len(panels) + (1 if grid else 0)
    fig, axes = plt.subplots(1, n, figsize=(3.8 * n, 4), squeeze=False)
    names = ["weighted", "policy-gaussian", "dp-sips"]
    for ax, (label, eps) in zip(axes[0], panels, strict=False):
        released_bars(
            ax, record["corpora"][label]["runs"], names, label, eps, ["#999999", "#6baed6", "#e6550d"], names
        )
    if grid:
        ax = axes[0][-1]
        for eps, marker in zip(SIPS_EPSILONS, ("o", "s"), strict=True):
            base = grid["runs"][f"weighted eps={eps:g}"]["released_total"]["mean"]
            xs = list(SIPS_GRID)
            ys = [grid["runs"][f"{x} eps={eps:g}"]["released_total"]["mean"] / base for x in xs]
            ax.plot(range(len(xs)), ys, marker=marker, label=f"eps = {eps:g}")
            pg = grid["runs"][f"policy-gaussian eps={eps:g}"]["released_total"]["mean"] / base
            ax.axhline(pg, linestyle=":", linewidth=1, color=ax.lines[-1].get_color())
        ax.set_xticks(range(len(xs)), [x.removeprefix("sips-") for x in xs], rotation=60, fontsize=6)
        ax.set_title("Brown (public) tuning: / weighted\n(dotted: policy Gaussian)", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(
        "DP-SIPS vs weighted and policy Gaussian (T = 5, delta 1e-7, eta 0.01, Delta0 100)", fontsize=10
    )
    fig.tight_layout()
    out = RESULTS / "dpne_sips.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
