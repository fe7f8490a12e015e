"""Study (not run by ``make bench``): the release threshold of stage ``lm_counts``'s order-≥2
noisy counts, compared PAIRED on the same noise draws.

    python benchmarks/studies/lm_threshold_study.py [--corpora sotu,generated] [--epsilons 4,1] [--draws 3]
                                                    [--out benchmarks/results/lm_threshold.json]
    python benchmarks/studies/lm_threshold_study.py --merge A.json B.json [--out ...]

Why: with |D_≥2| ≈ 400k order-2/3 coordinates, a 3σ threshold lets through about
|D_≥2|·Φ(−3) ≈ 540 coordinates whose true count is 0, each with a pseudo-count of ≥ 3σ. A
data-independent threshold that bounds the expected number of such spurious releases might make a
better model, or a worse one (fewer real n-grams). The threshold is post-processing of the noisy
vector, so one noisy draw can be thresholded several ways and the models compared on the same noise.

Per (corpus, ε): the data preparation, user split and scoring of ``benchmarks/lm_bench.py``
(imported: ``split_users``, ``generated_corpus``, ``bench_config``, ``evaluate``), one pipeline run of
the steps before ``lm_counts`` (ingest, DPSU, DPNE; stage budget dpne 0.5 / lm_counts 0.5, δ = 1e-6,
joint calibration as in a release), then stage ``lm_counts``'s own functions
(``dpngram.stages.lm_counts``): the count domain, the per-user l2-bounded weighted counts (once),
and per draw a fresh Gaussian release (``noisy_release``, secure noise). For every rule on that same
noisy vector: the thresholded release, the stage's (β, λ) selection (report-noisy-max on the
selection users, exactly ``_select_mix_weight``, with one Laplace vector per draw shared by every
rule: common random numbers, see :class:`SharedSelectionNoise`), the model λ·Q +
(1 − λ)·P_β as stage ``lm`` builds it, ``build_binary``, and lm_bench's evaluation on the held-out
users (open-vocabulary perplexity, top-1/top-3 accuracy).

What varies between draws: the lm_counts noise and the selection's Laplace noise (shared by the
rules within a draw). What does not: the user
split, the DPSU/DPNE release (the domain's k-grams) and the selection users (one salt per (corpus,
ε)). Paired differences are rule − baseline (3σ, discount 1σ) on the same draw.

Also recorded per rule: released order-2/3 rows, the expected number of spurious releases
|D_≥2|·Φ(−τ), and — a benchmark-only measurement that uses the EXACT counts, never computed by the
pipeline — how many released order-≥2 rows have a true weighted count of 0.

``--merge``: combine per-corpus JSON files written by separate runs into one (and re-summarise).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
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
from lm_bench import CACHE, DATA, RESULTS, ROOT, Corpus, log  # noqa: E402

BASELINE = "3σ"
#: name -> (threshold rule, discount in σ). A threshold rule is a number of σ, or ('k', k): the
#: τ with |D_≥2|·Φ(−τ) = k expected spurious order-≥2 releases.
RULES: dict[str, tuple[float | tuple[str, float], float]] = {
    "3σ": (3.0, 1.0),
    "2.5σ": (2.5, 1.0),
    "3.5σ": (3.5, 1.0),
    "4σ": (4.0, 1.0),
    "k=1": (("k", 1.0), 1.0),
    "4σ D=2σ": (4.0, 2.0),
}


def threshold_sigmas(rule: float | tuple[str, float], domain_ge2: int) -> float:
    from scipy.stats import norm

    if isinstance(rule, tuple):
        return float(norm.isf(rule[1] / max(1, domain_ge2)))
    return float(rule)


def expected_spurious(tau: float, domain_ge2: int) -> float:
    from scipy.stats import norm

    return float(domain_ge2 * norm.sf(tau))


class SharedSelectionNoise:
    """The draw's noise source, but every rule's report-noisy-max gets the SAME Laplace vector
    (common random numbers): the selection noise does not depend on the rule, so each rule's
    selection is still distributed exactly as the stage's, and the paired difference between
    rules no longer carries the variance of independent selection draws."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.cache: dict[tuple[float, int, float], Any] = {}

    def laplace_on_grid(self, scale: float, size: int, grid: float) -> Any:
        key = (scale, size, grid)
        if key not in self.cache:
            self.cache[key] = self.source.laplace_on_grid(scale, size, grid)
        return self.cache[key].copy()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)


