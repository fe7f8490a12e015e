"""Study (BENCHMARK ONLY): what writing the mixture as one backoff model costs, on users no model saw.

    python benchmarks/studies/lm_merge_study.py [--corpora sotu,generated] [--epsilons 1,4] [--runs 2]
                                                [--generated-users 200000] [--work DIR]
                                                [--out benchmarks/results/lm_merge.json]

The released model is the mixture λ·Q + (1 − λ)·P′ merged into one ARPA backoff model
(``dpngram.lm.mixture.mix_models``): where neither model lists an n-gram, the merged model backs
off with one weight per context, while the per-event mixture λ·Q(e) + (1 − λ)·P′(e) lets each model
back off on its own. Per corpus, ε and run: one default release (``lm_bench.dp_run``, fresh noise) on
lm_bench's training users; then, by post-processing of the released files only, on lm_bench's scored
held-out users (open-vocabulary perplexity, ``dpngram.lm.evaluate``):

* ``merged``: the released model, rebuilt from the release (its own (β, λ));
* ``per_event``: λ·Q(e) + (1 − λ)·P′(e) per event (what the λ selection scores), the same spelling
  cost for OOV tokens;
* ``tail_matched``: the merged model whose unigram level (only ever reached by backing off) mixes Q
  and P′ with μ = Σ_v Q(v)·λ·γ_Q(v) / Σ_v Q(v)·(λ·γ_Q(v) + (1 − λ)·γ_P′(v)), the per-event mixture's
  average share of Q in a bigram context's backoff mass (γ: backoff weights), instead of λ.

Only aggregate metrics are written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# benchmarks/ for the shared helpers (_common, lm_bench, lm/), then benchmarks/studies/ for the
# studies that reuse each other; neither folder is a package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lm.common import log, start_study, study_arguments, study_corpora  # noqa: E402
from lm.dp_run import study_releases  # noqa: E402


def parse_args() -> argparse.Namespace:
    return study_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), "lm_merge")


def _backoffs(model: Any, union: Any) -> np.ndarray:
    from dpngram.lm.mixture import _listed_on

    return np.power(10.0, np.nan_to_num(_listed_on(model, union, 1, None)[1]))


def _rows(release_root: Path, config: Any, eval_text: Path) -> dict[str, Any]:
    import polars as pl

    from dpngram.lm.backoff_scorer import BackoffScorer
    from dpngram.lm.build import ReleasedInputs, adapted_public, mixture_components
    from dpngram.lm.evaluate import _file_sentences, spelling_log10prob
    from dpngram.lm.mixture import _probabilities_on, mix_models, union_ngrams

    part = json.loads((release_root / "report.parts" / "lm_counts.json").read_text())
    part = part.get("report", part)
    _, public, private = mixture_components(ReleasedInputs(release_root), config, part)
    weight, beta = float(part["mix_weight"]), float(part.get("unigram_adaptation", 0.0))
    adapted = adapted_public(public, private, beta)
    union, public_rows = union_ngrams(adapted, private)
    q_unigrams = _probabilities_on(private, union)[1]
    q_share = weight * _backoffs(private, union)
    p_share = (1.0 - weight) * _backoffs(adapted, union)
    mu = float((q_unigrams * q_share).sum() / (q_unigrams * (q_share + p_share)).sum())
    models = {
        "merged": mix_models(adapted, private, weight),
        "tail_matched": mix_models(adapted, private, weight, {1: mu}),
    }
    sentences = [s for s in _file_sentences(eval_text, True) if s]
    flat = pl.Series([t for s in sentences for t in s], dtype=pl.String)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sentences])]).astype(np.int64)
    scores: dict[str, np.ndarray] = {}
    for name, model in {**models, "public_adapted": adapted, "private": private}.items():
        scorer = BackoffScorer.from_model(model)
        rows = scorer.word_rows(flat)
        scores[name] = scorer.score(rows, offsets)
        oov = rows == scorer.unk  # the same for every model: they share V_LM's unigrams
    spelled = sum(spelling_log10prob(w) for w in flat.filter(pl.Series(oov)).to_list())
    scores["per_event"] = np.log10(
        weight * np.power(10.0, scores["private"]) + (1.0 - weight) * np.power(10.0, scores["public_adapted"])
    )
    events = scores["merged"].size
    ppl = {
        k: round(float(10 ** (-(scores[k].sum() + spelled) / events)), 2)
        for k in ("merged", "per_event", "tail_matched")
    }
    return {
        "mix_weight": weight,
        "unigram_adaptation": beta,
        "tail_weight": round(mu, 4),
        "events": events,
        "open_vocab_perplexity": ppl,
        "merged_over_per_event": round(ppl["merged"] / ppl["per_event"], 4),
        "tail_matched_over_merged": round(ppl["tail_matched"] / ppl["merged"], 4),
    }


def main() -> None:
    args = parse_args()
    epsilons, started, out = start_study("lm_merge", args)
    for name, corpus, work, split in study_corpora(args):
        runs = []
        for eps, run, release, config in study_releases(
            corpus, epsilons, args.runs, split["train"], work, args
        ):
            row = {"epsilon": eps, "run": run, **_rows(release["root"], config, split["eval"])}
            log(f"{name} ε={eps:g} run {run}: {json.dumps(row['open_vocab_perplexity'])}")
            runs.append(row)
        ratios = [r["merged_over_per_event"] for r in runs]
        tails = [r["tail_matched_over_merged"] for r in runs]
        out["results"][name] = {
            "runs": runs,
            "merged_over_per_event": {
                "mean": round(float(np.mean(ratios)), 4),
                "min": min(ratios),
                "max": max(ratios),
            },
            "tail_matched_over_merged": {
                "mean": round(float(np.mean(tails)), 4),
                "min": min(tails),
                "max": max(tails),
            },
        }
    out["seconds"] = round(time.perf_counter() - started, 1)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: {m: v[m] for m in v if m != "runs"} for k, v in out["results"].items()}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
