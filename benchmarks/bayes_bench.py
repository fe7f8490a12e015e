"""KL(private ‖ released) vs ε for BayesianDP, the §4.2 Laplace baselines and the public-only
distribution (Ramadan et al., Figure 1), on SOTU (private, one pseudo-user per 5 sentences) with
Brown as the public prior.

    python benchmarks/bayes_bench.py [--vocab 50000] [--reps 3] [--W 32] [--C 1]

Writes benchmarks/results/bayes_w<W>.json (machine, date, parameters, per-ε results) and a PNG
(stable names: a rerun replaces the previous result for the same W).
The KL is computed from the exact private counts on V: evaluation only, never released. The
private data are ingested with the pipeline's ingest (same tokenizer); V = the top-|V| Brown
trigrams (no DPNE run here, so no <unk> mapping and no released trigrams in V).

Methods: ``bayesian`` (default stage: public tuning of (S, ρ), data-independent sensitivity),
``bayesian-oracle-NOT-DP`` ((S, ρ) chosen by the private KL: an upper bound on what tuning can
reach), ``bayesian-bruteforce-NOT-DP`` (public-tuned (S, ρ), noise calibrated to the paper's
brute-force sensitivity), ``laplace``, ``laplace-public``, ``public-only`` (softmax(μ_p)).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import RESULTS, git_commit, machine, write_result  # noqa: E402

from dpngram.config import RunConfig  # noqa: E402
from dpngram.core.noise import NoiseSource  # noqa: E402
from dpngram.mechanisms import bayes  # noqa: E402
from dpngram.release.context import RunContext  # noqa: E402
from dpngram.release.publish import prepare  # noqa: E402
from dpngram.stages.ingest import run_ingest  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
EPSILONS = (0.1, 0.2, 0.5, 1.0, 2.0, 4.0)
#: The methods drawn ``reps`` times per ε (``public-only`` is one number per run).
METHODS = (
    "bayesian",
    "bayesian-oracle-NOT-DP",
    "bayesian-bruteforce-NOT-DP",
    "laplace",
    "laplace-public",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--private", default=str(DATA / "sotu_users.jsonl.gz"))
    ap.add_argument("--public", default=str(DATA / "brown_public.txt.gz"))
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--W", type=int, default=64)
    ap.add_argument("--C", type=int, default=1)
    ap.add_argument("--log-clip", type=float, default=4.0)
    ap.add_argument("--delta", type=float, default=1e-6)
    ap.add_argument("--epsilons", default=",".join(str(e) for e in EPSILONS))
    return ap.parse_args(argv)


def epsilon_row(
    wh: Any,
    inputs: Any,
    exact: Any,
    public_kl: float,
    eps: float,
    args: argparse.Namespace,
    noise: NoiseSource,
) -> dict:
    """Every method's KL at one ε: ``args.reps`` fresh draws each, the tuned and oracle (S, ρ)."""
    hp = {"C": args.C, "log_clip": args.log_clip}
    tuned = bayes.tune_on_public(
        wh, inputs, epsilon=eps, delta=args.delta, C=args.C, W=args.W, log_clip=args.log_clip
    )
    res: dict[str, list[float]] = {m: [] for m in METHODS}

    def draw(S: float, rho: float, sensitivity: float | None = None) -> float:
        bound = sensitivity or bayes.sensitivity_bound(W=args.W, S=S, rho=rho, vocab_size=inputs.size, **hp)
        cal = bayes.calibrate(eps, args.delta, bound, inputs.size)
        mu = bayes.posterior_mean(inputs.total_count, inputs.users, inputs.public, S=S, rho=rho, **hp)
        return bayes.kl_divergence(exact, bayes.softmax(bayes.release_logits(mu, cal, noise)))

    # oracle: best grid point by one private-KL draw each (NOT DP), then fresh draws
    oracle = min(((S, r) for S in bayes.S_GRID for r in bayes.RHO_GRID), key=lambda p: draw(*p))
    brute = bayes.bruteforce_sensitivity_not_dp(wh, inputs, S=tuned.S, rho=tuned.rho, **hp)
    for _ in range(args.reps):
        res["bayesian"].append(draw(tuned.S, tuned.rho))
        res["bayesian-oracle-NOT-DP"].append(draw(*oracle))
        res["bayesian-bruteforce-NOT-DP"].append(draw(tuned.S, tuned.rho, brute))
        noisy, scale = bayes.laplace_noisy_counts(
            inputs.total_count, epsilon=eps, C=args.C, W=args.W, noise=noise
        )
        res["laplace"].append(bayes.kl_divergence(exact, bayes.laplace_distribution(noisy)))
        res["laplace-public"].append(
            bayes.kl_divergence(exact, bayes.laplace_public_distribution(noisy, inputs.public, scale))
        )
    bound = bayes.sensitivity_bound(W=args.W, S=tuned.S, rho=tuned.rho, vocab_size=inputs.size, **hp)
    return {
        "epsilon": eps,
        "S": tuned.S,
        "rho": tuned.rho,
        "oracle_S": oracle[0],
        "oracle_rho": oracle[1],
        "sensitivity_bound": bound,
        "bruteforce_sensitivity_NOT_DP": brute,
        "sigma": bayes.calibrate(eps, args.delta, bound, inputs.size).sigma,
        "public-only": public_kl,
        **{m: {"mean": float(np.mean(v)), "std": float(np.std(v)), "runs": v} for m, v in res.items()},
    }