class Setting:
    """One (corpus, ε): the pipeline up to DPNE, the domain and the exact weighted counts."""

    def __init__(self, corpus: Corpus, eps: float, split: dict[str, Any], work: Path, args) -> None:
        from dpngram.mechanisms.lm_counts import weighted_counts
        from dpngram.mechanisms.lm_selection import candidate_grid
        from dpngram.orchestration.plan import release_steps
        from dpngram.release.context import RunContext
        from dpngram.release.publish import prepare
        from dpngram.stages.lm_counts import STAGE, _count_domain, _read_dp_vocabulary

        self.corpus, self.eps, self.work = corpus, eps, work
        started = time.perf_counter()
        config = prepare(lm_bench.bench_config(corpus, eps, split["train"], work, args))
        self.ctx = RunContext(config)
        self.config = config
        for step in release_steps(config):
            if step.name == STAGE:
                break
            step.run(self.ctx)
        self.epsilon, self.delta = config.stage_share(STAGE)
        self.candidates = candidate_grid(config.lm.mix_weight, config.lm.unigram_adaptation)
        self.holdout = int(round(1000 * config.lm.holdout))
        self.order = config.lm.order
        from dpngram.core.noise import NoiseSource

        self.salt = NoiseSource.secure().salt()
        root = self.ctx.release.root
        self.dp_vocab = _read_dp_vocabulary(root)
        self.domain = _count_domain(config, root, self.dp_vocab)
        with self.ctx.engine() as wh:
            self.weighted = weighted_counts(
                wh,
                self.ctx.schema,
                self.domain,
                salt=self.salt,
                holdout=self.holdout,
                clip=float(config.lm.count_clip),
                power=float(config.lm.count_power),
            )
        import numpy as np

        n = self.domain.frame["n"].to_numpy()
        self.n = n
        self.domain_by_order = {str(k): int((n == k).sum()) for k in range(1, self.order + 1)}
        self.domain_ge2 = int((n >= 2).sum())
        self.true_zero = np.asarray(self.weighted == 0.0)
        self.public = self.domain.public_model
        self.seconds = round(time.perf_counter() - started, 1)

    def draw(self) -> tuple[Any, Any, Any]:
        from dpngram.core.noise import NoiseSource
        from dpngram.mechanisms.lm_counts import noisy_release

        source = NoiseSource.secure()
        noisy, calibration = noisy_release(
            self.weighted,
            epsilon=self.epsilon,
            delta=self.delta,
            clip=float(self.config.lm.count_clip),
            noise=source,
        )
        return noisy, calibration, SharedSelectionNoise(source)

    def evaluate_rule(self, name: str, noisy, sigma: float, source, eval_text: Path) -> dict[str, Any]:
        from dpngram.lm.arpa_file import write_arpa
        from dpngram.lm.build import adapted_public, compile_binary
        from dpngram.lm.mixture import mix_models
        from dpngram.lm.open_model import noisy_count_model
        from dpngram.mechanisms.lm_counts import thresholded_release
        from dpngram.mechanisms.lm_models import CandidateModels
        from dpngram.mechanisms.lm_selection import select_mix_weight
        from dpngram.stages.lm_counts import selection_epsilon

        rule, discount_sigmas = RULES[name]
        started = time.perf_counter()
        tau = threshold_sigmas(rule, self.domain_ge2)
        threshold, discount = tau * sigma, discount_sigmas * sigma
        released, _ = thresholded_release(self.domain, noisy, threshold)
        private = noisy_count_model(
            released.select("n", "ngram", "noisy_count"),
            self.public,
            self.order,
            threshold=threshold,
            discount=discount,
        )
        with self.ctx.engine() as wh:
            beta, lam, _ = select_mix_weight(
                wh,
                self.ctx.schema,
                CandidateModels(self.public, private, adapt=adapted_public),
                self.candidates,
                salt=self.salt,
                holdout=self.holdout,
                epsilon=selection_epsilon(self.config),  # as the stage (docs/lm_privacy.md, section 4)
                noise=source,
            )
        model = mix_models(adapted_public(self.public, private, beta), private, lam)
        arpa = self.work / "model.arpa"
        binary = self.work / "model.binary"
        counts = write_arpa(model, arpa)
        compile_binary(arpa, binary)
        metrics = lm_bench.evaluate(binary, eval_text)
        keep = (self.n == 1) | (noisy >= threshold)
        spurious = {
            str(k): int((keep & self.true_zero & (self.n == k)).sum()) for k in range(2, self.order + 1)
        }
        q_listed = {str(k): int(private.tables[k].height) for k in range(2, self.order + 1)}
        arpa.unlink(missing_ok=True)
        binary.unlink(missing_ok=True)
        return {
            "rule": name,
            "threshold_sigmas": round(tau, 4),
            "discount_sigmas": discount_sigmas,
            "released_by_order": {
                str(k): int(released.filter(released["n"] == k).height) for k in range(2, self.order + 1)
            },
            "expected_spurious": round(expected_spurious(tau, self.domain_ge2), 1),
            "released_true_zero_by_order": spurious,
            "q_rows_by_order": q_listed,
            "unigram_adaptation": beta,
            "mix_weight": lam,
            "model_counts": {str(k): v for k, v in counts.items()},
            "open_vocab_perplexity": metrics["open_vocab_perplexity"],
            "top1_accuracy": metrics["top1_accuracy"],
            "top3_accuracy": metrics["top3_accuracy"],
            "oov_rate": metrics["oov_rate"],
            "seconds": round(time.perf_counter() - started, 1),
        }


