"""Scenarios ``sotu``, ``synthetic``, ``speed``, ``large-baselines``, ``scaling`` and ``figure``: the
paper's Table 4 and Figure 1, the public reference side by side, speed and scaling.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import statistics
from pathlib import Path
from typing import Any

from dpne.common import (
    METHODS,
    PAPER,
    PUBLIC_SENTENCES,
    REFERENCE,
    RESULTS,
    ROOT,
    SEED,
    SOTU,
    SPEED_T,
    TABLE4_T,
    corpus,
    git_commit,
    header,
    machine,
    write_result,
    write_sample_default,
)
from dpne.jobs import (
    run_job,
)


# ----------------------------------------------------------------------------------------------
# Table 4 (per-k counts per method)
# ----------------------------------------------------------------------------------------------
def table4(job: dict[str, Any]) -> dict[str, Any]:
    """Rows DPNE / DPSU-all / DPSU-even / DPSU-single (the k-th column of DPSU-single is the run
    with the whole budget on k), columns k = 1..T and total; None where not run."""
    T = job["max_n"]
    rows: dict[str, list[int | None]] = {"dpne": [lvl["released"] for lvl in job["dpne"]]}
    single: list[int | None] = [None] * T
    for b in job.get("baselines", []):
        if b["method"] == "dpsu-single":
            single[b["k"] - 1] = b["per_k"][b["k"] - 1]
        else:
            rows[b["method"]] = list(b["per_k"])
    if any(v is not None for v in single):
        rows["dpsu-single"] = single
    out = {
        method: {
            "per_k": counts,
            "total": sum(c for c in counts if c is not None) if None not in counts else None,
        }
        for method, counts in rows.items()
    }
    largest = max((lvl["k"] for lvl in job["dpne"] if lvl["released"] > 0), default=0)
    return {"T": T, "largest_k_with_output": largest, "rows": out, "claims": claims(out, T)}


def claims(rows: dict[str, Any], T: int) -> dict[str, Any]:
    """The paper's central claim on these numbers: DPNE total > DPSU-all and DPSU-even totals, and
    DPNE's k-grams > DPSU-single's for every k >= 4 (None where a baseline was not run)."""
    dpne_rows = rows["dpne"]
    out: dict[str, Any] = {}
    for method in ("dpsu-all", "dpsu-even"):
        if method in rows:
            out[f"total_gt_{method}"] = dpne_rows["total"] > rows[method]["total"]
    if "dpsu-single" in rows:
        single = rows["dpsu-single"]["per_k"]
        per_k = {
            k: dpne_rows["per_k"][k - 1] > single[k - 1] for k in range(4, T + 1) if single[k - 1] is not None
        }
        out["gt_dpsu_single_per_k_ge_4"] = per_k
        out["gt_dpsu_single_all_k_ge_4"] = all(per_k.values()) if per_k else None
        out["ties_at_zero"] = [
            k for k in range(4, T + 1) if single[k - 1] == 0 and dpne_rows["per_k"][k - 1] == 0
        ]
    return out


def print_table4(title: str, t4: dict[str, Any]) -> None:
    T = t4["T"]
    print(f"\n{title}")
    head = f"{'method':<13}" + "".join(f"{f'k={k}':>8}" for k in range(1, T + 1)) + f"{'total':>9}"
    print(head)
    print("-" * len(head))
    for method in METHODS:
        if method not in t4["rows"]:
            continue
        row = t4["rows"][method]
        cells = "".join(f"{'-' if c is None else c:>8}" for c in row["per_k"])
        total = "-" if row["total"] is None else row["total"]
        print(f"{method:<13}{cells}{total:>9}")
    print(f"claims: {json.dumps(t4['claims'])}")


def print_spurious(title: str, sp: dict[str, Any]) -> None:
    print(f"\n{title}")
    print(f"{'k':>3}{'released':>10}{'spurious':>10}{'fraction':>10}{'E bound':>9}{'band':>6}")
    for r in sp["per_k"]:
        print(
            f"{r['k']:>3}{r['released']:>10}{r['spurious']:>10}{r['fraction']:>10.4f}"
            f"{r['expected_bound']:>9.1f}{r['band_upper']:>6}"
        )
    print(
        f"all{sp['released']:>10}{sp['spurious']:>10}{sp['fraction']:>10.4f}{sp['expected_bound']:>9.1f}"
        f"{sp['band_upper']:>6}   eta = {sp['eta']}, expected-fraction bound "
        f"{sp['expected_fraction_bound']:.4f}, within band: {sp['within_band']}"
    )


def print_timing(title: str, jobs: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    head = (
        f"{'run':<26}{'users':>9}{'tokens':>12}{'start s':>8}{'ingest s':>9}{'dpne s':>8}"
        f"{'e2e s':>8}{'RSS MB':>8}{'n-grams':>8}"
    )
    print(head)
    print("-" * len(head))
    for j in jobs:
        t = j["timing"]
        print(
            f"{j['name']:<26}{j['corpus']['users']:>9}{j['corpus']['tokens']:>12}{t['startup_seconds']:>8.1f}"
            f"{t['ingest_seconds']:>9.1f}{t['dpne_seconds']:>8.1f}{t['end_to_end_seconds']:>8.1f}"
            f"{j['peak_rss_mb']:>8.0f}{j['released_total']:>8}"
        )


def mean_sd(values: list[float], digits: int = 2) -> dict[str, float]:
    return {
        "mean": round(statistics.fmean(values), digits),
        "sd": round(statistics.stdev(values), digits) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


# ----------------------------------------------------------------------------------------------
# Modes
# ----------------------------------------------------------------------------------------------
def baseline_plan(
    T: int, singles: list[int] | None = None, full: bool = True
) -> list[tuple[str, int | None]]:
    plan: list[tuple[str, int | None]] = [("dpsu-all", None), ("dpsu-even", None)] if full else []
    return plan + [("dpsu-single", k) for k in (singles if singles is not None else range(1, T + 1))]


def mode_sotu(args: argparse.Namespace) -> None:
    if not SOTU.is_file():
        print(
            f"SKIP sotu: {SOTU} not found (the shared corpora live next to the repository, in ../shared/data)"
        )
        return
    workdir = Path(args.workdir) / "sotu"
    record = header(
        "dpne_sotu",
        {
            **PAPER,
            "input": "../shared/data/sotu_users.jsonl.gz",
            "reference_T": SPEED_T,
            "table4_T": TABLE4_T,
            "repeat": args.repeat,
        },
    )
    reps = [
        run_job(workdir, f"sotu-T{SPEED_T}-rep{i}", {"input": str(SOTU), "max_n": SPEED_T})
        for i in range(args.repeat)
    ]
    totals = [r["released_total"] for r in reps]
    ours = {
        "implementation": "dpngram (DuckDB, this machine, 2 cores)",
        "runs": len(reps),
        "released_total": mean_sd(totals),
        "released_per_k_mean": [
            round(statistics.fmean(r["dpne"][k]["released"] for r in reps), 1) for k in range(SPEED_T)
        ],
        "end_to_end_seconds": mean_sd([r["timing"]["end_to_end_seconds"] for r in reps]),
        "dpne_seconds": mean_sd([r["timing"]["dpne_seconds"] for r in reps]),
        "peak_rss_mb_max": max(r["peak_rss_mb"] for r in reps),
        "spurious_fraction": mean_sd([r["spurious"]["fraction"] for r in reps], digits=5),
    }
    ref_mean = statistics.fmean(REFERENCE["released_total_runs"])
    record["reference_comparison"] = {
        "reference": REFERENCE,
        "ours": ours,
        "targets": {
            "more_ngrams_than_reference_mean": ours["released_total"]["mean"] >= ref_mean,
            "more_ngrams_than_reference_best": ours["released_total"]["mean"]
            >= max(REFERENCE["released_total_runs"]),
            "under_tenth_of_tuned_time": ours["end_to_end_seconds"]["max"]
            < REFERENCE["end_to_end_seconds_tuned"] / 10,
            "speedup_vs_tuned": round(
                REFERENCE["end_to_end_seconds_tuned"] / ours["end_to_end_seconds"]["mean"], 1
            ),
            "speedup_vs_untuned": round(
                REFERENCE["end_to_end_seconds"] / ours["end_to_end_seconds"]["mean"], 1
            ),
        },
    }
    record["reference_runs"] = reps
    print_timing(f"SOTU, T = {SPEED_T}: end-to-end runs (fresh process each)", reps)
    print_reference(record["reference_comparison"])
    if not args.no_table4:
        job = run_job(
            workdir,
            f"sotu-T{TABLE4_T}-table4",
            {"input": str(SOTU), "max_n": TABLE4_T, "baselines": baseline_plan(TABLE4_T)},
        )
        record["table4"] = {"corpus": "sotu", "users": job["corpus"]["users"], **table4(job)}
        record["table4_run"] = job
        print_table4(f"Table 4, SOTU ({job['corpus']['users']:,} users), T = {TABLE4_T}", record["table4"])
        print_spurious(f"Spurious k-grams, DPNE on SOTU, T = {TABLE4_T}", job["spurious"])
    write_result("dpne_sotu.json", record)


def print_reference(cmp: dict[str, Any]) -> None:
    ref, ours = cmp["reference"], cmp["ours"]
    print("\nReference comparison, SOTU, eps=4, delta=1e-7, Delta=100, eta=0.01, T=5, both-side")
    head = f"{'implementation':<40}{'n-grams':>20}{'k=1..5':>30}{'end to end':>22}{'peak RSS':>10}"
    print(head)
    print("-" * len(head))
    print(
        f"{'public reference (PySpark, 2 cores)':<40}{'4237 / 4364':>20}"
        f"{'/'.join(map(str, ref['released_per_k_first_run'])):>30}"
        f"{'13.4 min (8.1 tuned)':>22}{'6.3 GB':>10}"
    )
    rt, e2e = ours["released_total"], ours["end_to_end_seconds"]
    label = "dpngram ({} runs)".format(ours["runs"])
    counts = "{:.0f} ± {:.0f}".format(rt["mean"], rt["sd"])
    per_k = "/".join(f"{v:.0f}" for v in ours["released_per_k_mean"])
    seconds = "{:.1f} ± {:.1f} s".format(e2e["mean"], e2e["sd"])
    rss = "{:.2f} GB".format(ours["peak_rss_mb_max"] / 1024)
    print(f"{label:<40}{counts:>20}{per_k:>30}{seconds:>22}{rss:>10}")
    print(f"targets: {json.dumps(cmp['targets'])}")


def parse_baselines(text: str | None) -> list[tuple[str, int | None]]:
    """'dpsu-single:4-9,dpsu-all' -> plan entries."""
    plan: list[tuple[str, int | None]] = []
    for item in filter(None, (text or "").split(",")):
        method, _, ks = item.partition(":")
        if method not in ("dpsu-all", "dpsu-even", "dpsu-single"):
            raise SystemExit(f"--large-baselines: unknown method {method!r}")
        if method == "dpsu-single":
            lo, _, hi = ks.partition("-")
            plan += [(method, k) for k in range(int(lo), int(hi or lo) + 1)]
        else:
            plan.append((method, None))
    return plan


def mode_synthetic(args: argparse.Namespace) -> None:
    from dpngram.text.sample import GENERATOR_VERSION, SampleSpec

    workdir = Path(args.workdir) / "synthetic"
    users_path = corpus(args.users)
    small_path = corpus(args.table4_users)
    record = header(
        "dpne_synthetic",
        {
            **PAPER,
            "generator": {
                "function": "dpngram.text.sample.write_sample",
                "seed": SEED,
                "vocab_size": write_sample_default("vocab_size"),
                "spec": dataclasses.asdict(SampleSpec()),
                "generator_version": GENERATOR_VERSION,
                "public_sentences": PUBLIC_SENTENCES,
                "mean_tokens_per_user": 100,
            },
            "speed_users": args.users,
            "speed_T": SPEED_T,
            "table4_T": TABLE4_T,
            "table4_users_all_baselines": args.table4_users,
            "large_baselines": args.large_baselines,
        },
    )
    record["speed"], record["speed_run"] = speed_run(workdir, args.users, users_path)
    speed = record["speed_run"]

    if not args.no_table4:
        small = run_job(
            workdir,
            f"synth-{args.table4_users}-T{TABLE4_T}-table4",
            {"input": str(small_path), "max_n": TABLE4_T, "baselines": baseline_plan(TABLE4_T)},
        )
        record["table4"] = {
            "corpus": f"generated, {small['corpus']['users']:,} users",
            "users": small["corpus"]["users"],
            **table4(small),
        }
        record["table4_run"] = small
        print_table4(
            f"Table 4, generated {small['corpus']['users']:,} users, T = {TABLE4_T}", record["table4"]
        )
        print_spurious(
            f"Spurious k-grams, DPNE on {small['corpus']['users']:,} users, T = {TABLE4_T}", small["spurious"]
        )
        large = run_job(
            workdir,
            f"synth-{args.users}-T{TABLE4_T}",
            {
                "input": str(users_path),
                "max_n": TABLE4_T,
                "clone_from": {"warehouse": speed["warehouse"], "schema": speed["schema"]},
                "baselines": parse_baselines(args.large_baselines),
            },
        )
        record["table4_large"] = {
            "corpus": f"generated, {large['corpus']['users']:,} users",
            "users": large["corpus"]["users"],
            **table4(large),
            "note": "baselines at this size: only those listed in parameters.large_baselines",
        }
        record["table4_large_run"] = large
        print_table4(
            f"Table 4, generated {large['corpus']['users']:,} users, T = {TABLE4_T}", record["table4_large"]
        )
        print_spurious(
            f"Spurious k-grams, DPNE on {large['corpus']['users']:,} users, T = {TABLE4_T}", large["spurious"]
        )
    write_result("dpne_synthetic_1m.json", record)


def speed_run(workdir: Path, users: int, users_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The speed run at T = 5 (a fresh process): its summary and the job record."""
    speed = run_job(workdir, f"synth-{users}-T{SPEED_T}", {"input": str(users_path), "max_n": SPEED_T})
    t = speed["timing"]
    c = speed["corpus"]
    summary = {
        "users": c["users"],
        "tokens": c["tokens"],
        "tokens_per_user": round(c["tokens"] / c["users"], 1),
        "end_to_end_seconds_ingest_included": t["end_to_end_seconds"],
        "seconds_ingest_excluded": t["dpne_seconds"],
        "ingest_seconds": t["ingest_seconds"],
        "startup_seconds": t["startup_seconds"],
        "users_per_second_ingest_included": round(c["users"] / t["end_to_end_seconds"]),
        "users_per_second_ingest_excluded": round(c["users"] / t["dpne_seconds"]),
        "tokens_per_second_ingest_included": round(c["tokens"] / t["end_to_end_seconds"]),
        "tokens_per_second_ingest_excluded": round(c["tokens"] / t["dpne_seconds"]),
        "level_seconds": t["stage_seconds"],
        "level_share": {s: round(v / t["dpne_seconds"], 3) for s, v in t["stage_seconds"].items()},
        "peak_rss_mb": speed["peak_rss_mb"],
        "targets": {
            "le_10_minutes": t["end_to_end_seconds"] <= 600,
            "rss_le_8_gb": speed["peak_rss_mb"] <= 8 * 1024,
        },
        "released_total": speed["released_total"],
    }
    print_timing(f"Synthetic {users:,} users, T = {SPEED_T} (fresh process)", [speed])
    print("level split (s): " + ", ".join(f"{s} {v:.1f}" for s, v in t["stage_seconds"].items()))
    print_spurious(f"Spurious k-grams, DPNE on {users:,} users, T = {SPEED_T}", speed["spurious"])
    return summary, speed


