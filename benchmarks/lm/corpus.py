"""One corpus of the LM benchmark: every row at each ε, the headline and the targets."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

from lm.common import (
    LMPLZ_MEMORY,
    ROOT,
    Corpus,
    eval_sentences,
    log,
    split_users,
    tokenised_text,
)
from lm.dp_run import (
    dp_run,
)
from lm.models import (
    arpa_unigrams,
    at_vocab_model,
    evaluate,
    lmplz_model,
    oracle_model,
)


def headline(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    dp = rows["dp"]["open_vocab_perplexity"]
    pub = rows["public_only"]["open_vocab_perplexity"]
    npv = rows["non_private"]["open_vocab_perplexity"]
    orc = (rows.get("oracle") or {}).get("open_vocab_perplexity")  # None: the oracle was skipped
    gap = math.log(pub / npv)
    return {
        "gap_closed": round(math.log(pub / dp) / gap, 4) if gap > 0 else None,
        "oracle_gap_closed": round(math.log(pub / orc) / gap, 4) if gap > 0 and orc else None,
        "top3_gain_points": round(
            100 * (rows["dp"]["top3_accuracy"] - rows["public_only"]["top3_accuracy"]), 2
        ),
        "top1_gain_points": round(
            100 * (rows["dp"]["top1_accuracy"] - rows["public_only"]["top1_accuracy"]), 2
        ),
        "dp_vs_public": round(dp / pub, 4),
        "dp_over_nonprivate": round(dp / npv, 4),
        "dp_over_oracle": round(dp / orc, 4) if orc else None,
    }


def run_corpus(
    corpus: Corpus,
    epsilons: list[float],
    args: argparse.Namespace,
    *,
    oracle: bool = True,
    at_dp_vocab: bool = True,
    lmplz_memory: str = LMPLZ_MEMORY,
) -> dict[str, Any]:
    """Every row of the module docstring for one corpus and each ε. ``oracle=False`` skips the oracle
    row and ``at_dp_vocab=False`` the two ``*_at_dp_vocab`` rows (both absent from ``rows``; the
    headline's oracle fields are then None); ``lmplz_memory``: lmplz's ``-S`` for every baseline."""
    work = Path(args.work) / corpus.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    log(f"{corpus.name}: splitting users")
    split = split_users(corpus, work)
    train, eval_text = split["train"], split["eval"]
    log(f"{corpus.name}: {split['train_users']:,} training users, {split['scored_users']:,} scored users")
    sizes = {k: v for k, v in split.items() if k not in ("train", "eval")}
    sizes["train_text"] = tokenised_text(train, work / "train.txt", jsonl=True)
    sizes["public_text"] = tokenised_text(corpus.public, work / "public.txt", jsonl=False)
    sentences = eval_sentences(eval_text)
    sizes["eval_text"] = {"sentences": len(sentences), "tokens": sum(len(s) for s in sentences)}
    texts = {k: sizes[k] for k in ("train_text", "public_text", "eval_text")}
    log(f"{corpus.name}: sizes {json.dumps(texts)}")

    baselines: dict[str, dict[str, Any]] = {}
    for name, text in (("public_only", work / "public.txt"), ("non_private", work / "train.txt")):
        seconds = lmplz_model(text, work / f"{name}.binary", work, lmplz_memory)
        baselines[name] = {**evaluate(work / f"{name}.binary", eval_text), "build_seconds": round(seconds, 2)}
        log(
            f"{corpus.name}: {name} {baselines[name]['open_vocab_perplexity']:.1f} (built in {seconds:.1f} s)"
        )
    if oracle:
        built = oracle_model(work / "train.txt", work / "public_only.binary", sentences, eval_text, work)
        binary = built.pop("binary")
        baselines["oracle"] = {**evaluate(binary, eval_text), **built}
        ppl = baselines["oracle"]["open_vocab_perplexity"]
        log(f"{corpus.name}: oracle {ppl:.1f} at λ={built['mix_weight']:g}")
    for name in ("non_private", "oracle"):  # large; the public-only model is not needed any more either
        for suffix in (".arpa", ".binary"):
            (work / f"{name}{suffix}").unlink(missing_ok=True)

    results = []
    run_config: dict[str, Any] = {}
    for eps in epsilons:
        log(f"{corpus.name}: ε={eps:g} pipeline run")
        eps_dir = work / f"eps{eps:g}"
        eps_dir.mkdir()
        run = dp_run(corpus, eps, train, eps_dir, args)
        run_config = {k: v for k, v in run["config"].items() if k != "epsilon"}
        model = run["root"] / "model" / "model.binary"
        rows: dict[str, dict[str, Any]] = {}
        rows["dp"] = {**evaluate(model, eval_text), "build_seconds": run["lm_seconds"]}
        v_lm = arpa_unigrams(model.with_suffix(".arpa")) - {"<s>", "</s>", "<unk>"}
        texts = (("public_only", work / "public.txt"), ("non_private", work / "train.txt"))
        for name, text in texts if at_dp_vocab else ():
            b = eps_dir / f"{name}_at_dp_vocab.binary"
            info = at_vocab_model(text, v_lm, b, eps_dir, lmplz_memory)
            rows[f"{name}_at_dp_vocab"] = {**evaluate(b, eval_text), **info}
        for name in baselines:
            rows[name] = baselines[name]
        counts = run["lm_counts"]
        result = {
            "epsilon": eps,
            "mix_weight": counts["mix_weight"],
            "unigram_adaptation": counts.get("unigram_adaptation"),
            "sigma": counts["sigma"],
            "threshold": counts["threshold"],
            "released_by_order": counts["released_by_order"],
            "domain_by_order": counts["domain_by_order"],
            "dp_vocabulary_size": counts["dp_vocabulary_size"],
            "model_vocabulary_size": counts["model_vocabulary_size"],
            "model_counts": run["lm"]["counts"],
            "lm_stage": {
                "seconds": run["lm_seconds"],
                **run["lm_stage_child"],
                "note": "seconds: stage lm's operator timing (build, compile, validation, model-card "
                "comparison; report parts no longer carry seconds); "
                "peak_rss_mb: max of the VmHWM of the spawned process that ran only stage lm and the "
                "sampled (0.2 s) RSS sum of it and the KenLM tools it started",
            },
            "budget_plan": run["budget_plan"],
            "run_seconds": run["run_seconds"],
            "stage_seconds": run["stage_seconds"],
            "rows": rows,
            "headline": headline(rows),
        }
        results.append(result)
        h = result["headline"]
        log(
            f"{corpus.name}: ε={eps:g} dp {rows['dp']['open_vocab_perplexity']:.1f} "
            f"(public {rows['public_only']['open_vocab_perplexity']:.1f}, non-private "
            f"{rows['non_private']['open_vocab_perplexity']:.1f}), λ={counts['mix_weight']:g}, "
            f"gap_closed {h['gap_closed']}, top3 +{h['top3_gain_points']} pts; run {run['run_seconds']:.0f} s"
        )
        if not args.keep_work:
            shutil.rmtree(eps_dir, ignore_errors=True)
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "corpus": {
            "private": str(corpus.private.relative_to(ROOT.parent))
            if corpus.private.is_relative_to(ROOT.parent)
            else str(corpus.private),
            "public": str(corpus.public.relative_to(ROOT.parent))
            if corpus.public.is_relative_to(ROOT.parent)
            else str(corpus.public),
            **corpus.info,
        },
        "sizes": sizes,
        "run_config": {**run_config, "epsilon": "see results"},
        "baselines": baselines,
        "results": results,
        "targets": targets(corpus.name, results),
        "seconds": round(time.perf_counter() - started, 1),
    }


#: SOTU's targets of the log gap closed, by ε (the issue's, since 2026-11-25).
GAP_TARGETS = {4.0: 0.35, 1.0: 0.20}


def targets(name: str, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, reported (nothing is tuned to meet them): never worse than public-only
    at any ε (>= 0.5), SOTU's gap closed (:data:`GAP_TARGETS`), the generated corpus within 1.5x
    of non-private at ε = 4 (the 1M-user target is lm_growth.json's)."""
    out = []
    for r in results:
        dp = r["rows"]["dp"]["open_vocab_perplexity"]
        pub = r["rows"]["public_only"]["open_vocab_perplexity"]
        out.append(
            {
                "target": "DP <= public-only open-vocab perplexity",
                "epsilon": r["epsilon"],
                "value": round(dp / pub, 4),
                "met": dp <= pub,
            }
        )
    for r in results:
        h, eps = r["headline"], r["epsilon"]
        if name == "sotu" and eps in GAP_TARGETS:
            goal = GAP_TARGETS[eps]
            out.append(
                {
                    "target": f"gap_closed >= {goal:.2f} at ε = {eps:g}",
                    "epsilon": eps,
                    "value": h["gap_closed"],
                    "met": h["gap_closed"] is not None and h["gap_closed"] >= goal,
                }
            )
        if name == "generated" and eps == 4.0:
            out.append(
                {
                    "target": "dp_over_nonprivate <= 1.5 at ε = 4",
                    "epsilon": 4.0,
                    "value": h["dp_over_nonprivate"],
                    "met": h["dp_over_nonprivate"] <= 1.5,
                }
            )
    return out
