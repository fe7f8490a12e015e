"""How the DP language model's quality grows with the number of users: the generated corpus of
``benchmarks/lm_bench.py`` at several sizes (default 100k, 300k, 1M users) and ε (default 1 and 4).

    python benchmarks/lm_growth_bench.py [--users 100000,300000,1000000] [--epsilons 1,4]
                                         [--quick] [--memory-limit 4GB] [--oracle-max-users N]
    python benchmarks/lm_growth_bench.py --combine A.json B.json [--out PATH]

Reuses ``benchmarks/lm_bench.py`` (imported, not copied): the generated corpus
(``generated_corpus``), the held-out split (``split_users``), the per-corpus run with its baselines
and DP runs (``run_corpus``) and the headline metrics (``headline``: gap_closed = ln(ppl_public /
ppl_dp) / ln(ppl_public / ppl_nonprivate), dp_over_nonprivate, dp_vs_public on open-vocabulary
perplexity). Rows per size and ε: ``dp``, ``public_only``, ``non_private`` and, for sizes up to
``--oracle-max-users`` (default 1,000,000; at 1M users its pure-Python exact counting of ~90M
tokens took 6 min on 2 loaded cores, against 16 min for the rest of the size), ``oracle``; the
``*_at_dp_vocab`` rows of lm_bench are not built (they cost two extra lmplz runs per ε on the full
training text and are not part of this question).

Same evaluation users and public corpus at every size:

* ``write_sample`` draws users chunk by chunk (20,000 users) from one random stream, so a corpus of
  N users is the first N users of any larger one when N is a multiple of the chunk size (the run
  checks this byte by byte and records it as ``prefix_of_largest``);
* the scored users are the held-out users (sha256(user_id) % 10 == 0) of the SMALLEST corpus with
  (sha256 // 10) % k == 0, k chosen so that about ``SCORED_TOKENS`` tokens are scored; every larger
  corpus for which the prefix check holds scores exactly those users (``Corpus.scored_ids``), so the
  evaluation text is identical across sizes. A size failing the check falls back to lm_bench's
  ``score_every`` with k scaled to its size (about the same number of tokens, other users);
* the public corpus ``write_sample`` draws after the users depends on the number of users; every
  size uses the smallest corpus's public corpus instead, so public_only is one model throughout.
* ``--base-users N`` takes the scored users and the public corpus from the N-user corpus instead of
  the smallest size (sizes run as separate processes, merged with ``--combine``, then agree).

Each size runs in its own scratch folder (``benchmarks/.data/lm_growth_work/u<N>``, removed per ε
and at the end unless ``--keep-work``); lmplz runs with ``-S LMPLZ_MEMORY`` (3G) and its temporary
files there. The 1-minute load average is sampled every 30 s during each size: the machine is
shared, so the seconds are wall times under that load, not clean timings.

Output: benchmarks/results/lm_growth.json and lm_growth.png (gap closed vs users, log x, one line per
ε; dp / non-private perplexity vs users with the issue's target, ≤ 1.25× at 1M users and ε = 4).
``--quick``: 20,000 and 40,000 users at ε = 4, written to benchmarks/.data/lm_growth_quick.json/.png.
``--combine`` merges the size blocks of several outputs of this script (e.g. sizes run as separate
processes) into one JSON and plot.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import gzip
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lm_bench  # noqa: E402  (benchmarks/ is not a package)
from _common import git_commit, machine  # noqa: E402
from _common import load_average as load_1min  # noqa: E402
from lm_bench import CACHE, RESULTS, ROOT, Corpus, log  # noqa: E402

USERS = (100_000, 300_000, 1_000_000)
EPSILONS = (1.0, 4.0)
QUICK_USERS = (20_000, 40_000)
QUICK_EPSILON = 4.0
SCORED_TOKENS = 200_000  # evaluation tokens aimed at (lm_bench's 200k-user run scores ~194k)
TOKENS_PER_USER = 100  # SampleSpec.mean_tokens_per_user: sizes the scored fraction before reading
ORACLE_MAX_USERS = 1_000_000  # larger sizes skip the oracle (slow exact counting)
LMPLZ_MEMORY = "3G"  # lmplz -S on a 24 GB machine shared with other work
TARGET = {"ratio": 1.25, "users": 1_000_000, "epsilon": 4.0}
ROWS = ("dp", "public_only", "non_private", "oracle")


def score_every(n_users: int) -> int:
    """k such that the held-out users (a tenth) with (sha256 // 10) % k == 0 hold ~SCORED_TOKENS."""
    return max(1, round(n_users / lm_bench.HOLDOUT_MOD * TOKENS_PER_USER / SCORED_TOKENS))


def is_prefix(small: Path, large: Path, block: int = 1 << 20) -> bool:
    """Whether the decompressed bytes of gzip file ``small`` are the start of those of ``large``."""
    with gzip.open(small, "rb") as a, gzip.open(large, "rb") as b:
        while True:
            x = a.read(block)
            if not x:
                return True
            if b.read(len(x)) != x:
                return False


def scored_ids(users: Path, every: int) -> frozenset[str]:
    """The held-out users of ``users`` (JSON lines) with (sha256 // 10) % every == 0."""
    out: set[str] = set()
    with gzip.open(users, "rt", encoding="utf-8") as fh:
        for line in fh:
            uid = str(json.loads(line)["user_id"])
            h = lm_bench.user_hash(uid)
            if h % lm_bench.HOLDOUT_MOD == 0 and (h // lm_bench.HOLDOUT_MOD) % every == 0:
                out.add(uid)
    return frozenset(out)


def corpora(sizes: list[int], base_users: int | None = None) -> tuple[list[Corpus], dict[str, Any]]:
    """The generated corpus at each size, with the public corpus and scored users of the corpus of
    ``base_users`` users (default: the smallest size)."""
    smallest = base_users or min(sizes)
    base = lm_bench.generated_corpus(smallest)
    every = score_every(smallest)
    ids = scored_ids(base.private, every)
    out, checks = [], {}
    for n in sorted(sizes):
        c = lm_bench.generated_corpus(n)
        prefix = n == smallest or is_prefix(base.private, c.private)
        k = every if prefix else score_every(n)
        checks[str(n)] = {"smallest_corpus_is_prefix": prefix, "score_every": k, "same_scored_users": prefix}
        info = {
            **c.info,
            "public_corpus": str(base.public.relative_to(ROOT)),
            "public_corpus_note": f"the {smallest:,}-user corpus's public corpus, used at every size",
            "scored_rule": (
                f"held-out users of the {smallest:,}-user corpus with (sha256 // 10) % {every} == 0 "
                "(the same users at every size)"
                if prefix
                else f"held-out users with (sha256 // 10) % {k} == 0 (not the other sizes' users)"
            ),
        }
        out.append(Corpus("generated", c.private, base.public, k, info, ids if prefix else None))
    return out, checks


def ppl(rows: dict[str, Any], name: str) -> float | None:
    return (rows.get(name) or {}).get("open_vocab_perplexity")


def size_summary(block: dict[str, Any]) -> list[dict[str, Any]]:
    """One compact row per ε of a run_corpus block (the table of docs/lm.md)."""
    out = []
    for r in block["results"]:
        h = r["headline"]
        out.append(
            {
                "epsilon": r["epsilon"],
                "perplexity": {name: ppl(r["rows"], name) for name in ROWS},
                "top3_accuracy": {name: (r["rows"].get(name) or {}).get("top3_accuracy") for name in ROWS},
                "gap_closed": h["gap_closed"],
                "dp_over_nonprivate": h["dp_over_nonprivate"],
                "dp_vs_public": h["dp_vs_public"],
                "oracle_gap_closed": h["oracle_gap_closed"],
                "mix_weight": r["mix_weight"],
                "released_by_order": r["released_by_order"],
                "seconds": {
                    "pipeline_run": r["run_seconds"],
                    "stages": r["stage_seconds"],
                    "lm_stage_peak_rss_mb": r["lm_stage"].get("peak_rss_mb"),
                },
            }
        )
    return out


class LoadSampler:
    """The 1-minute load average every ``interval`` seconds in a thread (the machine is shared)."""

    def __init__(self, interval: float = 30.0) -> None:
        import threading

        self.samples = [load_1min()]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.samples.append(load_1min())

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        self.samples.append(load_1min())
        xs = self.samples
        return {
            "start": xs[0],
            "end": xs[-1],
            "mean": round(sum(xs) / len(xs), 2),
            "max": max(xs),
            "samples": len(xs),
        }


def run_size(corpus: Corpus, epsilons: list[float], args: argparse.Namespace) -> dict[str, Any]:
    """lm_bench.run_corpus on one size (its own scratch folder), with the load during it."""
    n = corpus.info["n_users"]
    sub = copy.copy(args)
    sub.work = str(Path(args.work) / f"u{n}")
    oracle = n <= args.oracle_max_users
    log(f"u{n}: {'with' if oracle else 'without'} the oracle; load {load_1min()}")
    load = LoadSampler()
    try:
        block = lm_bench.run_corpus(
            corpus, epsilons, sub, oracle=oracle, at_dp_vocab=False, lmplz_memory=LMPLZ_MEMORY
        )
    finally:
        block_load = load.stop()
    block["oracle"] = (
        "built" if oracle else f"skipped (n_users > --oracle-max-users {args.oracle_max_users:,})"
    )
    block["load_average_1min"] = {**block_load, "note": "sampled every 30 s during this size"}
    block["summary"] = size_summary(block)
    shutil.rmtree(sub.work, ignore_errors=True)
    return block


def target_check(results: dict[str, Any]) -> dict[str, Any]:
    users, eps, ratio = TARGET["users"], TARGET["epsilon"], TARGET["ratio"]
    row = next((s for s in (results.get(str(users)) or {}).get("summary", []) if s["epsilon"] == eps), None)
    value = row["dp_over_nonprivate"] if row else None
    return {
        "target": f"dp_over_nonprivate <= {ratio} at {users:,} users and ε = {eps:g}",
        "value": value,
        "met": None if value is None else value <= ratio,
    }


def plot(out: dict[str, Any], path: Path) -> None:
    """Left: gap closed vs users; right: dp / non-private perplexity vs users; one line per ε."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(int(n) for n in out["results"])
    epsilons = sorted({s["epsilon"] for n in sizes for s in out["results"][str(n)]["summary"]})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, eps in enumerate(epsilons):
        xs, gap, ratio = [], [], []
        for n in sizes:
            s = next((s for s in out["results"][str(n)]["summary"] if s["epsilon"] == eps), None)
            if s is not None:
                xs.append(n)
                gap.append(s["gap_closed"])
                ratio.append(s["dp_over_nonprivate"])
        axes[0].plot(xs, gap, "o-", color=f"C{i}", label=f"ε = {eps:g}")
        axes[1].plot(xs, ratio, "o-", color=f"C{i}", label=f"ε = {eps:g}")
        for x, g, r in zip(xs, gap, ratio, strict=True):
            axes[0].annotate(f"{g:.2f}", (x, g), textcoords="offset points", xytext=(4, 4), fontsize=7)
            axes[1].annotate(f"{r:.2f}×", (x, r), textcoords="offset points", xytext=(4, 4), fontsize=7)
    oracle = [  # ε-independent: the first ε's row of each size that built it
        (n, s["oracle_gap_closed"], s["perplexity"]["oracle"] / s["perplexity"]["non_private"])
        for n in sizes
        for s in out["results"][str(n)]["summary"][:1]
        if s["perplexity"]["oracle"]
    ]
    if oracle:
        xs, gap, ratio = zip(*oracle, strict=True)
        label = "oracle (exact counts, 3,000 words, λ best on the evaluation text)"
        axes[0].plot(xs, gap, "s--", color="0.5", markersize=4, label=label)
        axes[1].plot(xs, ratio, "s--", color="0.5", markersize=4, label=label)
    axes[1].axhline(1.0, color="k", linestyle="--", linewidth=0.8, label="non-private")
    axes[1].plot(
        [TARGET["users"]],
        [TARGET["ratio"]],
        "*",
        color="C3",
        markersize=13,
        label=f"target: ≤ {TARGET['ratio']}× at {TARGET['users']:,} users, ε = {TARGET['epsilon']:g}",
    )
    axes[1].axhline(TARGET["ratio"], color="C3", linestyle=":", linewidth=0.8)
    for ax, label in (
        (axes[0], "gap closed (0 = public-only, 1 = non-private)"),
        (axes[1], "DP / non-private open-vocabulary perplexity"),
    ):
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{n // 1000:,}k" if n < 1_000_000 else f"{n / 1e6:g}M" for n in sizes])
        ax.minorticks_off()
        ax.set_xlabel("users in the generated corpus (90% train)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    handles, labels = axes[1].get_legend_handles_labels()  # the ε lines are in the left legend
    keep = [i for i, t in enumerate(labels) if not t.startswith(("ε", "oracle"))]
    axes[1].legend([handles[i] for i in keep], [labels[i] for i in keep], fontsize=8, loc="center right")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(bottom=0.9)
    scored = {out["results"][str(n)]["sizes"]["eval_text"]["tokens"] for n in sizes}
    fig.suptitle(
        "DP language model vs users (generated corpus, order 3; "
        f"{'same' if out.get('same_scored_users') else 'per-size'} held-out users scored, "
        f"{min(scored):,}{'' if len(scored) == 1 else f'–{max(scored):,}'} tokens)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def finish(out: dict[str, Any], out_json: Path) -> None:
    """Derived fields, the JSON and the plot (after each size, so a run cut short keeps what ran)."""
    out["results"] = dict(sorted(out["results"].items(), key=lambda kv: int(kv[0])))
    out["table"] = [
        {"users": int(n), **{k: s[k] for k in ("epsilon", "perplexity", "gap_closed", "dp_over_nonprivate")}}
        for n, block in out["results"].items()
        for s in block["summary"]
    ]
    out["target"] = target_check(out["results"])
    out["same_scored_users"] = all(
        c["same_scored_users"] for n, c in out["scoring"].items() if n in out["results"]
    )
    out["machine"]["load_average_1min_at_end"] = load_1min()
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
    plot(out, out_json.with_suffix(".png"))


def combine(paths: list[Path], out_json: Path) -> None:
    """One output from several runs of this script: every size block, tagged with the run it came
    from; when two runs hold the same size the later file's block is used and the earlier one's
    compact rows are kept under ``replaced_runs`` (another noise draw, not discarded silently)."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    out = copy.deepcopy(runs[0])
    out["combined_from"] = [
        {"file": p.name, "date": r["date"], "git_commit": r["git_commit"], "machine": r["machine"]}
        for p, r in zip(paths, runs, strict=True)
    ]
    out["results"], out["scoring"], replaced = {}, {}, []
    for path, r in zip(paths, runs, strict=True):
        for n, block in r["results"].items():
            block["run"] = {"file": path.name, "date": r["date"], "git_commit": r["git_commit"]}
            if n in out["results"]:
                old = out["results"][n]
                replaced.append(
                    {"users": int(n), "run": old["run"], "oracle": old["oracle"], "summary": old["summary"]}
                )
            out["results"][n] = block
        out["scoring"].update(r["scoring"])
    out["replaced_runs"] = replaced
    out["parameters"]["users"] = sorted(int(n) for n in out["results"])
    out["parameters"]["oracle_max_users"] = "per run: see oracle_by_size"
    out["parameters"]["oracle_by_size"] = {n: b["oracle"] for n, b in out["results"].items()}
    finish(out, out_json)
    print(f"wrote {out_json} and {out_json.with_suffix('.png').name}")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", default=",".join(str(n) for n in USERS))
    ap.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    ap.add_argument(
        "--quick", action="store_true", help=f"smoke test: {QUICK_USERS} users, ε = {QUICK_EPSILON:g}"
    )
    ap.add_argument("--memory-limit", default="4GB", help="DuckDB memory limit of the pipeline runs")
    ap.add_argument("--delta", type=float, default=lm_bench.DELTA)
    ap.add_argument("--oracle-max-users", type=int, default=ORACLE_MAX_USERS)
    ap.add_argument(
        "--base-users",
        type=int,
        default=None,
        help="corpus size whose scored users and public corpus every size uses (default: the smallest "
        "of --users; set it when sizes run as separate processes to be combined)",
    )
    ap.add_argument("--work", default=str(CACHE / "lm_growth_work"), help="scratch folder (removed per size)")
    ap.add_argument("--keep-work", action="store_true")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/lm_growth.json)")
    ap.add_argument("--combine", nargs="+", default=None, metavar="JSON", help="merge earlier outputs")
    return ap.parse_args()


def grid(args: argparse.Namespace) -> tuple[list[int], list[float], Path]:
    """The user counts, the ε and the output path: ``--quick``'s unless given explicitly."""
    explicit = {a.split("=")[0] for a in sys.argv[1:]}
    sizes = (
        list(QUICK_USERS)
        if args.quick and "--users" not in explicit
        else [int(n) for n in args.users.split(",")]
    )
    epsilons = (
        [QUICK_EPSILON]
        if args.quick and "--epsilons" not in explicit
        else [float(e) for e in args.epsilons.split(",")]
    )
    out_json = (
        Path(args.out)
        if args.out
        else (CACHE if args.quick else RESULTS) / ("lm_growth_quick.json" if args.quick else "lm_growth.json")
    )
    return sizes, epsilons, out_json


def growth_header(
    args: argparse.Namespace, sizes: list[int], epsilons: list[float], scoring: dict[str, Any]
) -> dict[str, Any]:
    """The result file before its first size: what is measured, with what, on what machine."""
    return {
        "benchmark": "lm_growth",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "git_commit": git_commit(),
        "parameters": {
            "users": sizes,
            "epsilons": epsilons,
            "delta": args.delta,
            "memory_limit": args.memory_limit,
            "lmplz_memory": LMPLZ_MEMORY,
            "order": lm_bench.ORDER,
            "max_n": lm_bench.MAX_N,
            "stage_budget": lm_bench.STAGE_BUDGET,
            "scored_tokens_aimed_at": SCORED_TOKENS,
            "base_users": args.base_users or min(sizes),
            "rows": "dp, public_only, non_private, oracle (sizes <= oracle_max_users); no *_at_dp_vocab rows",
            "oracle_max_users": args.oracle_max_users,
            "generator_seed": lm_bench.SEED,
            "public_sentences": lm_bench.PUBLIC_SENTENCES,
            "noise": "secure (the pipeline's default NoiseSource): each run draws fresh noise; no seed",
            "quick": args.quick,
            "timing_note": "wall seconds on a shared 2-core machine with other benchmarks running: see "
            "the load averages; not clean timings",
        },
        "scoring": scoring,
        "results": {},
    }


def log_size(n: int, block: dict[str, Any]) -> None:
    """One line per ε of a finished size: the perplexities and the gap closed."""
    for s in block["summary"]:
        p = s["perplexity"]
        log(
            f"u{n} ε={s['epsilon']:g}: dp {p['dp']:.2f} public {p['public_only']:.2f} non-private "
            f"{p['non_private']:.2f} gap_closed {s['gap_closed']} "
            f"dp/non-private {s['dp_over_nonprivate']}"
        )


def run_sizes(args: argparse.Namespace) -> None:
    """Every user count at every ε (:func:`run_size`), the result file rewritten after each size."""
    sizes, epsilons, out_json = grid(args)
    started = time.perf_counter()
    corpus_list, scoring = corpora(sizes, args.base_users)
    out = growth_header(args, sizes, epsilons, scoring)
    for corpus in corpus_list:
        n = corpus.info["n_users"]
        block = run_size(corpus, epsilons, args)
        block["scoring"] = {
            **scoring[str(n)],
            "scored_users": block["sizes"]["scored_users"],
            "scored_tokens": block["sizes"]["eval_text"]["tokens"],
        }
        out["results"][str(n)] = block
        out["seconds"] = round(time.perf_counter() - started, 1)
        finish(out, out_json)
        log_size(n, block)
    t = out["target"]
    print(f"target {t['target']}: {t['value']} -> {t['met']}")
    print(f"wrote {out_json} and {out_json.with_suffix('.png').name}; total {out['seconds']:.0f} s")


def main() -> None:
    args = parse_args()
    if args.combine:
        combine([Path(p) for p in args.combine], Path(args.out) if args.out else RESULTS / "lm_growth.json")
        return
    run_sizes(args)


if __name__ == "__main__":
    main()