def mode_speed(args: argparse.Namespace) -> None:
    """Re-measure only the speed run of an existing dpne_synthetic_1m.json (e.g. on a quiet
    machine); Table 4 and the rest of the record are kept."""
    path = RESULTS / "dpne_synthetic_1m.json"
    if not path.is_file():
        raise SystemExit("speed: run the synthetic mode first (needs dpne_synthetic_1m.json)")
    record = json.loads(path.read_text(encoding="utf-8"))
    users = record["parameters"]["speed_users"]
    workdir = Path(args.workdir) / "synthetic"
    record["speed"], record["speed_run"] = speed_run(workdir, users, corpus(users))
    record["speed_remeasured"] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "machine": machine(),
    }
    write_result("dpne_synthetic_1m.json", record)


def mode_large_baselines(args: argparse.Namespace) -> None:
    """Add DPSU baselines on the large corpus to an existing dpne_synthetic_1m.json (its T = 9
    DPNE run's sentences), e.g. ``--large-baselines dpsu-single:4-9``; Table 4 is recomputed."""
    path = RESULTS / "dpne_synthetic_1m.json"
    if not path.is_file() or "table4_large_run" not in json.loads(path.read_text(encoding="utf-8")):
        raise SystemExit("large-baselines: run the synthetic mode first (needs dpne_synthetic_1m.json)")
    plan = parse_baselines(args.large_baselines)
    if not plan:
        raise SystemExit("large-baselines: give --large-baselines, e.g. dpsu-single:4-9")
    record = json.loads(path.read_text(encoding="utf-8"))
    large = record["table4_large_run"]
    job = run_job(
        Path(args.workdir) / "synthetic",
        f"synth-{large['corpus']['users']}-T{large['max_n']}-baselines",
        {
            "input": str(corpus(large["corpus"]["users"])),
            "max_n": large["max_n"],
            "clone_from": {"warehouse": large["warehouse"], "schema": large["schema"]},
            "baselines_only": True,
            "baselines": plan,
        },
    )
    done = {(b["method"], b["k"]) for b in job["baselines"]}
    large["baselines"] = [b for b in large.get("baselines", []) if (b["method"], b["k"]) not in done]
    large["baselines"] += job["baselines"]
    listed = ",".join(filter(None, [record["parameters"].get("large_baselines"), args.large_baselines]))
    record["parameters"]["large_baselines"] = listed
    record["large_baselines_added"] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "peak_rss_mb": job["peak_rss_mb_job"],
    }
    record["table4_large"] = {
        **{k: v for k, v in record["table4_large"].items() if k in ("corpus", "users", "note")},
        **table4(large),
    }
    print_table4(
        f"Table 4, generated {large['corpus']['users']:,} users, T = {large['max_n']}", record["table4_large"]
    )
    write_result("dpne_synthetic_1m.json", record)


