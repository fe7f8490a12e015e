"""Study (issue 25 item 2): the language model's quality against the split of the run's budget
among the stages (``stage_budget``), on SOTU, with the product's other parameters at their defaults.

    python benchmarks/studies/lm_split_study.py run [--epsilons 4,1] [--splits NAME,...] [--repeats 1]
                                                    [--baselines] --runs FILE.jsonl
    python benchmarks/studies/lm_split_study.py summarise FILE.jsonl [FILE.jsonl ...]
                                                    [--out benchmarks/results/lm_split.json]

``run`` appends one JSON line per pipeline run to ``--runs`` (flushed after each run, so a pass cut
short keeps what finished); several ``run`` processes (e.g. one per ε) can write separate files.
``summarise`` merges them into ``lm_split.json`` (mean and spread per split and ε, the decision
rule of the issue) and ``lm_split.png``.

Reuses ``benchmarks/lm_bench.py`` (imported, not copied): the user split (``split_users``:
sha256(user_id) % 10 == 0 held out, every held-out SOTU user scored), the tokenised texts and the
lmplz baselines (``tokenised_text``, ``lmplz_model``), the pipeline run (``dp_run`` with
``bench_config``'s ``stage_budget`` / ``max_n`` overrides; stage lm in a spawned child as there)
and the scoring of the ``dp`` row (``evaluate``: open-vocabulary perplexity, top-1 / top-3).

Per run: the split, the joint-calibration factor m and each stage's nominal / calibrated ε
(``RunConfig.budget_plan``), the ε each stage charged (its step summary), DPNE's released rows per
level (dpne.k1 = the DPSU vocabulary, dpne.k2..kT) and in total (k ≥ 2), whether every stage in
the split delivered its artifact (released rows > 0 of ``lm_counts``, ``trigram_dist`` (θ),
``synthetic_sequences``), the model's metrics, the 1/5/15-min load average before and after.
Only aggregate metrics and released-row counts (public outputs) are written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# benchmarks/ for the shared helpers (_common, lm_bench, lm/), then benchmarks/studies/ for the
# studies that reuse each other; neither folder is a package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import lm_bench  # noqa: E402  (benchmarks/ is not a package)
from lm_bench import CACHE, DATA, RESULTS, Corpus, log  # noqa: E402

EPSILONS = (4.0, 1.0)
DELTA = 1e-7  # the product default (lm_bench uses 1e-6)
MAX_N = 5  # the product default T (lm_bench uses 3); the model's order stays 3 (lm_order default)
#: name -> stage_budget. "d40-l30-b15-s15" was the product default when this study was written.
SPLITS: dict[str, dict[str, float]] = {
    "d40-l30-b15-s15": {"dpne": 0.4, "lm_counts": 0.3, "bayes": 0.15, "synth": 0.15},
    "d30-l40-b15-s15": {"dpne": 0.3, "lm_counts": 0.4, "bayes": 0.15, "synth": 0.15},
    "d30-l50-b10-s10": {"dpne": 0.3, "lm_counts": 0.5, "bayes": 0.1, "synth": 0.1},
    "d20-l60-b10-s10": {"dpne": 0.2, "lm_counts": 0.6, "bayes": 0.1, "synth": 0.1},
    "d50-l30-b10-s10": {"dpne": 0.5, "lm_counts": 0.3, "bayes": 0.1, "synth": 0.1},
    "d40-l40-b10-s10": {"dpne": 0.4, "lm_counts": 0.4, "bayes": 0.1, "synth": 0.1},
    "d50-l50 (model only)": {"dpne": 0.5, "lm_counts": 0.5},
}
PREVIOUS_DEFAULT = "d40-l30-b15-s15"  # the default until 2026-11-25


def product_default() -> str:
    """The split that is the product's default now (``DEFAULT_STAGE_BUDGET``): the one the rule judges."""
    from dpngram.config.budget_plan import DEFAULT_STAGE_BUDGET

    return next(name for name, budget in SPLITS.items() if budget == DEFAULT_STAGE_BUDGET)


