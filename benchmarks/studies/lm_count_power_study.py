"""Study (BENCHMARK ONLY): how a user's repeated n-grams should enter the noisy counts of stage
``lm_counts`` — ``lm_count_power`` p, a user's count c entering their vector as c^p before the l2
bound (1: counts, the mechanism before 2026-12-02; 0.5: square roots, the default since; 0:
presence).

    python benchmarks/studies/lm_count_power_study.py [--corpora sotu,generated] [--epsilons 1,4]
                                                      [--powers 1,0.5] [--runs 2] [--merge]
                                                      [--generated-users 200000] [--work DIR]
                                                      [--out benchmarks/results/lm_count_power.json]

Per corpus, ε, run and power: one default release (``lm_bench.dp_run`` with ``lm_count_power`` = p,
every other option at its default, fresh noise) on lm_bench's training users, and its released
model (``model/model.binary``, with the (β, λ) the release chose privately) scored as a user gets it
on lm_bench's scored held-out users: open-vocabulary perplexity and top-3 accuracy
(``lm_bench.evaluate``). The powers of one run follow each other, so each run's rows share the
machine's state; the summary is each power's perplexity over the same run's p = 1 release, mean,
min and max over the runs. ``--merge`` keeps the other corpora's results of an existing ``--out``.
Only aggregate metrics and released-row counts are written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

# benchmarks/ for the shared helpers (_common, lm_bench, lm/), then benchmarks/studies/ for the
# studies that reuse each other; neither folder is a package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import lm_bench  # noqa: E402  (benchmarks/ is not a package)
from lm.common import finish_study, log, start_study, study_arguments, study_corpora  # noqa: E402
from lm.dp_run import dp_run  # noqa: E402

BASELINE_POWER = 1.0  # the counts of before


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--powers", default="1,0.5", help="lm_count_power values (1 is the baseline)")
    parser.add_argument("--merge", action="store_true", help="keep other corpora's results of --out")
    return study_arguments(parser, "lm_count_power")


def _release(
    corpus: Any, eps: float, power: float, split: dict[str, Any], work: Path, args: Any
) -> dict[str, Any]:
    import shutil

    folder = work / f"eps{eps:g}_p{power:g}"
    folder.mkdir()
    try:
        run = dp_run(
            corpus,
            eps,
            split["train"],
            folder,
            args,
            warehouse=work / "wh",  # the public-model cache, shared
            options={"lm_count_power": power},
        )
        metrics = lm_bench.evaluate(run["root"] / "model" / "model.binary", split["eval"])
        part = run["lm_counts"]
        return {
            "power": power,
            "perplexity": round(metrics["open_vocab_perplexity"], 2),
            "top3_accuracy": round(metrics["top3_accuracy"], 4),
            "beta": part.get("unigram_adaptation"),
            "lambda": part.get("mix_weight"),
            "sigma": part.get("sigma"),
            "released_by_order": part.get("released_by_order"),
            "lm_counts_seconds": run["stage_seconds"].get("lm_counts"),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _summary(runs: list[dict[str, Any]], powers: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for eps in sorted({r["epsilon"] for r in runs}):
        block: dict[str, Any] = {}
        for power in powers:
            ratios = []
            for r in (r for r in runs if r["epsilon"] == eps):
                rows = {row["power"]: row["perplexity"] for row in r["releases"]}
                if power in rows and BASELINE_POWER in rows:
                    ratios.append(rows[power] / rows[BASELINE_POWER])
            if ratios:
                block[f"{power:g}"] = {
                    "over_counts_mean": round(float(np.mean(ratios)), 4),
                    "min": round(min(ratios), 4),
                    "max": round(max(ratios), 4),
                    "runs": len(ratios),
                }
        out[f"{eps:g}"] = block
    return out


def main() -> None:
    args = parse_args()
    powers = [float(p) for p in args.powers.split(",")]
    if BASELINE_POWER not in powers:
        powers.insert(0, BASELINE_POWER)
    epsilons, started, out = start_study(
        "lm_count_power",
        args,
        powers=powers,
        delta=args.delta,
        scored="the released model as a user gets it (its privately chosen β, λ)",
    )
    previous = Path(args.out)
    if args.merge and previous.is_file():
        out["results"] = json.loads(previous.read_text(encoding="utf-8")).get("results", {})
    for name, corpus, work, split in study_corpora(args):
        runs = []
        for run in range(args.runs):
            for eps in epsilons:
                releases = []
                for power in powers:
                    row = _release(corpus, eps, power, split, work, args)
                    log(
                        f"{name} ε={eps:g} run {run} p={power:g}: {row['perplexity']} "
                        f"(β {row['beta']}, λ {row['lambda']})"
                    )
                    releases.append(row)
                runs.append({"epsilon": eps, "run": run, "releases": releases})
        out["results"][name] = {
            "corpus": {k: v for k, v in split.items() if isinstance(v, int)},
            "runs": runs,
            "summary": _summary(runs, powers),
        }
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    finish_study(out, args, started, "summary")


if __name__ == "__main__":
    main()
