"""Scenarios ``budget`` and ``budget-speed``: more from the same budget (DPSU policy, level
schedule, delta split, joint calibration).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from dpne.common import (
    CACHE,
    DATA,
    PAPER,
    REFERENCE,
    RESULTS,
    SOTU,
    SPEED_T,
    corpus,
    header,
    write_result,
)
from dpne.jobs import (
    run_job,
)
from dpne.table4 import (
    mean_sd,
)

# ----------------------------------------------------------------------------------------------
# More from the same budget: DPSU policy, level schedule, delta split, joint calibration
# ----------------------------------------------------------------------------------------------
#: What a run used before these options existed (the paper's choices), and each change alone.
PREVIOUS_DEFAULT = {"dpsu_policy": "weighted", "sigma_decay": 1.0, "dpne_threshold_delta": 0.5}
BUDGET_CONFIGS: dict[str, dict[str, Any]] = {
    "previous-default": PREVIOUS_DEFAULT,
    "policy-gaussian-only": {**PREVIOUS_DEFAULT, "dpsu_policy": "policy-gaussian", "dpsu_policy_cap": 10.0},
    "schedule-and-split-only": {**PREVIOUS_DEFAULT, "sigma_decay": 1.2, "dpne_threshold_delta": 0.1},
    "default": {},  # the current defaults
}
#: The public-text grid the defaults were chosen on (Brown as pseudo-users), around the choice.
TUNING_GRID: dict[str, dict[str, Any]] = {
    "previous-default": PREVIOUS_DEFAULT,
    "default": {},
    **{f"cap-{a:g}": {"dpsu_policy_cap": a} for a in (2.0, 4.0, 6.0, 14.0)},
    **{f"decay-{c:g}": {"sigma_decay": c} for c in (1.0, 1.1, 1.3, 1.5)},
    **{f"threshold-delta-{t:g}": {"dpne_threshold_delta": t} for t in (0.5, 0.9)},
    "weighted": {"dpsu_policy": "weighted"},
}
BROWN = DATA / "brown_public.txt.gz"
BUDGET_EPSILONS = (1.0, 4.0)
#: The run-level stage splits whose composed epsilon is reported (the demo's and the default's).
DEMO_SPLITS = {
    "issue-demo dpne 0.5 / bayes 0.3 / synth 0.2": {"dpne": 0.5, "bayes": 0.3, "synth": 0.2},
    "make demo: dpne 0.4 / lm_counts 0.3 / bayes 0.15 / synth 0.15": {
        "dpne": 0.4,
        "lm_counts": 0.3,
        "bayes": 0.15,
        "synth": 0.15,
    },
}


def brown_users() -> Path:
    """Brown (the public corpus) as pseudo-users of 5 consecutive sentences, like SOTU's users:
    the public data the defaults were chosen on."""
    path = CACHE / "brown_users_5.jsonl"
    if not path.is_file():
        import gzip

        lines = [ln.strip() for ln in gzip.open(BROWN, "rt", encoding="utf-8") if ln.strip()]
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as out:
            for i in range(0, len(lines), 5):
                out.write(
                    json.dumps({"user_id": f"brown{i // 5}", "text": " ".join(lines[i : i + 5])}) + "\n"
                )
    return path


def budget_runs(
    workdir: Path, label: str, input_path: Path, configs: dict[str, dict[str, Any]], epsilons, repeat: int
) -> dict[str, Any]:
    """DPNE at T = 5 (the paper's other parameters) for every config and epsilon, ``repeat`` runs
    each, on one ingest of ``input_path``."""
    base = run_job(
        workdir, f"{label}-ingest", {"input": str(input_path), "max_n": SPEED_T, "spurious": False}
    )
    source = {"schema": base["schema"], "warehouse": base["warehouse"]}
    out: dict[str, Any] = {"users": base["corpus"]["users"], "tokens": base["corpus"]["tokens"], "runs": {}}
    for eps in epsilons:
        for name, overrides in configs.items():
            reps = [
                run_job(
                    workdir,
                    f"{label}-{name}-eps{eps:g}-rep{i}",
                    {
                        "input": str(input_path),
                        "max_n": SPEED_T,
                        "clone_from": source,
                        "overrides": {**overrides, "epsilon": eps},
                    },
                )
                for i in range(repeat)
            ]
            out["runs"][f"{name} eps={eps:g}"] = {
                "config": name,
                "epsilon": eps,
                "overrides": overrides,
                "released_total": mean_sd([r["released_total"] for r in reps]),
                "released_per_k_mean": [
                    round(statistics.fmean(r["dpne"][k]["released"] for r in reps), 1) for k in range(SPEED_T)
                ],
                "spurious_fraction": mean_sd([r["spurious"]["fraction"] for r in reps], digits=5),
                "dpne_seconds": mean_sd([r["timing"]["dpne_seconds"] for r in reps]),
                "runs": [
                    {
                        "released_total": r["released_total"],
                        "released_per_k": [lv["released"] for lv in r["dpne"]],
                        "spurious_fraction": r["spurious"]["fraction"],
                        "dpne_seconds": r["timing"]["dpne_seconds"],
                        "load_average_1min_before_after": r["load_average_1min_before_after"],
                    }
                    for r in reps
                ],
            }
            row = out["runs"][f"{name} eps={eps:g}"]
            print(
                f"{label:>10} eps={eps:<3g} {name:<26} released {row['released_total']['mean']:>8.1f} "
                f"per k {row['released_per_k_mean']} spurious {row['spurious_fraction']['mean']:.4f} "
                f"dpne {row['dpne_seconds']['mean']:.1f} s",
                flush=True,
            )
    return out


def composed_epsilons() -> dict[str, Any]:
    """The run's composed epsilon before (every stage calibrated to its share alone) and after
    joint calibration, for the demo splits and for every combination of stages at equal shares."""
    import itertools

    from dpngram.config import RunConfig

    def row(fractions: dict[str, float], **extra: Any) -> dict[str, Any]:
        # a public corpus named (never read: the plan only needs to know there is one), so that
        # every stage of the split runs; without one the bayes stage is skipped, and a split of
        # bayes alone would plan no stage at all (target epsilon 0)
        values = {
            "input": "x",
            "out": "y",
            "public": "public.txt",
            "epsilon": 4.0,
            "delta": 1e-7,
            "stage_budget": fractions,
            **extra,
        }
        joint = RunConfig.build(**values).budget_plan()
        alone = RunConfig.build(**values, budget_calibration="per-stage").budget_plan()
        return {
            "stage_budget": fractions,
            "target_epsilon": joint.target.epsilon,
            "composed_per_stage": alone.composed_epsilon,
            "composed_joint": joint.composed_epsilon,
            "multiplier": joint.multiplier,
            "relative_error": abs(joint.composed_epsilon - joint.target.epsilon) / joint.target.epsilon,
        }

    demo = {name: row(fr) for name, fr in DEMO_SPLITS.items()}
    combos = []
    stages = ("dpne", "lm_counts", "bayes", "synth")
    for n in range(1, len(stages) + 1):
        for subset in itertools.combinations(stages, n):
            combos.append(row({s: 1.0 / n for s in subset}))
            if "dpne" in subset:  # TrieHH vocabulary: its share, and no sigma_1 reserved
                fr = {s: 1.0 / (n + 1) for s in (*subset, "triehh")}
                combos.append(row(fr, vocabulary_method="triehh"))
    worst = max(c["relative_error"] for c in combos)
    return {"demo_splits": demo, "every_combination": combos, "max_relative_error": worst}


def evaluation_corpora(users: int) -> dict[str, Path]:
    """The evaluation corpora of the DPSU scenarios: SOTU (when ``../shared`` has it) and the
    generated corpus of ``users`` users."""
    corpora: dict[str, Path] = {}
    if SOTU.is_file():
        corpora["sotu"] = SOTU
    corpora[f"generated-{users}"] = corpus(users)
    return corpora


def evaluate_on_corpora(
    workdir: Path,
    users: int,
    configs: dict[str, dict[str, Any]],
    epsilons,
    repeat: int,
    record: dict[str, Any],
    result_name: str,
    generated_repeat: int | None = None,
) -> None:
    """:func:`budget_runs` of ``configs`` on every evaluation corpus into ``record["corpora"]``,
    writing ``results/result_name`` after each corpus (a long scenario keeps what it measured).
    ``generated_repeat``: runs per point on the generated corpus (default ``repeat``)."""
    record["corpora"] = {}
    for label, path in evaluation_corpora(users).items():
        reps = generated_repeat if generated_repeat and label.startswith("generated") else repeat
        record["corpora"][label] = budget_runs(workdir, label, path, configs, epsilons, reps)
        write_result(result_name, record)


def mode_budget(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir) / "budget"
    users = (args.users or [200_000])[0]
    record = header(
        "dpne_budget",
        {
            **PAPER,
            "max_n": SPEED_T,
            "epsilons": list(BUDGET_EPSILONS),
            "repeat": args.repeat,
            "generated_users": users,
            "configs": BUDGET_CONFIGS,
            "tuning_grid": TUNING_GRID,
        },
    )
    record["composed_epsilon"] = composed_epsilons()
    print(json.dumps(record["composed_epsilon"]["demo_splits"], indent=1))
    if BROWN.is_file():  # the public text the defaults were chosen on (epsilon 4 only)
        record["public_tuning_brown"] = budget_runs(
            workdir, "brown", brown_users(), TUNING_GRID, (4.0,), args.repeat
        )
    record["corpora"] = {
        label: budget_runs(workdir, label, path, BUDGET_CONFIGS, BUDGET_EPSILONS, args.repeat)
        for label, path in evaluation_corpora(users).items()
    }
    ref_mean = statistics.fmean(REFERENCE["released_total_runs"])
    targets: dict[str, Any] = {"reference_mean": ref_mean, "reference_target_1_25x": 1.25 * ref_mean}
    for label, result in record["corpora"].items():
        for eps in BUDGET_EPSILONS:
            new = result["runs"][f"default eps={eps:g}"]
            old = result["runs"][f"previous-default eps={eps:g}"]
            targets[f"{label} eps={eps:g}"] = {
                "default": new["released_total"]["mean"],
                "previous_default": old["released_total"]["mean"],
                "gain_over_previous_default": round(
                    new["released_total"]["mean"] / old["released_total"]["mean"], 3
                ),
                "spurious_fraction_default": new["spurious_fraction"]["mean"],
                "dpne_seconds_ratio": round(new["dpne_seconds"]["mean"] / old["dpne_seconds"]["mean"], 2),
            }
            if label == "sotu" and eps == 4.0:
                targets[f"{label} eps={eps:g}"]["gain_over_reference"] = round(
                    new["released_total"]["mean"] / ref_mean, 3
                )
    record["targets"] = targets
    print(json.dumps(targets, indent=1))
    write_result("dpne_budget.json", record)
    budget_figure(record)


def budget_figure(record: dict[str, Any]) -> None:
    """results/dpne_budget.png: released n-grams per configuration, per corpus and epsilon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(label, eps) for label in record["corpora"] for eps in BUDGET_EPSILONS]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), squeeze=False)
    names = list(BUDGET_CONFIGS)
    for ax, (label, eps) in zip(axes[0], panels, strict=True):
        runs = record["corpora"][label]["runs"]
        means = [runs[f"{n} eps={eps:g}"]["released_total"]["mean"] for n in names]
        sds = [runs[f"{n} eps={eps:g}"]["released_total"]["sd"] for n in names]
        ax.bar(range(len(names)), means, yerr=sds, color=["#999999", "#6baed6", "#74c476", "#08519c"])
        ax.set_xticks(range(len(names)), [n.replace("-", "\n", 1) for n in names], fontsize=7)
        if label == "sotu" and eps == 4.0:
            ref = statistics.fmean(REFERENCE["released_total_runs"])
            ax.axhline(ref, color="black", linestyle="--", linewidth=1, label="reference implementation")
            ax.axhline(1.25 * ref, color="red", linestyle=":", linewidth=1, label="target 1.25x reference")
            ax.legend(fontsize=7, loc="lower right")
        ax.set_title(f"{label}, eps = {eps:g}", fontsize=9)
        ax.set_ylabel("released n-grams, k = 1..5")
    fig.suptitle("DPNE at T = 5 (delta 1e-7, eta 0.01, Delta0 100): what each change adds", fontsize=10)
    fig.tight_layout()
    out = RESULTS / "dpne_budget.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def mode_budget_speed(args: argparse.Namespace) -> None:
    """End-to-end time (fresh process: start-up, ingest, DPNE) of the previous default and the
    current default, alternating, ``--repeat`` runs each, on SOTU and on ``--users`` generated users
    (one run each there): the issue's "no slower than today by more than 20%". Run it on a quiet
    machine; every job records the load average."""
    workdir = Path(args.workdir) / "budget_speed"
    users = (args.users or [200_000])[0]
    record = header(
        "dpne_budget_speed",
        {**PAPER, "max_n": SPEED_T, "repeat": args.repeat, "generated_users": users},
    )
    corpora: list[tuple[str, Path, int]] = []
    if SOTU.is_file():
        corpora.append(("sotu", SOTU, args.repeat))
    corpora.append((f"generated-{users}", corpus(users), 1))
    out: dict[str, Any] = {}
    for label, path, reps in corpora:
        rows: dict[str, list[dict[str, Any]]] = {"previous-default": [], "default": []}
        for i in range(reps):
            for name in rows:
                job = run_job(
                    workdir,
                    f"{label}-{name}-rep{i}",
                    {
                        "input": str(path),
                        "max_n": SPEED_T,
                        "spurious": False,
                        "overrides": BUDGET_CONFIGS[name],
                    },
                )
                rows[name].append(
                    {
                        "end_to_end_seconds": job["timing"]["end_to_end_seconds"],
                        "dpne_seconds": job["timing"]["dpne_seconds"],
                        "stage_seconds": job["timing"]["stage_seconds"],
                        "released_total": job["released_total"],
                        "load_average_1min_before_after": job["load_average_1min_before_after"],
                    }
                )
        summary = {
            name: {
                "end_to_end_seconds": mean_sd([r["end_to_end_seconds"] for r in runs]),
                "dpne_seconds": mean_sd([r["dpne_seconds"] for r in runs]),
                "runs": runs,
            }
            for name, runs in rows.items()
        }
        new, old = summary["default"], summary["previous-default"]
        summary["end_to_end_ratio"] = round(
            new["end_to_end_seconds"]["mean"] / old["end_to_end_seconds"]["mean"], 3
        )
        summary["dpne_ratio"] = round(new["dpne_seconds"]["mean"] / old["dpne_seconds"]["mean"], 3)
        out[label] = summary
        print(
            f"{label}: end to end x{summary['end_to_end_ratio']}, DPNE x{summary['dpne_ratio']}", flush=True
        )
    record["corpora"] = out
    record["target"] = "end to end no slower than the previous default by more than 20%"
    record["met"] = all(v["end_to_end_ratio"] <= 1.2 for v in out.values())
    write_result("dpne_budget_speed.json", record)