#: stage -> the released table whose rows show that the stage delivered its artifact
ARTIFACTS = {"lm_counts": "lm_counts", "bayes": "trigram_dist", "synth": "synthetic_sequences"}
PERPLEXITY_TOLERANCE = 0.05  # the issue: the default within 5% of the best split's perplexity
DPNE_TOLERANCE = 0.10  # the brief: keep DPNE's n-gram count within ~10% of the default split's


def load() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"1min": round(one, 2), "5min": round(five, 2), "15min": round(fifteen, 2)}


def run_record(
    corpus: Corpus, split_name: str, eps: float, repeat: int, prep: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """One pipeline run with ``SPLITS[split_name]`` and its scored model (lm_bench's ``dp`` row)."""
    from dpngram.config.budget_plan import DEFAULT_STAGE_BUDGET

    budget = SPLITS[split_name]
    work = prep["work"] / f"run-{time.time_ns()}"
    work.mkdir(parents=True)
    before = load()
    started = time.perf_counter()
    run = lm_bench.dp_run(
        corpus,
        eps,
        prep["train"],
        work,
        args,
        stage_budget=budget,
        max_n=MAX_N,
        warehouse=prep["warehouses"],  # one directory: each run its own file, one cache/public
    )
    model = run["root"] / "model" / "model.binary"
    metrics = lm_bench.evaluate(model, prep["eval"])
    seconds = round(time.perf_counter() - started, 1)
    after = load()
    summaries = run["summaries"]
    plan = run["budget_plan"]
    levels = {
        name.split(".k", 1)[1]: s.get("released_rows")
        for name, s in summaries.items()
        if name.startswith("dpne.k") and name != "dpne.kgrams"
    }
    charged: dict[str, float] = {}
    for name, s in summaries.items():
        stage = name.split(".", 1)[0]
        if s.get("charged_epsilon") is not None:
            charged[stage] = charged.get(stage, 0.0) + float(s["charged_epsilon"])
    delivered = {
        stage: {
            "table": table,
            "released_rows": summaries.get(stage, {}).get("released_rows"),
            "delivered": bool(summaries.get(stage, {}).get("released_rows")),
        }
        for stage, table in ARTIFACTS.items()
        if stage in budget
    }
    counts = run["lm_counts"]
    record = {
        "split": split_name,
        "stage_budget": budget,
        "is_product_default_when_run": budget == DEFAULT_STAGE_BUDGET,
        "epsilon": eps,
        "repeat": repeat,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "load_before": before,
        "load_after": after,
        "seconds": seconds,
        "stage_seconds": run["stage_seconds"],
        "m": plan.get("multiplier"),
        "budget_plan": plan,
        "charged_epsilon": {k: round(v, 6) for k, v in charged.items()},
        "dpne_released_by_level": levels,  # "1": the DPSU vocabulary; "2".."T": k-grams
        "dpne_ngrams_total": sum(v or 0 for k, v in levels.items() if k != "1"),
        "artifacts": delivered,
        "every_artifact_delivered": all(d["delivered"] for d in delivered.values())
        and all(s in budget for s in ARTIFACTS),
        # what the bayes / synth stages released (their report parts: public sizes, tree shape)
        "stage_parts": {
            stage: {
                k: v
                for k, v in (run["parts"].get(stage) or {}).items()
                if k not in ("paths", "paper", "guarantee", "noise_mode") and "seconds" not in k
            }
            for stage in ("bayes", "synth")
            if stage in budget
        },
        "validation_success": (run["parts"].get("validation") or {}).get("success"),
        "lm_counts": {
            k: counts.get(k)
            for k in (
                "sigma",
                "threshold",
                "mix_weight",
                "unigram_adaptation",
                "released_by_order",
                "dp_vocabulary_size",
            )
        },
        "metrics": metrics,
    }
    shutil.rmtree(work, ignore_errors=True)
    for p in (prep["warehouses"] / "runs").glob("*"):  # a run's file, its WAL, its spill dir
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return record


def prepare_corpus(corpus: Corpus, work: Path) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    split = lm_bench.split_users(corpus, work)
    (work / "wh").mkdir()
    return {**split, "work": work, "warehouses": work / "wh"}


def baselines(corpus: Corpus, prep: dict[str, Any]) -> dict[str, Any]:
    """lm_bench's public-only and non-private rows (lmplz, order 3), scored the same way."""
    work = prep["work"]
    out = {}
    lm_bench.tokenised_text(prep["train"], work / "train.txt", jsonl=True)
    lm_bench.tokenised_text(corpus.public, work / "public.txt", jsonl=False)
    for name, text in (("public_only", work / "public.txt"), ("non_private", work / "train.txt")):
        seconds = lm_bench.lmplz_model(text, work / f"{name}.binary", work)
        out[name] = {
            **lm_bench.evaluate(work / f"{name}.binary", prep["eval"]),
            "build_seconds": round(seconds, 2),
        }
        log(f"baseline {name}: {out[name]['open_vocab_perplexity']:.1f}")
    return out


def cmd_run(args: argparse.Namespace) -> None:
    corpus = Corpus("sotu", Path(args.sotu), Path(args.brown), 1, {"users": 12_807})
    if not corpus.private.is_file() or not corpus.public.is_file():
        raise SystemExit(f"shared data not found under {DATA}")
    runs = Path(args.runs)
    runs.parent.mkdir(parents=True, exist_ok=True)
    prep = prepare_corpus(corpus, Path(args.work))
    head = {
        "kind": "header",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": lm_bench.machine(),
        "git_commit": lm_bench.git_commit(),
        "sizes": {k: v for k, v in prep.items() if isinstance(v, int)},
    }
    with open(runs, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(head) + "\n")
    if args.baselines:
        b = {"kind": "baselines", "load_before": load(), **baselines(corpus, prep)}
        b["load_after"] = load()
        with open(runs, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(b, default=str) + "\n")
    names = [n.strip() for n in args.splits.split(";")] if args.splits else list(SPLITS)
    for repeat in range(args.first_repeat, args.first_repeat + args.repeats):
        for eps in [float(e) for e in args.epsilons.split(",")]:
            for name in names:
                log(f"ε={eps:g} split {name} (repeat {repeat + 1})")
                rec = {"kind": "run", **run_record(corpus, name, eps, repeat, prep, args)}
                m = rec["metrics"]
                log(
                    f"  ppl {m['open_vocab_perplexity']:.1f} top3 {m['top3_accuracy']:.3f} m={rec['m']:.3f} "
                    f"dpne {rec['dpne_ngrams_total']} artifacts {rec['every_artifact_delivered']} "
                    f"{rec['seconds']:.0f} s load {rec['load_before']['1min']}->{rec['load_after']['1min']}"
                )
                with open(runs, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(rec, default=str) + "\n")
    if not args.keep_work:
        shutil.rmtree(prep["work"], ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# Summary
# ----------------------------------------------------------------------------------------------
def spread(xs: list[float]) -> dict[str, Any]:
    return {
        "n": len(xs),
        "mean": round(statistics.fmean(xs), 3),
        "min": round(min(xs), 3),
        "max": round(max(xs), 3),
        "sd": round(statistics.stdev(xs), 3) if len(xs) > 1 else None,
    }


def summarise_cells(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per ε and split: mean / min / max / sd over the repeats."""
    cells: dict[str, dict[str, Any]] = {}
    for eps in sorted({r["epsilon"] for r in runs}, reverse=True):
        block = {}
        for name in SPLITS:
            rs = [r for r in runs if r["epsilon"] == eps and r["split"] == name]
            if not rs:
                continue
            block[name] = {
                "stage_budget": SPLITS[name],
                "runs": len(rs),
                "open_vocab_perplexity": spread([r["metrics"]["open_vocab_perplexity"] for r in rs]),
                "top3_accuracy": spread([r["metrics"]["top3_accuracy"] for r in rs]),
                "top1_accuracy": spread([r["metrics"]["top1_accuracy"] for r in rs]),
                "dpne_ngrams_total": spread([float(r["dpne_ngrams_total"]) for r in rs]),
                "dpne_released_by_level_mean": {
                    k: round(statistics.fmean(float(r["dpne_released_by_level"][k]) for r in rs), 1)
                    for k in rs[0]["dpne_released_by_level"]
                },
                "lm_counts_rows_mean": round(
                    statistics.fmean(float(r["artifacts"]["lm_counts"]["released_rows"] or 0) for r in rs), 1
                ),
                "every_artifact_delivered": all(r["every_artifact_delivered"] for r in rs),
                "artifact_rows_mean": {
                    stage: round(
                        statistics.fmean(float(r["artifacts"][stage]["released_rows"] or 0) for r in rs), 1
                    )
                    for stage in rs[0]["artifacts"]
                },
                "synth_tree_mean": {
                    key: round(statistics.fmean(float(r["stage_parts"]["synth"][key]) for r in with_synth), 1)
                    for key in ("released_ngrams", "tree_height")
                }
                if (with_synth := [r for r in rs if "synth" in r.get("stage_parts", {})])
                else None,
                "synth_tree_runs": len(with_synth),
                "m": rs[0]["m"],
                "calibrated_epsilon": {
                    s: round(v["calibrated_epsilon"], 4) for s, v in rs[0]["budget_plan"]["stages"].items()
                },
                "charged_epsilon_mean": {
                    s: round(statistics.fmean(r["charged_epsilon"].get(s, 0.0) for r in rs), 4)
                    for s in rs[0]["charged_epsilon"]
                },
            }
        cells[f"{eps:g}"] = block
    return cells


def decide(cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's rule on the means: the product's default split (:func:`product_default`) must
    deliver every artifact and be within 5% perplexity of the best split that does, at every ε;
    else the best such split whose DPNE n-gram count stays within ~10% of the default's (at every
    ε) becomes the default."""
    default = product_default()
    per_eps = {}
    ok_everywhere = True
    for eps, block in cells.items():
        full = {n: c for n, c in block.items() if c["every_artifact_delivered"]}
        if default not in full:
            per_eps[eps] = {"note": "the default's runs are missing or did not deliver every artifact"}
            ok_everywhere = False
            continue
        best = min(full, key=lambda n: full[n]["open_vocab_perplexity"]["mean"])
        d = full[default]["open_vocab_perplexity"]["mean"]
        b = full[best]["open_vocab_perplexity"]["mean"]
        ratio = d / b
        per_eps[eps] = {
            "best_full_split": best,
            "best_mean_perplexity": b,
            "default_mean_perplexity": d,
            "default_over_best": round(ratio, 4),
            "default_within_5pct": ratio <= 1 + PERPLEXITY_TOLERANCE,
            "model_only_reference": (block.get("d50-l50 (model only)") or {}).get("open_vocab_perplexity"),
        }
        ok_everywhere &= ratio <= 1 + PERPLEXITY_TOLERANCE
    out: dict[str, Any] = {
        "rule": decide.__doc__,
        "default_judged": default,
        "per_epsilon": per_eps,
        "keep_default": ok_everywhere,
    }
    if not ok_everywhere:
        # candidates: deliver every artifact at every ε, DPNE n-grams within 10% of the default's
        eligible = []
        for name in SPLITS:
            blocks = [cells[e].get(name) for e in cells]
            if any(b is None or not b["every_artifact_delivered"] for b in blocks):
                continue
            dpne_ok = all(
                cells[e][name]["dpne_ngrams_total"]["mean"]
                >= (1 - DPNE_TOLERANCE) * cells[e][default]["dpne_ngrams_total"]["mean"]
                for e in cells
            )
            # rank by the geometric mean of perplexity relative to the best at each ε
            score = 1.0
            for e in cells:
                score *= cells[e][name]["open_vocab_perplexity"]["mean"] / per_eps[e]["best_mean_perplexity"]
            eligible.append((score ** (1 / len(cells)), name, dpne_ok))
        eligible.sort()
        out["candidates"] = [
            {"split": n, "relative_perplexity": round(s, 4), "dpne_within_10pct": ok} for s, n, ok in eligible
        ]
        chosen = next((n for s, n, ok in eligible if ok), None)
        out["chosen"] = chosen
    return out


def plot(out: dict[str, Any], path: Path) -> None:
    """Per ε, two panels: top, every run's perplexity per split (mean marked, bar = min–max), zoomed,
    with the band 5% above the best split that delivers every artifact; bottom, the same means on
    the scale of the public-only and non-private baselines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    cells = out["cells"]
    base = out["baselines"]
    fig, axes = plt.subplots(
        2, len(cells), figsize=(6.8 * len(cells), 8.5), squeeze=False, gridspec_kw={"height_ratios": [2.2, 1]}
    )
    for col, (eps, block) in enumerate(cells.items()):
        names = list(block)
        xs = list(range(len(names)))
        ppl = [block[n]["open_vocab_perplexity"] for n in names]
        colors = [
            "C3" if n == product_default() else ("0.55" if not block[n]["every_artifact_delivered"] else "C0")
            for n in names
        ]
        top, bottom = axes[0][col], axes[1][col]
        for x, n, p, c in zip(xs, names, ppl, colors, strict=True):
            runs = [
                r["metrics"]["open_vocab_perplexity"]
                for r in out["runs"]
                if r["split"] == n and f"{r['epsilon']:g}" == eps
            ]
            top.scatter([x] * len(runs), runs, color=c, s=14, alpha=0.6, zorder=3)
            top.errorbar(
                [x],
                [p["mean"]],
                yerr=[[p["mean"] - p["min"]], [p["max"] - p["mean"]]],
                fmt="_",
                markersize=18,
                color=c,
                capsize=5,
                zorder=4,
            )
            top.annotate(
                f"{p['mean']:.0f} (n={p['n']})\ntop-3 {block[n]['top3_accuracy']['mean']:.3f}\n"
                f"{block[n]['dpne_ngrams_total']['mean']:.0f} DPNE ng",
                (x, p["max"]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
            )
            bottom.plot([x], [p["mean"]], "o", color=c)
        best = (out["decision"]["per_epsilon"].get(eps) or {}).get("best_mean_perplexity")
        if best:
            top.axhspan(
                best,
                best * (1 + PERPLEXITY_TOLERANCE),
                color="C2",
                alpha=0.12,
                label="best split delivering every artifact … +5%",
            )
        lo = min(p["min"] for p in ppl)
        hi = max(p["max"] for p in ppl)
        top.set_ylim(lo * 0.97, hi * 1.06)
        top.set_ylabel("open-vocabulary perplexity")
        top.set_title(
            f"ε = {eps} (red: the product default, {product_default()}; grey: not every artifact)", fontsize=9
        )
        top.legend(fontsize=7, loc="lower left")
        if base:
            bottom.axhline(
                base["public_only"]["open_vocab_perplexity"],
                color="C2",
                ls="--",
                label=f"public-only {base['public_only']['open_vocab_perplexity']:.0f}",
            )
            bottom.axhline(
                base["non_private"]["open_vocab_perplexity"],
                color="k",
                ls="--",
                label=f"non-private {base['non_private']['open_vocab_perplexity']:.0f}",
            )
            bottom.set_yscale("log")
            bottom.yaxis.set_major_formatter(ScalarFormatter())
            bottom.yaxis.set_minor_formatter(ScalarFormatter())
            bottom.tick_params(axis="y", which="both", labelsize=7)
            bottom.legend(fontsize=7, loc="center right")
        bottom.set_ylabel("mean perplexity (log)")
        for ax in (top, bottom):
            ax.set_xticks(
                xs,
                [n.replace(" (model only)", "\n(model only)") for n in names],
                rotation=25,
                fontsize=7,
                ha="right",
            )
    fig.suptitle(
        "SOTU held-out users: the language model against the stage_budget split "
        "(T = 5, δ = 1e-7, joint calibration; dNN-lNN-bNN-sNN = dpne/lm_counts/bayes/synth %)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cmd_summarise(args: argparse.Namespace) -> None:
    headers, runs, base = [], [], None
    for f in args.files:
        for line in Path(f).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["kind"] == "header":
                headers.append(row)
            elif row["kind"] == "baselines":
                base = row
            else:
                runs.append(row)
    cells = summarise_cells(runs)
    out = {
        "benchmark": "lm_split",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": headers[0]["machine"] if headers else lm_bench.machine(),
        "git_commit": headers[0]["git_commit"] if headers else lm_bench.git_commit(),
        "passes": headers,
        "parameters": {
            "corpus": "SOTU (../shared/data/sotu_users.jsonl.gz) private, Brown public",
            "split_users": "sha256(user_id) % 10 == 0 held out (lm_bench's split); every held-out "
            "user scored",
            "delta": DELTA,
            "max_n": MAX_N,
            "other_parameters": "product defaults (RunConfig), budget_calibration joint",
            "splits": SPLITS,
            "previous_default": PREVIOUS_DEFAULT,
            "default_judged": product_default(),
            "noise": "fresh secure noise per run (no seed)",
            "metrics": "lm_bench.evaluate: open-vocabulary perplexity, top-1/top-3 next-word accuracy",
        },
        "baselines": base,
        "cells": cells,
        "decision": decide(cells),
        "runs": runs,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
    plot(out, path.with_suffix(".png"))
    print_table(out)
    print(f"wrote {path} and {path.with_suffix('.png').name}")


def print_table(out: dict[str, Any]) -> None:
    head = (
        f"{'ε':>3} {'split':<22} {'n':>2} {'ppl mean':>9} {'min–max':>13} {'top3':>6} {'dpne ng':>8} "
        f"{'lm rows':>8} {'all art.':>8} {'m':>6}"
    )
    print(head)
    for eps, block in out["cells"].items():
        for name, c in block.items():
            p = c["open_vocab_perplexity"]
            print(
                f"{eps:>3} {name:<22} {c['runs']:>2} {p['mean']:>9.1f} {p['min']:>6.1f}–{p['max']:<6.1f} "
                f"{c['top3_accuracy']['mean']:>6.3f} {c['dpne_ngrams_total']['mean']:>8.0f} "
                f"{c['lm_counts_rows_mean']:>8.0f} {str(c['every_artifact_delivered']):>8} {c['m']:>6.3f}"
            )
    print(json.dumps(out["decision"], indent=1))
    print(
        "\n| ε | split (dpne/lm_counts/bayes/synth) | runs | perplexity mean (min–max) | top-3 | "
        "DPNE n-grams k≥2 (per k) | lm_counts rows | θ rows / synth sequences (tree n-grams) | m | "
        "every artifact |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for eps, block in out["cells"].items():
        for name, c in block.items():
            p = c["open_vocab_perplexity"]
            art = c["artifact_rows_mean"]
            levels = "/".join(f"{v:.0f}" for k, v in c["dpne_released_by_level_mean"].items() if k != "1")
            tree = (
                f" ({c['synth_tree_mean']['released_ngrams']:.0f}, n={c['synth_tree_runs']})"
                if c["synth_tree_mean"]
                else ""
            )
            bs = f"{art['bayes']:.0f} / {art['synth']:.0f}{tree}" if "bayes" in art else "— / —"
            print(
                f"| {eps} | {name} | {c['runs']} | {p['mean']:.1f} ({p['min']:.1f}–{p['max']:.1f}) | "
                f"{c['top3_accuracy']['mean']:.3f} | {c['dpne_ngrams_total']['mean']:.0f} ({levels}) | "
                f"{c['lm_counts_rows_mean']:.0f} | {bs} | {c['m']:.3f} | "
                f"{'yes' if c['every_artifact_delivered'] else 'no'} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    r.add_argument("--splits", default=None, help="';'-separated split names (default: all)")
    r.add_argument("--repeats", type=int, default=1)
    r.add_argument("--first-repeat", type=int, default=0, help="index of the first repeat (labels only)")
    r.add_argument("--baselines", action="store_true", help="also build and score public-only / non-private")
    r.add_argument("--runs", required=True, help="JSONL file the runs are appended to")
    r.add_argument("--delta", type=float, default=DELTA)
    r.add_argument("--memory-limit", default="3GB")
    r.add_argument("--sotu", default=str(DATA / "sotu_users.jsonl.gz"))
    r.add_argument("--brown", default=str(DATA / "brown_public.txt.gz"))
    r.add_argument("--work", default=str(CACHE / "lm_split_work"))
    r.add_argument("--keep-work", action="store_true")
    s = sub.add_parser("summarise")
    s.add_argument("files", nargs="+")
    s.add_argument("--out", default=str(RESULTS / "lm_split.json"))
    args = ap.parse_args()
    if args.cmd == "run":
        cmd_run(args)
    else:
        cmd_summarise(args)


if __name__ == "__main__":
    main()