def print_row(row: dict, public_kl: float) -> None:
    print(
        f"eps={row['epsilon']:<4} S={row['S']:<6} rho={row['rho']:<5} bayes={row['bayesian']['mean']:.4f} "
        f"oracle={row['bayesian-oracle-NOT-DP']['mean']:.4f} "
        f"brute={row['bayesian-bruteforce-NOT-DP']['mean']:.4f} "
        f"laplace={row['laplace']['mean']:.4f} lap+pub={row['laplace-public']['mean']:.4f} "
        f"public={public_kl:.4f}",
        flush=True,
    )


def bench_config(args: argparse.Namespace, tmp: str) -> RunConfig:
    """The run the private corpus is ingested into. Its split is never charged (the rows call the
    mechanism at each ε); it is the default one, which passes the run's pre-check (a split without
    a dpne share is refused there: tests/test_bench_runner.py)."""
    return RunConfig.build(
        input=args.private,
        public=args.public,
        out=f"{tmp}/out",
        warehouse=f"{tmp}/wh",
        epsilon=1.0,
        delta=args.delta,
        memory_limit="4GB",
    )


def run_epsilons(args: argparse.Namespace, epsilons: list[float], started: float) -> dict:
    """Ingest the private corpus into a temporary run, then one row per ε. Returns the rows, the
    vocabulary size, the preparation time and the evaluation-only private facts."""
    with tempfile.TemporaryDirectory(prefix="bayes-bench-") as tmp:
        config = bench_config(args, tmp)
        ctx = RunContext(prepare(config))
        run_ingest(ctx)
        noise = NoiseSource.secure()
        with ctx.warehouse() as wh:
            inputs = bayes.prepare_inputs(
                wh,
                ctx.schema,
                public_path=args.public,
                vocabulary=None,
                released=bayes.released_trigrams(None),
                C=args.C,
                W=args.W,
                vocab_size=args.vocab,
                salt=noise.salt(),
                user_counts_table=True,  # the NOT-DP brute-force row reads the per-user table
            )
            # the run counts from the sentences directly; the exact counts read an occurrence table
            occurrences = bayes.PRIVATE_OCCURRENCES
            bayes.trigram_occurrences(wh, ctx.schema, "sentences", occurrences, inputs.unk_mapped)
            exact = bayes.exact_counts_for_evaluation(wh, ctx.schema, bayes.PRIVATE_OCCURRENCES, inputs.size)
            prep_seconds = time.perf_counter() - started
            mu_p = bayes.prior_mean(inputs.public)
            public_kl = bayes.kl_divergence(exact, bayes.softmax(mu_p))
            rows = []
            for eps in epsilons:
                row = epsilon_row(wh, inputs, exact, public_kl, eps, args, noise)
                rows.append(row)
                print_row(row, public_kl)
            return {
                "rows": rows,
                "vocab_size": inputs.size,
                "prep_seconds": prep_seconds,
                "private_mean_log": float(np.log1p(inputs.total_count).mean()),  # evaluation only
                "covered": float(exact.sum()),
            }


def print_table(rows: list[dict]) -> None:
    print()
    names = ("Bayes", "oracle*", "brute*", "Laplace", "Lap+pub", "public")
    header = f"{'eps':>5} | " + " | ".join(f"{n:>8}" for n in names)
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['epsilon']:>5} | {r['bayesian']['mean']:8.4f} | "
            f"{r['bayesian-oracle-NOT-DP']['mean']:8.4f} | "
            f"{r['bayesian-bruteforce-NOT-DP']['mean']:8.4f} | {r['laplace']['mean']:8.4f} | "
            f"{r['laplace-public']['mean']:8.4f} | {r['public-only']:8.4f}"
        )
    print("* NOT DP (comparison only)")


def save_results(args: argparse.Namespace, run: dict, started: float) -> None:
    """benchmarks/results/bayes_w<W>.json and its PNG."""
    payload = {
        "benchmark": "bayes_kl_vs_epsilon",
        "date": dt.datetime.now(dt.UTC).isoformat(),
        "git_commit": git_commit(),
        "machine": machine(),
        "parameters": {
            "private": Path(args.private).name,
            "public": Path(args.public).name,
            "vocab_cap": args.vocab,
            "vocab_size": run["vocab_size"],
            "W": args.W,
            "C": args.C,
            "log_clip": args.log_clip,
            "delta": args.delta,
            "reps": args.reps,
            "S_grid": bayes.S_GRID,
            "rho_grid": bayes.RHO_GRID,
        },
        "evaluation_only_private_facts": {
            "mean_log_count_on_V": run["private_mean_log"],
            "private_tokens_on_V": run["covered"],
        },
        "prep_seconds": round(run["prep_seconds"], 1),
        "seconds": round(time.perf_counter() - started, 1),
        "results": run["rows"],
    }
    path = write_result(f"bayes_w{args.W}.json", payload)
    _plot(run["rows"], RESULTS / f"bayes_w{args.W}.png", run["vocab_size"])
    print(f"results: {path}")


def main() -> None:
    args = parse_args()
    epsilons = [float(e) for e in args.epsilons.split(",")]
    started = time.perf_counter()
    run = run_epsilons(args, epsilons, started)
    print_table(run["rows"])
    save_results(args, run, started)


def _plot(rows: list[dict], path: Path, vocab: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = [r["epsilon"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for method, style in (
        ("bayesian", "o-"),
        ("laplace", "s-"),
        ("laplace-public", "^-"),
        ("bayesian-oracle-NOT-DP", "o:"),
        ("bayesian-bruteforce-NOT-DP", "x:"),
    ):
        ax.errorbar(
            eps,
            [r[method]["mean"] for r in rows],
            yerr=[r[method]["std"] for r in rows],
            fmt=style,
            label=method,
            capsize=2,
        )
    ax.plot(eps, [r["public-only"] for r in rows], "k--", label="public-only")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("KL(private || released)")
    ax.set_title(f"SOTU (private) + Brown (public), |V| = {vocab}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