def mode_scaling(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir) / "scaling"
    record = header("dpne_scaling", {**PAPER, "T": SPEED_T, "users": args.users, "seed": SEED})
    reuse = None
    synth = RESULTS / "dpne_synthetic_1m.json"
    if synth.is_file() and not args.rerun:
        reuse = json.loads(synth.read_text(encoding="utf-8"))
    points = []
    for n in args.users:
        if reuse and reuse["parameters"]["speed_users"] == n:
            job = reuse["speed_run"]
            source = "dpne_synthetic_1m.json (speed run)"
        else:
            job = run_job(
                workdir,
                f"scale-{n}-T{SPEED_T}",
                {"input": str(corpus(n)), "max_n": SPEED_T, "spurious": False},
            )
            source = "measured here"
        t = job["timing"]
        points.append(
            {
                "users": job["corpus"]["users"],
                "tokens": job["corpus"]["tokens"],
                "ingest_seconds": t["ingest_seconds"],
                "dpne_seconds": t["dpne_seconds"],
                "end_to_end_seconds": t["end_to_end_seconds"],
                "level_seconds": t["stage_seconds"],
                "peak_rss_mb": job["peak_rss_mb"],
                "released_total": job["released_total"],
                "source": source,
            }
        )
    record["points"] = points
    record["fit"] = {
        key: fit_power(points, key) for key in ("dpne_seconds", "end_to_end_seconds", "ingest_seconds")
    }
    print(f"\nScaling, T = {SPEED_T}")
    print(
        f"{'users':>9}{'tokens':>12}{'ingest s':>9}{'dpne s':>8}{'e2e s':>8}{'RSS MB':>8}"
        f"{'n-grams':>9}  source"
    )
    for p in points:
        print(
            f"{p['users']:>9}{p['tokens']:>12}{p['ingest_seconds']:>9.1f}{p['dpne_seconds']:>8.1f}"
            f"{p['end_to_end_seconds']:>8.1f}{p['peak_rss_mb']:>8.0f}{p['released_total']:>9}  {p['source']}"
        )
    for key, fit in record["fit"].items():
        print(f"{key}: time ~ users^{fit['exponent']:.2f}")
    write_result("dpne_scaling.json", record)


