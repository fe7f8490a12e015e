"""One corpus of the LM benchmark: every row at each ε, the headline and the targets."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

from _common import baseline_tree

from lm.baseline_run import baseline_release
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
from lm.real_corpora import REAL_CORPORA


def headline(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    dp = rows["dp"]["open_vocab_perplexity"]
    pub = rows["public_only"]["open_vocab_perplexity"]
    npv = rows["non_private"]["open_vocab_perplexity"]
    orc = (rows.get("oracle") or {}).get("open_vocab_perplexity")  # None: the oracle was skipped
    gap = math.log(pub / npv)
    base = (rows.get("dp_baseline") or {}).get("open_vocab_perplexity")  # the --baseline-commit row
    return {
        "gap_closed": round(math.log(pub / dp) / gap, 4) if gap > 0 else None,
        "baseline_gap_closed": round(math.log(pub / base) / gap, 4) if gap > 0 and base else None,
        "dp_over_baseline": round(dp / base, 4) if base else None,
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
    runs = getattr(args, "runs", 1)
    tree = baseline_tree(args.baseline_commit) if getattr(args, "baseline_commit", None) else None
    for eps, run_index in ((e, i) for e in epsilons for i in range(runs)):
        log(f"{corpus.name}: ε={eps:g} pipeline run {run_index + 1}/{runs}")
        eps_dir = work / f"eps{eps:g}_r{run_index}"
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
        if tree is not None:
            log(f"{corpus.name}: ε={eps:g} release by {tree.name}")
            base_dir = eps_dir / "baseline"
            base_dir.mkdir()
            base = baseline_release(tree, eps, train, corpus.public, base_dir, args)
            rows["dp_baseline"] = {
                **evaluate(base["model"], eval_text),
                "build_seconds": None,
                "run_seconds": base["run_seconds"],
                "code": tree.name.removeprefix("baseline_"),
            }
        counts = run["lm_counts"]
        result = {
            "epsilon": eps,
            "run": run_index,
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
        "summary": summary_by_epsilon(results),
        "targets": targets(corpus.name, results),
        "seconds": round(time.perf_counter() - started, 1),
    }


#: SOTU's targets of the log gap closed, by ε (the issue's, since 2026-11-25).
GAP_TARGETS = {4.0: 0.35, 1.0: 0.20}
#: The real user-written corpora's (issue 52, since 2026-12-06): every corpus of
#: benchmarks/lm/real_corpora.py.
REAL_GAP_TARGETS = {4.0: 0.55, 1.0: 0.35}

#: The headline fields :func:`summary_by_epsilon` gives as mean, min and max over runs.
SUMMARY_FIELDS = (
    "gap_closed",
    "baseline_gap_closed",
    "dp_vs_public",
    "dp_over_nonprivate",
    "dp_over_baseline",
)


def summary_by_epsilon(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per ε (keyed '1', '4', ...): the number of runs and, for each of :data:`SUMMARY_FIELDS` the
    runs have, its mean, min and max (the spread of fresh noise; min/max, not a standard deviation,
    with three runs), and the DP row's mean OOV rate and DP vocabulary size."""
    out: dict[str, dict[str, Any]] = {}
    for eps in sorted({r["epsilon"] for r in results}):
        runs = [r for r in results if r["epsilon"] == eps]
        row: dict[str, Any] = {"runs": len(runs)}
        for field in SUMMARY_FIELDS:
            values = [r["headline"][field] for r in runs if r["headline"].get(field) is not None]
            if values:
                row[field] = {
                    "mean": round(sum(values) / len(values), 4),
                    "min": min(values),
                    "max": max(values),
                }
        row["dp_oov_rate"] = round(sum(r["rows"]["dp"]["oov_rate"] for r in runs) / len(runs), 4)
        row["dp_vocabulary_size"] = round(sum(r["dp_vocabulary_size"] for r in runs) / len(runs), 1)
        out[f"{eps:g}"] = row
    return out


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
                "run": r.get("run", 0),
                "value": round(dp / pub, 4),
                "met": dp <= pub,
            }
        )
    for r in results:
        h, eps = r["headline"], r["epsilon"]
        goals = REAL_GAP_TARGETS if name in REAL_CORPORA else GAP_TARGETS if name == "sotu" else {}
        if eps in goals:
            goal = goals[eps]
            out.append(
                {
                    "target": f"gap_closed >= {goal:.2f} at ε = {eps:g}",
                    "epsilon": eps,
                    "run": r.get("run", 0),
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
    for eps, row in summary_by_epsilon(results).items():
        if "baseline_gap_closed" not in row or "gap_closed" not in row:
            continue
        spread = row["gap_closed"]["max"] - row["gap_closed"]["min"]
        out.append(
            {
                "target": f"mean gap_closed >= the baseline commit's - one run's spread at ε = {eps}",
                "epsilon": float(eps),
                "value": row["gap_closed"]["mean"],
                "baseline": row["baseline_gap_closed"]["mean"],
                "spread": round(spread, 4),
                "met": row["gap_closed"]["mean"] >= row["baseline_gap_closed"]["mean"] - spread,
            }
        )
    return out
