"""Study (BENCHMARK ONLY): where Q's unresolved unigram mass should go — P's shape (the spread
before 2026-12-01) or the empirical-Bayes posterior counts (``dpngram.lm.unigram_shrinkage``, the
default since).

    python benchmarks/studies/lm_unigram_shape_study.py [--corpora sotu,sotu-2k,generated]
                                                        [--epsilons 0.5,1,4] [--runs 2]
                                                        [--generated-users 200000] [--work DIR]
                                                        [--out benchmarks/results/lm_unigram_shape.json]

Per corpus, ε and run: one default release (``lm_bench.dp_run``, fresh noise) on lm_bench's training
users. Then, by post-processing of the released files only, for each spread of the unresolved mass
(``public``, ``empirical_bayes``), on the same released counts (a paired comparison):

* Q (``noisy_count_model`` with that spread) and P adapted to Q's unigrams at β ∈ {0.25, 0.5}
  (P′; β = 0 is P), each written as ARPA and scored by KenLM on lm_bench's scored held-out users;
* the per-event mixture λ·Q + (1 − λ)·P′ at the β and λ (grid step 0.05) best ON THE EVALUATION
  TEXT (an oracle: the two spreads compared at their own best weights, without the private
  selection's noise), open-vocabulary perplexity (``dpngram.lm.evaluate``'s events and spelling
  cost).

Plus the released model itself (``model/model.binary``, the product's own private (β, λ), the
empirical-Bayes spread), scored as released. Corpora: ``sotu`` (12,807 users, Brown public),
``sotu-2k`` (its users with sha256(user_id) % 6 == 0, lm_speed_bench's small corpus: little signal
per word) and ``generated`` (lm_bench's generated corpus). Only aggregate perplexities, the oracle
weights and released-row counts are written.
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
from lm.dp_run import study_releases  # noqa: E402
from lm_sources_study import event_logprobs  # noqa: E402

SPREADS = ("public", "empirical_bayes")
BETAS = (0.0, 0.25, 0.5)  # the product's adaptation grid
GRID = np.round(np.arange(0.0, 1.0 + 1e-9, 0.05), 2)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    return study_arguments(parser, "lm_unigram_shape", corpora="sotu,sotu-2k,generated", epsilons="0.5,1,4")


def _perplexity(prob: np.ndarray, spell: np.ndarray) -> float:
    return float(10 ** (-(np.log10(np.maximum(prob, 1e-300)) + spell).mean()))


def _scored(model: Any, path: Path, sentences: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """(probability, spelling log10) per event of ``model`` (written to ``path``, then removed)."""
    from dpngram.lm.arpa_file import write_arpa

    write_arpa(model, path)
    logs, spell = event_logprobs(path, sentences)
    path.unlink()
    return np.power(10.0, logs), spell


def _rows(release_root: Path, config: Any, eval_text: Path, work: Path) -> dict[str, Any]:
    import polars as pl

    from dpngram.lm.build import ReleasedInputs, load_public
    from dpngram.lm.mixture import adapt_to_unigrams
    from dpngram.lm.ngram_tables import unigram_distribution
    from dpngram.lm.open_model import noisy_count_model
    from dpngram.release.layout import LM_COUNTS

    part = json.loads((release_root / "report.parts" / "lm_counts.json").read_text())
    part = part.get("part", part)
    inputs = ReleasedInputs(release_root)
    _vocabulary, public = load_public(inputs, config, part)
    counts = pl.read_parquet(release_root / LM_COUNTS)
    sentences = lm_bench.eval_sentences(eval_text)
    scratch = work / "component.arpa"
    p, spell = _scored(public, scratch, sentences)
    out: dict[str, Any] = {"public_only": round(_perplexity(p, spell), 2)}
    for spread in SPREADS:
        q_model = noisy_count_model(
            counts,
            public,
            int(part["order"]),
            threshold=float(part["threshold"]),
            discount=float(part["discount"]),
            unresolved=spread,
            sigma=float(part["sigma"]),
        )
        q, _ = _scored(q_model, scratch, sentences)
        target = unigram_distribution(q_model)
        found: dict[str, Any] = {"perplexity": float("inf")}
        for beta in BETAS:
            adapted = (
                p if beta == 0 else _scored(adapt_to_unigrams(public, target, beta), scratch, sentences)[0]
            )
            for weight in GRID:
                value = _perplexity(weight * q + (1 - weight) * adapted, spell)
                if value < found["perplexity"]:
                    found = {"perplexity": value, "beta": beta, "lambda": float(weight)}
        found["perplexity"] = round(found["perplexity"], 2)
        out[spread] = found
    out["empirical_bayes_over_public"] = round(
        out["empirical_bayes"]["perplexity"] / out["public"]["perplexity"], 4
    )
    released = lm_bench.evaluate(release_root / "model" / "model.binary", eval_text)
    out["released_model"] = {
        "perplexity": round(released["open_vocab_perplexity"], 2),
        "beta": part.get("unigram_adaptation"),
        "lambda": part.get("mix_weight"),
        "unresolved_unigrams": part.get("unresolved_unigrams"),
    }
    out["sigma"] = part["sigma"]
    out["released_by_order"] = part.get("released_by_order")
    out["events"] = int(spell.size)
    return out


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by_eps: dict[str, Any] = {}
    for eps in sorted({r["epsilon"] for r in runs}):
        ratios = [r["empirical_bayes_over_public"] for r in runs if r["epsilon"] == eps]
        by_eps[f"{eps:g}"] = {
            "empirical_bayes_over_public_mean": round(float(np.mean(ratios)), 4),
            "min": min(ratios),
            "max": max(ratios),
            "runs": len(ratios),
        }
    return by_eps


def main() -> None:
    args = parse_args()
    epsilons, started, out = start_study(
        "lm_unigram_shape",
        args,
        betas=list(BETAS),
        weight_grid_step=0.05,
        weights="ORACLE: best on the evaluation text, per spread",
    )
    for name, corpus, work, split in study_corpora(args):
        runs = []
        for eps, run, release, config in study_releases(
            corpus, epsilons, args.runs, split["train"], work, args
        ):
            row = {"epsilon": eps, "run": run, **_rows(release["root"], config, split["eval"], work)}
            log(
                f"{name} ε={eps:g} run {run}: public {row['public']['perplexity']}, "
                f"empirical Bayes {row['empirical_bayes']['perplexity']} "
                f"(×{row['empirical_bayes_over_public']}), released {row['released_model']['perplexity']}"
            )
            runs.append(row)
        out["results"][name] = {
            "corpus": {k: v for k, v in split.items() if isinstance(v, int)},
            "runs": runs,
            "summary": _summary(runs),
        }
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    finish_study(out, args, started, "summary")


if __name__ == "__main__":
    main()