def fit_power(points: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Least-squares fit of log(time) = a + b log(users); b is the scaling exponent."""
    xs = [math.log(p["users"]) for p in points]
    ys = [math.log(p[key]) for p in points]
    if len(points) < 2:
        return {"exponent": None}
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return {"exponent": round(b, 3), "seconds_at_1m": round(math.exp(my + b * (math.log(1e6) - mx)), 1)}


def mode_figure(args: argparse.Namespace) -> None:
    """Figure 1 of the paper: released n-grams per length k (log scale), one panel per corpus."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for name in ("dpne_sotu.json", "dpne_synthetic_1m.json"):
        path = RESULTS / name
        if path.is_file():
            rec = json.loads(path.read_text(encoding="utf-8"))
            if "table4" in rec:
                panels.append(rec)
    if not panels:
        print("SKIP figure: no Table 4 results yet (run sotu and/or synthetic first)")
        return
    styles = {
        "dpne": ("DPNE", "o", "-"),
        "dpsu-all": ("DPSU-all", "s", "--"),
        "dpsu-even": ("DPSU-even", "^", "--"),
        "dpsu-single": ("DPSU-single", "D", ":"),
    }
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.4), squeeze=False)
    for ax, rec in zip(axes[0], panels, strict=True):
        t4 = rec["table4"]
        ks = list(range(1, t4["T"] + 1))
        for method in METHODS:
            if method not in t4["rows"]:
                continue
            label, marker, line = styles[method]
            ys = [c if c else float("nan") for c in t4["rows"][method]["per_k"]]
            ax.plot(ks, ys, marker=marker, linestyle=line, label=label)
        large = rec.get("table4_large")
        if large:
            ys = [c if c else float("nan") for c in large["rows"]["dpne"]["per_k"]]
            ax.plot(ks, ys, marker="o", linestyle="-", color="0.45", label=f"DPNE, {large['users']:,} users")
            if "dpsu-single" in large["rows"]:
                ys = [c if c else float("nan") for c in large["rows"]["dpsu-single"]["per_k"]]
                ax.plot(
                    ks,
                    ys,
                    marker="D",
                    linestyle=":",
                    color="0.45",
                    label=f"DPSU-single, {large['users']:,} users",
                )
        title = "SOTU" if rec["benchmark"] == "dpne_sotu" else "Generated corpus"
        ax.set_title(f"{title} ({t4['users']:,} users), T = {t4['T']}")
        ax.set_yscale("log")
        ax.set_xlabel("n-gram length k")
        ax.set_ylabel("released k-grams")
        ax.set_xticks(ks)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Released n-grams per length (ε = 4, δ = 1e-7, Δ0 = 100, η = 0.01)", fontsize=10)
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "dpne_figure1.png"
    fig.savefig(out, dpi=120)
    print(f"figure: {out.relative_to(ROOT)}")
