"""Two settings of the LM benchmark side by side, from ``lm_bench.py`` outputs of one session.

``lm_bench.py`` writes one JSON per invocation, and a same-session comparison of two settings is
several invocations (a control with the defaults, the setting judged with ``--option``, often split
by corpus or ε so that the decisive cells come first). This script collects them into one record:

    .venv/bin/python benchmarks/studies/lm_compare_runs.py --name lm_new_words_default \\
        --reference "round off" CONTROL.json [CONTROL2.json ...] \\
        --judged "m = 10, every level pays" JUDGED.json [...]

For every (corpus, ε) present on both sides: each side's runs (gap closed, perplexity, OOV rate,
DP vocabulary size, λ and β), the mean and range of the gap closed, the change of the means and the
reference's spread (max − min, the no-regression yardstick of issue 52). Cells of the judged setting
without a reference are kept under ``judged_only``, summarised but not compared. Writes
``results/NAME.json`` (with each input's commit, date, options and machine) and ``results/NAME.png``
(one panel per ε: every run as a dot, the means as bars). Reads only benchmark outputs; runs nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import RESULTS, machine, now  # noqa: E402


def runs_of(paths: list[Path]) -> tuple[dict[tuple[str, str], list[dict[str, Any]]], list[dict[str, Any]]]:
    """Every DP run of the given lm_bench outputs by (corpus, ε), and where each file came from."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    sources = []
    for path in paths:
        data = json.loads(path.read_text())
        sources.append(
            {
                "file": path.name,
                "git_commit": data.get("git_commit"),
                "date": data.get("date"),
                "options": data.get("parameters", {}).get("options"),
                "load_average_1_5_15min": data.get("machine", {}).get("load_average_1_5_15min"),
            }
        )
        for corpus, block in data["results"].items():
            for run in block["results"]:
                dp = run["rows"]["dp"]
                cells.setdefault((corpus, f"{run['epsilon']:g}"), []).append(
                    {
                        "gap_closed": run["headline"]["gap_closed"],
                        "open_vocab_perplexity": round(dp["open_vocab_perplexity"], 2),
                        "oov_rate": round(dp["oov_rate"], 4),
                        "dp_vocabulary_size": run["dp_vocabulary_size"],
                        "mix_weight": run["mix_weight"],
                        "unigram_adaptation": run["unigram_adaptation"],
                        "source": path.name,
                    }
                )
    return cells, sources


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    gaps = [r["gap_closed"] for r in runs]
    return {"mean": round(sum(gaps) / len(gaps), 4), "min": min(gaps), "max": max(gaps), "runs": len(gaps)}


def compare(reference: dict, judged: dict) -> dict[str, Any]:
    """The cells both sides have: runs, summaries, change of the means and the reference's spread."""
    out = {}
    for key in sorted(set(reference) & set(judged)):
        ref, new = summary(reference[key]), summary(judged[key])
        spread = round(ref["max"] - ref["min"], 4)
        change = round(new["mean"] - ref["mean"], 4)
        out[f"{key[0]} eps={key[1]}"] = {
            "corpus": key[0],
            "epsilon": float(key[1]),
            "reference": {**ref, "runs_detail": reference[key]},
            "judged": {**new, "runs_detail": judged[key]},
            "change": change,
            "reference_spread": spread,
            "beyond_spread": abs(change) > spread,
        }
    return out


def plot(cells: dict[str, Any], labels: tuple[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epsilons = sorted({c["epsilon"] for c in cells.values()})
    fig, axes = plt.subplots(1, len(epsilons), figsize=(5 * len(epsilons), 4), squeeze=False)
    for ax, eps in zip(axes[0], epsilons, strict=True):
        rows = [c for c in cells.values() if c["epsilon"] == eps]
        for i, cell in enumerate(rows):
            for offset, side, color in ((-0.18, "reference", "tab:gray"), (0.18, "judged", "tab:blue")):
                gaps = [r["gap_closed"] for r in cell[side]["runs_detail"]]
                ax.bar(i + offset, cell[side]["mean"], width=0.34, color=color, alpha=0.35)
                ax.scatter([i + offset] * len(gaps), gaps, color=color, s=14, zorder=3)
        ax.set_xticks(range(len(rows)), [c["corpus"] for c in rows])
        ax.set_title(f"ε = {eps:g}")
        ax.set_ylabel("share of the log-perplexity gap closed")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c, alpha=0.5) for c in ("tab:gray", "tab:blue")]
    fig.legend(handles, labels, loc="lower center", ncol=2)
    fig.suptitle("LM benchmark, same session: each dot a release, bars the means")
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="output name under benchmarks/results/")
    parser.add_argument("--reference", nargs="+", required=True, metavar="LABEL_THEN_FILES")
    parser.add_argument("--judged", nargs="+", required=True, metavar="LABEL_THEN_FILES")
    args = parser.parse_args()
    (ref_label, *ref_files), (new_label, *new_files) = args.reference, args.judged
    reference, ref_sources = runs_of([Path(p) for p in ref_files])
    judged, new_sources = runs_of([Path(p) for p in new_files])
    cells = compare(reference, judged)
    judged_only = {  # cells without a same-session reference: reported, not compared
        f"{corpus} eps={eps}": {**summary(runs), "runs_detail": runs}
        for (corpus, eps), runs in sorted(judged.items())
        if (corpus, eps) not in reference
    }
    record = {
        "benchmark": args.name,
        "date": now(),
        "machine": machine(),
        "reference": {"label": ref_label, "sources": ref_sources},
        "judged": {"label": new_label, "sources": new_sources},
        "cells": cells,
        "judged_only": judged_only,
    }
    out = RESULTS / f"{args.name}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    plot(cells, (ref_label, new_label), out.with_suffix(".png"))
    for name, cell in cells.items():
        ref, new = cell["reference"], cell["judged"]
        print(
            f"{name:<18} {ref['mean']:.3f} ({ref['min']:.3f}-{ref['max']:.3f})  "
            f"{new['mean']:.3f} ({new['min']:.3f}-{new['max']:.3f})  change {cell['change']:+.3f}  "
            f"spread {cell['reference_spread']:.3f}{'  BEYOND' if cell['beyond_spread'] else ''}"
        )
    for name, cell in judged_only.items():
        print(f"{name:<18} (no reference)  {cell['mean']:.3f} ({cell['min']:.3f}-{cell['max']:.3f})")
    print(f"wrote {out} and {out.with_suffix('.png').name}")


if __name__ == "__main__":
    main()
