"""Perplexity of the DP language model (lm/, issue 6) vs ε, against a non-private and a
public-only KenLM model, on held-out SOTU users; time and memory of the LM stage.

    python benchmarks/lm_bench.py [--epsilons 0.5,1,2,4,8] [--delta 1e-6]

Data: ``../shared/data/sotu_users.jsonl.gz`` (private; 10% of users held out by a hash of the user
id as evaluation text), ``../shared/data/brown_public.txt.gz`` (public). Per ε: a pipeline run on
the training users (ingest -> DPSU/DPNE T=3 -> Bayesian trigram distribution; stage_budget dpne
0.5, bayes 0.5), then route A (``lm_route='arpa'``, the stage itself, timed in a child process for
its peak RSS) and route B (lmplz on θ samples). Baselines: lmplz on the training users' raw
text ("non-private") and on Brown ("public-only"), order 3, same tokenizer.

Also per ε, "DP-vocabulary" baselines: the same two lmplz baselines trained and scored with every
token outside the run's DP vocabulary replaced by one placeholder word (the vocabulary handling of
the DP routes, with non-private / public-only counts): they separate the cost of the small DP
vocabulary from the cost of noisy statistics.

OOV counting (docs/lm.md, "Evaluation"): ``ppl`` scores each model on its own vocabulary (OOVs as
``<unk>``, which favours small vocabularies); ``ppl_matched`` scores every model on the SAME events:
evaluation tokens inside the run's DP vocabulary plus ``</s>`` (tokens outside it are skipped as
events but stay in the context). ``ppl_matched`` is the comparison the acceptance uses.

Writes benchmarks/results/lm.json (machine, date, parameters, results) and lm.png.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import json
import multiprocessing as mp
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lm import build  # noqa: E402
from lm.evaluate import load_model  # noqa: E402
from pipeline import bayes, dpne, ingest  # noqa: E402
from pipeline.config import RunConfig  # noqa: E402
from pipeline.run import RunContext, prepare, read_parts  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)


def held_out(user_id: str) -> bool:
    return int(hashlib.sha256(user_id.encode()).hexdigest(), 16) % 10 == 0


def split_users(private: Path, tmp: Path) -> tuple[Path, Path, int, int]:
    train, evaluation = tmp / "train.jsonl.gz", tmp / "eval.txt"
    n_train = n_eval = 0
    with (
        gzip.open(private, "rt", encoding="utf-8") as src,
        gzip.open(train, "wt", encoding="utf-8") as tr,
        open(evaluation, "w", encoding="utf-8") as ev,
    ):
        for line in src:
            row = json.loads(line)
            if held_out(str(row["user_id"])):
                ev.write(row["text"].replace("\n", " ") + "\n")
                n_eval += 1
            else:
                tr.write(line)
                n_train += 1
    return train, evaluation, n_train, n_eval


def tokenised_text(source: Path, target: Path, jsonl: bool) -> None:
    """One tokenised sentence per line (the pipeline tokenizer), for lmplz."""
    from pipeline.ingest import read_public_corpus, tokenize_texts

    with open(target, "w", encoding="utf-8") as out:
        if jsonl:
            with gzip.open(source, "rt", encoding="utf-8") as src:
                batch: list[str] = []
                for line in src:
                    batch.append(json.loads(line)["text"])
                    if len(batch) >= 2000:
                        for doc in tokenize_texts(batch):
                            out.writelines(" ".join(s) + "\n" for s in doc if s)
                        batch = []
                for doc in tokenize_texts(batch):
                    out.writelines(" ".join(s) + "\n" for s in doc if s)
        else:
            out.writelines(" ".join(s) + "\n" for s in read_public_corpus(source) if s)


def lmplz_model(text: Path, target: Path, tmp: Path) -> Path:
    arpa = target.with_suffix(".arpa")
    build.run_lmplz(text, arpa, 3, "2G", tmp)
    build.compile_binary(arpa, target)
    return target


def eval_sentences(path: Path) -> list[list[str]]:
    from pipeline.ingest import read_public_corpus

    return [s for s in read_public_corpus(path) if s]


PLACEHOLDER = "dpngramunk"  # stands for <unk> in lmplz input (lmplz refuses a literal <unk>)


def mapped_text(source: Path, target: Path, dp_vocab: set[str]) -> Path:
    """Tokenised text with tokens outside the DP vocabulary replaced by PLACEHOLDER."""
    with open(source, encoding="utf-8") as src, open(target, "w", encoding="utf-8") as out:
        for line in src:
            out.write(" ".join(t if t in dp_vocab else PLACEHOLDER for t in line.split()) + "\n")
    return target


def score(
    model_path: Path, sentences: list[list[str]], dp_vocab: set[str], placeholder: bool = False
) -> dict[str, float]:
    """ppl on the model's own vocabulary, ppl_matched on the events in dp_vocab + </s>; with
    ``placeholder`` the text is first mapped like :func:`mapped_text` (DP-vocabulary baselines)."""
    model = load_model(model_path)
    lp = lp_m = 0.0
    n = n_m = tokens = oov = 0
    for s in sentences:
        text = " ".join(t if t in dp_vocab else PLACEHOLDER for t in s) if placeholder else " ".join(s)
        for i, (p, _, is_oov) in enumerate(model.full_scores(text, bos=True, eos=True)):
            n += 1
            lp += p
            last = i == len(s)
            if not last:
                tokens += 1
                oov += bool(is_oov)
            if last or s[i] in dp_vocab:
                n_m += 1
                lp_m += p
    return {
        "ppl": 10 ** (-lp / n),
        "ppl_matched": 10 ** (-lp_m / n_m),
        "oov_rate": oov / tokens,
        "matched_event_share": n_m / n,
    }


def _lm_child(config_json: str, queue: mp.Queue) -> None:
    ctx = RunContext(RunConfig.model_validate_json(config_json))
    started = time.perf_counter()
    build.run_lm(ctx)
    seconds = time.perf_counter() - started
    queue.put({"seconds": seconds, "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def run_epsilon(
    eps: float,
    args: argparse.Namespace,
    train: Path,
    evaluation: Path,
    tmp: Path,
    sentences: list[list[str]],
    baselines: dict[str, Path],
) -> dict:
    work = tmp / f"eps{eps:g}"
    work.mkdir()
    config = RunConfig.build(
        dataset="sotu-lm-bench",
        input=str(train),
        public=args.public,
        out=str(work / "out"),
        warehouse=str(work / "wh.duckdb"),
        epsilon=eps,
        delta=args.delta,
        max_n=3,
        stage_budget={"dpne": 0.5, "bayes": 0.5},
        memory_limit="6GB",
        lm_route="arpa",
        lm_eval_text=str(evaluation),
    )
    t0 = time.perf_counter()
    ctx = RunContext(prepare(config))
    ingest.run_ingest(ctx)
    dpne.run_all(ctx)
    bayes.run_bayes(ctx)
    with ctx.warehouse() as wh:  # the LM stage reads released files only
        wh.con.execute(f"DROP SCHEMA {ctx.schema} CASCADE")
    upstream = time.perf_counter() - t0
    queue: mp.Queue = mp.get_context("spawn").Queue()
    child = mp.get_context("spawn").Process(target=_lm_child, args=(ctx.config.model_dump_json(), queue))
    child.start()
    stage = queue.get(timeout=3600)
    child.join()
    part = read_parts(ctx)["lm"]
    root = ctx.release.root
    dp_vocab = set(build.ReleasedInputs(root).vocabulary())
    result = {
        "epsilon": eps,
        "upstream_seconds": round(upstream, 1),
        "lm_stage": stage,
        "route_a_counts": part["counts"],
        "vocabulary": len(dp_vocab),
    }
    result["route_a"] = score(root / build.MODEL_BINARY, sentences, dp_vocab)
    t1 = time.perf_counter()
    b_arpa = work / "route_b.arpa"
    info = build.build_route_b(build.ReleasedInputs(root), ctx.config, b_arpa, seed=1)
    build.compile_binary(b_arpa, work / "route_b.binary")
    result["route_b_seconds"] = round(time.perf_counter() - t1, 1)
    result["route_b_counts"] = {str(k): v for k, v in info["counts"].items()}
    result["route_b"] = score(work / "route_b.binary", sentences, dp_vocab)
    for name, path in baselines.items():
        result[name] = score(path, sentences, dp_vocab)
    for name, text in (
        ("non_private_dp_vocab", tmp / "train.txt"),
        ("public_only_dp_vocab", tmp / "public.txt"),
    ):
        model = lmplz_model(mapped_text(text, work / f"{name}.txt", dp_vocab), work / f"{name}.binary", work)
        result[name] = score(model, sentences, dp_vocab, placeholder=True)
    shutil.rmtree(work, ignore_errors=True)
    return result


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = [r["epsilon"] for r in results]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in (
        (axes[0], "ppl_matched", "matched events (DP vocabulary + </s>)"),
        (axes[1], "ppl", "own vocabulary (OOVs as <unk>)"),
    ):
        for name, style in (
            ("route_a", "o-"),
            ("route_b", "s-"),
            ("non_private", "k--"),
            ("public_only", "g:"),
            ("non_private_dp_vocab", "k-."),
            ("public_only_dp_vocab", "g-."),
        ):
            ax.plot(eps, [r[name][key] for r in results], style, label=name.replace("_", " "))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ε (whole run)")
        ax.set_ylabel("perplexity")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("SOTU held-out users (10%), order 3")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--private", default=str(DATA / "sotu_users.jsonl.gz"))
    ap.add_argument("--public", default=str(DATA / "brown_public.txt.gz"))
    ap.add_argument("--delta", type=float, default=1e-6)
    ap.add_argument("--epsilons", default=",".join(str(e) for e in EPSILONS))
    args = ap.parse_args()
    if not Path(args.private).is_file() or not Path(args.public).is_file():
        print(f"skipped: shared data not found under {DATA}")
        return
    epsilons = [float(e) for e in args.epsilons.split(",")]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lm-bench-") as tmpdir:
        tmp = Path(tmpdir)
        train, evaluation, n_train, n_eval = split_users(Path(args.private), tmp)
        sentences = eval_sentences(evaluation)
        tokenised_text(train, tmp / "train.txt", jsonl=True)
        tokenised_text(Path(args.public), tmp / "public.txt", jsonl=False)
        baselines = {
            "non_private": lmplz_model(tmp / "train.txt", tmp / "non_private.binary", tmp),
            "public_only": lmplz_model(tmp / "public.txt", tmp / "public_only.binary", tmp),
        }
        results = []
        for eps in epsilons:
            r = run_epsilon(eps, args, train, evaluation, tmp, sentences, baselines)
            results.append(r)
            print(
                f"ε={eps:g} done: A {r['route_a']['ppl_matched']:.1f}, "
                f"B {r['route_b']['ppl_matched']:.1f}, non-private {r['non_private']['ppl_matched']:.1f}, "
                f"public {r['public_only']['ppl_matched']:.1f}",
                flush=True,
            )
    header = (
        f"{'ε':>5} | {'A matched':>9} {'B matched':>9} {'nonpriv':>8} {'public':>8} | "
        f"{'A own':>7} {'B own':>7} {'np own':>7} {'pub own':>7} | {'|vocab|':>7} {'A OOV':>6} | "
        f"{'lm s':>6} {'lm MB':>6} | {'np@V':>6} {'pub@V':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['epsilon']:>5g} | {r['route_a']['ppl_matched']:>9.1f} {r['route_b']['ppl_matched']:>9.1f} "
            f"{r['non_private']['ppl_matched']:>8.1f} {r['public_only']['ppl_matched']:>8.1f} | "
            f"{r['route_a']['ppl']:>7.1f} {r['route_b']['ppl']:>7.1f} {r['non_private']['ppl']:>7.1f} "
            f"{r['public_only']['ppl']:>7.1f} | {r['vocabulary']:>7} "
            f"{r['route_a']['oov_rate']:>6.3f} | "
            f"{r['lm_stage']['seconds']:>6.1f} {r['lm_stage']['max_rss_mb']:>6.0f} | "
            f"{r['non_private_dp_vocab']['ppl_matched']:>6.1f} "
            f"{r['public_only_dp_vocab']['ppl_matched']:>6.1f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": "lm",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "processor": platform.processor(),
        },
        "parameters": {
            "private": Path(args.private).name,
            "public": Path(args.public).name,
            "delta": args.delta,
            "epsilons": epsilons,
            "order": 3,
            "max_n": 3,
            "stage_budget": {"dpne": 0.5, "bayes": 0.5},
            "defaults": {
                k: RunConfig.model_fields[k].default
                for k in (
                    "lm_theta_tokens",
                    "lm_public_weight",
                    "lm_kgram_count",
                    "lm_sample_sentences",
                    "bayes_vocab_size",
                )
            },
            "train_users": n_train,
            "eval_users": n_eval,
            "eval_sentences": len(sentences),
            "split": "sha256(user_id) % 10 == 0 held out",
        },
        "results": results,
        "seconds": round(time.perf_counter() - started, 1),
    }
    (RESULTS / "lm.json").write_text(json.dumps(out, indent=1), encoding="utf-8")
    plot(results, RESULTS / "lm.png")
    print(f"wrote {RESULTS / 'lm.json'} and lm.png")


if __name__ == "__main__":
    main()