def run_corpus(corpus: Corpus, args, out: dict[str, Any], out_json: Path) -> None:
    work = Path(args.work) / corpus.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    split = lm_bench.split_users(corpus, work)
    log(f"{corpus.name}: {split['train_users']:,} training users, {split['scored_users']:,} scored users")
    block = out["results"].setdefault(
        corpus.name,
        {
            "sizes": {k: v for k, v in split.items() if k not in ("train", "eval")},
            "settings": {},
        },
    )
    settings: dict[float, Setting] = {}
    for eps in args.epsilons:
        eps_dir = work / f"eps{eps:g}"
        eps_dir.mkdir()
        log(f"{corpus.name}: ε={eps:g} pipeline up to lm_counts, exact weighted counts")
        s = Setting(corpus, eps, split, eps_dir, args)
        settings[eps] = s
        block["settings"][f"{eps:g}"] = {
            "epsilon": eps,
            "lm_counts_epsilon": s.epsilon,
            "lm_counts_delta": s.delta,
            "domain_by_order": s.domain_by_order,
            "domain_ge2": s.domain_ge2,
            "dp_vocabulary_size": len(s.dp_vocab),
            "model_vocabulary_size": len(s.domain.vocabulary),
            "prepare_seconds": s.seconds,
            "draws": [],
        }
        log(f"{corpus.name}: ε={eps:g} ready in {s.seconds:.0f} s (|D≥2| = {s.domain_ge2:,})")
    for d in range(args.draws):
        for eps, s in settings.items():
            noisy, calibration, source = s.draw()
            sigma = calibration.sigma
            rows = []
            for name in args.rules:
                row = s.evaluate_rule(name, noisy, sigma, source, split["eval"])
                rows.append(row)
                log(
                    f"{corpus.name} ε={eps:g} draw {d} {name}: ppl {row['open_vocab_perplexity']:.2f} "
                    f"top3 {row['top3_accuracy']:.4f} released {row['released_by_order']} "
                    f"(true-zero {row['released_true_zero_by_order']}, expected "
                    f"{row['expected_spurious']}) (β, λ) = ({row['unigram_adaptation']:g}, "
                    f"{row['mix_weight']:g}) {row['seconds']:.0f} s"
                )
            block["settings"][f"{eps:g}"]["draws"].append({"draw": d, "sigma": sigma, "rules": rows})
            out["summary"] = summarise(out["results"])
            write(out, out_json)
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)


def _stats(values: list[float]) -> dict[str, Any]:
    n = len(values)
    mean = statistics.fmean(values) if values else None
    sd = statistics.stdev(values) if n > 1 else None
    se = sd / math.sqrt(n) if sd is not None else None
    return {
        "n": n,
        "mean": round(mean, 4) if mean is not None else None,
        "sd": round(sd, 4) if sd is not None else None,
        "min": round(min(values), 4) if values else None,
        "max": round(max(values), 4) if values else None,
        # beyond the noise: every draw on the same side of 0 and |mean| > 2 standard errors
        "consistent": bool(
            n >= 2
            and (all(v < 0 for v in values) or all(v > 0 for v in values))
            and se is not None
            and abs(mean) > 2 * se
        ),
    }


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    """Paired differences rule − baseline per (corpus, ε): relative perplexity change (%, negative =
    better), top-3 change (points, positive = better)."""
    summary: dict[str, Any] = {}
    for cname, block in results.items():
        for eps, setting in block["settings"].items():
            per_rule: dict[str, dict[str, list[float]]] = {}
            base_ppl: list[float] = []
            for draw in setting["draws"]:
                by = {r["rule"]: r for r in draw["rules"]}
                if BASELINE not in by:
                    continue
                b = by[BASELINE]
                base_ppl.append(b["open_vocab_perplexity"])
                for name, r in by.items():
                    acc = per_rule.setdefault(
                        name, {"ppl": [], "ppl_pct": [], "top3_pts": [], "released_ge2": []}
                    )
                    acc["ppl"].append(r["open_vocab_perplexity"])
                    acc["ppl_pct"].append(100 * (r["open_vocab_perplexity"] / b["open_vocab_perplexity"] - 1))
                    acc["top3_pts"].append(100 * (r["top3_accuracy"] - b["top3_accuracy"]))
                    acc["released_ge2"].append(sum(r["released_by_order"].values()))
            # a rule "Xσ D=Yσ" also against "Xσ" (does the discount have to track the threshold?)
            for name in [r for r in per_rule if " D=" in r and r.split(" D=")[0] in per_rule]:
                base = per_rule[name.split(" D=")[0]]["ppl"]
                per_rule[name]["ppl_pct_vs_same_threshold"] = [
                    100 * (v / b - 1) for v, b in zip(per_rule[name]["ppl"], base, strict=True)
                ]
            summary[f"{cname} ε={eps}"] = {
                name: {
                    "ppl": _stats(acc["ppl"]),
                    "ppl_change_pct_vs_3σ": _stats(acc["ppl_pct"]),
                    "top3_change_points_vs_3σ": _stats(acc["top3_pts"]),
                    "released_ge2_mean": round(statistics.fmean(acc["released_ge2"]), 1),
                    **(
                        {"ppl_change_pct_vs_discount_1σ": _stats(acc["ppl_pct_vs_same_threshold"])}
                        if "ppl_pct_vs_same_threshold" in acc
                        else {}
                    ),
                }
                for name, acc in per_rule.items()
            }
    return summary


def write(out: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def print_summary(summary: dict[str, Any]) -> None:
    for setting, rules in summary.items():
        print(f"\n{setting}")
        for name, s in rules.items():
            p, t = s["ppl_change_pct_vs_3σ"], s["top3_change_points_vs_3σ"]
            print(
                f"  {name:10s} ppl {s['ppl']['mean']:.2f}  Δppl% {p['mean']:+.2f} "
                f"[{p['min']:+.2f}, {p['max']:+.2f}] sd {p['sd']}  Δtop3 {t['mean']:+.2f} pts "
                f"[{t['min']:+.2f}, {t['max']:+.2f}]  released≥2 {s['released_ge2_mean']:.0f}"
                f"{'  *' if p['consistent'] else ''}"
            )


def markdown_table(out: dict[str, Any]) -> str:
    """The docs/lm-history.md table: per (corpus, ε) and rule, mean perplexity, the paired changes against
    3σ (mean [min, max] over the draws), released order-2/3 rows and expected spurious ones."""
    lines = [
        "| corpus, ε | rule (τ) | draws | ppl (mean) | Δ ppl % vs 3σ, mean [min, max] "
        "| Δ top-3, points | released n ≥ 2 | expected spurious | released with true count 0 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cname, block in out["results"].items():
        for eps, setting in block["settings"].items():
            rules = out["summary"][f"{cname} ε={eps}"]
            for name, s in rules.items():
                rows = [r for d in setting["draws"] for r in d["rules"] if r["rule"] == name]
                tau = rows[0]["threshold_sigmas"]
                zero = statistics.fmean(sum(r["released_true_zero_by_order"].values()) for r in rows)
                p, t = s["ppl_change_pct_vs_3σ"], s["top3_change_points_vs_3σ"]
                delta = (
                    "baseline" if name == BASELINE else f"{p['mean']:+.2f} [{p['min']:+.2f}, {p['max']:+.2f}]"
                )
                top3 = (
                    "baseline" if name == BASELINE else f"{t['mean']:+.2f} [{t['min']:+.2f}, {t['max']:+.2f}]"
                )
                lines.append(
                    f"| {cname}, {eps} | {name} ({tau:.2f}σ) | {p['n']} | {s['ppl']['mean']:.1f} | {delta} "
                    f"| {top3} | {s['released_ge2_mean']:,.0f} | {rows[0]['expected_spurious']:,.1f} "
                    f"| {zero:,.0f} |"
                )
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="sotu,generated")
    ap.add_argument("--epsilons", default="4,1")
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--rules", default="3σ,3.5σ,4σ,k=1,4σ D=2σ", help=f"among {list(RULES)} (3σ always runs)")
    ap.add_argument("--users", type=int, default=lm_bench.GENERATED_USERS)
    ap.add_argument("--delta", type=float, default=lm_bench.DELTA)
    ap.add_argument("--memory-limit", default="4GB")
    ap.add_argument("--sotu", default=str(DATA / "sotu_users.jsonl.gz"))
    ap.add_argument("--brown", default=str(DATA / "brown_public.txt.gz"))
    ap.add_argument("--work", default=str(CACHE / "lm_threshold_work"))
    ap.add_argument("--keep-work", action="store_true")
    ap.add_argument("--out", default=str(RESULTS / "lm_threshold.json"))
    ap.add_argument("--merge", nargs="+", default=None, help="combine these JSON files into --out")
    ap.add_argument("--annotation", default=None, help="with --merge: a note stored in the JSON")
    ap.add_argument(
        "--supplement",
        nargs="+",
        default=None,
        help="with --merge: further runs (e.g. other rules on fresh draws) stored under 'supplementary'",
    )
    return ap.parse_args()


def merge(args: argparse.Namespace, out_json: Path) -> None:
    """``--merge``: the per-corpus JSON files of separate runs as one, re-summarised (and the
    ``--supplement`` runs under 'supplementary')."""
    parts = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.merge]
    out = {k: v for k, v in parts[0].items() if k not in ("results", "summary")}
    out["results"] = {}
    out["runs"] = [
        {k: p.get(k) for k in ("date", "machine", "git_commit", "seconds", "corpora_run")} for p in parts
    ]
    for p in parts:
        out["results"].update(p["results"])
    out["summary"] = summarise(out["results"])
    if args.supplement:
        extra = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.supplement]
        results = {k: v for e in extra for k, v in e["results"].items()}
        out["supplementary"] = {
            "runs": [{k: e.get(k) for k in ("date", "git_commit", "parameters", "seconds")} for e in extra],
            "results": results,
            "summary": summarise(results),
        }
        print_summary(out["supplementary"]["summary"])
    if args.annotation:
        out["annotation"] = args.annotation
    write(out, out_json)
    print_summary(out["summary"])
    print("\n" + markdown_table(out))


def study_rules(text: str) -> list[str]:
    """``--rules`` as a list, the baseline first; an unknown rule is refused."""
    rules = [r.strip() for r in text.split(",")]
    if BASELINE not in rules:
        rules.insert(0, BASELINE)
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise SystemExit(f"--rules: unknown {unknown} (known: {list(RULES)})")
    return rules


def study_header(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """The result file before its first corpus: what is compared, with what, on what machine."""
    return {
        "benchmark": "lm_threshold",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": lm_bench.machine(),
        "git_commit": lm_bench.git_commit(),
        "corpora_run": names,
        "parameters": {
            "epsilons": args.epsilons,
            "delta": args.delta,
            "stage_budget": lm_bench.STAGE_BUDGET,
            "max_n": lm_bench.MAX_N,
            "order": lm_bench.ORDER,
            "draws": args.draws,
            "rules": {r: {"threshold": RULES[r][0], "discount_sigmas": RULES[r][1]} for r in args.rules},
            "baseline": BASELINE + " (the default: lm_count_threshold 3, lm_count_discount 1)",
            "generated_users": args.users,
            "holdout": "sha256(user_id) % 10 == 0 (lm_bench.split_users)",
            "paired": "every rule on the same noisy count vector and the same selection Laplace vector "
            "per draw",
            "consistent": "every draw on the same side of 0 and |mean| > 2 standard errors",
        },
        "results": {},
    }


def study_corpus(name: str, args: argparse.Namespace) -> Corpus:
    """The corpus ``--corpora`` names: SOTU (with Brown as public text) or a generated one."""
    if name == "sotu":
        return Corpus("sotu", Path(args.sotu), Path(args.brown), 1, {"users": 12_807})
    if name == "generated":
        return lm_bench.generated_corpus(args.users)
    raise SystemExit(f"--corpora: unknown corpus {name!r} (sotu, generated)")


def study(args: argparse.Namespace, out_json: Path) -> None:
    """Every corpus of ``--corpora`` (:func:`run_corpus` writes after each), then the summary."""
    args.epsilons = [float(e) for e in args.epsilons.split(",")]
    args.rules = study_rules(args.rules)
    started = time.perf_counter()
    names = [c.strip() for c in args.corpora.split(",") if c.strip()]
    out = study_header(args, names)
    for name in names:
        run_corpus(study_corpus(name, args), args, out, out_json)
    out["seconds"] = round(time.perf_counter() - started, 1)
    out["summary"] = summarise(out["results"])
    write(out, out_json)
    print_summary(out["summary"])
    print(f"\nwrote {out_json.relative_to(ROOT) if out_json.is_relative_to(ROOT) else out_json}")


def main() -> None:
    args = parse_args()
    out_json = Path(args.out)
    if args.merge:
        merge(args, out_json)
    else:
        study(args, out_json)


if __name__ == "__main__":
    main()
