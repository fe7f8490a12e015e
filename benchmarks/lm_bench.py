"""The open-vocabulary DP language model (route 'mixture': stage lm_counts + stage lm) against
public-only, non-private and oracle KenLM models, on held-out users of two corpora, vs ε.

    python benchmarks/lm_bench.py [--epsilons 0.5,1,2,4,8] [--corpora sotu,generated]
                                  [--users 200000] [--quick] [--previous PATH|none]

Corpora (users split by sha256(user_id) % 10 == 0: held out, never seen by any model):

* ``sotu``: ``../shared/data/sotu_users.jsonl.gz`` (12,807 users) private, Brown
  (``../shared/data/brown_public.txt.gz``) public; every held-out user is scored;
* ``generated``: ``dpngram.text.sample.write_sample`` with ``--users`` users (default 200,000) and a
  public corpus of Brown's sentence count from the same generator with shifted statistics
  (cached under ``benchmarks/.data/`` keyed by users, public sentences, seed and
  ``GENERATOR_VERSION``); the held-out users with (sha256 // 10) % 10 == 0 (a tenth of them, about
  1% of all users) are scored, which keeps the Python top-k scorer at ~200k tokens per model.

Per (corpus, ε): one pipeline run on the training users (ingest, DPSU vocabulary, DPNE T = 3, stage
lm_counts, validate, stage lm, report; stage_budget dpne 0.5, lm_counts 0.5; every lm_* option at
its default; fresh secure noise per run), with stage ``lm`` alone in a spawned child process: its
time is report part lm's ``seconds``, its peak RSS the larger of that process's VmHWM and the
sampled RSS of it plus the KenLM tools it runs (getrusage's ru_maxrss is not used: a spawned child
inherits the parent's high-water mark through fork + exec). Rows:

* ``dp``: the released model (``model/model.binary``, top-k from ``model.arpa``);
* ``public_only`` / ``non_private``: lmplz (order 3, modified Kneser-Ney) on the public corpus / on
  the training users' raw text, each on its own vocabulary;
* ``public_only_at_dp_vocab`` / ``non_private_at_dp_vocab``: the same, trained on text in which every
  token outside the DP model's vocabulary V_LM (the released ARPA's unigrams minus markers) is one
  placeholder word; in the ARPA file the placeholder is renamed ``<unk>`` (its unigram mass added
  to lmplz's own ``<unk>``), so scoring the raw evaluation text maps exactly those tokens to it and
  they pay the spelling cost of the open-vocabulary perplexity, like the DP model's OOVs;
* ``oracle`` (ε-independent): the public-only lmplz model mixed (``lm.open_model.mix_models``)
  with a NON-private trigram model of the training text restricted to its 3,000 most frequent
  words and to n-grams seen at least 20 times: the DP model's Q estimator
  (``lm.open_model.noisy_count_model``) on exact counts, threshold 20, discount 1; tokens outside
  the 3,000 words get no unigram of their own there (their share of the mass goes to the public
  unigram distribution), except ``<unk>`` (tokens outside the oracle's vocabulary = public words
  ∪ the 3,000); the mixture weight is the best of 0.1..0.9 by open-vocabulary perplexity ON THE
  EVALUATION TEXT (an oracle, not a deployable model).

Metrics (``lm.evaluate.evaluate_file``, docs/lm_evaluation.md): open-vocabulary perplexity,
top-1 / top-3 next-word accuracy, OOV rate (and the <unk>-perplexities for reference); build
seconds per model. Headline per corpus and ε: gap_closed = ln(ppl_public/ppl_dp) /
ln(ppl_public/ppl_nonprivate), top3_gain_points = 100 (top3_dp − top3_public), dp_vs_public =
ppl_dp/ppl_public, dp_over_nonprivate = ppl_dp/ppl_nonprivate (open-vocabulary perplexities).

``previous_run`` in the JSON: the headline of the lm.json this run replaces (or of ``--previous``), so
a reader can compare the two; the plot draws its DP curve in grey.

``--quick`` (smoke test): ε = 4 only and a 20,000-user generated corpus; writes
benchmarks/.data/lm_quick.json/.png instead of benchmarks/results/lm.json and lm.png. Scratch files
go to benchmarks/.data/lm_work (removed per ε; ``--keep-work`` keeps them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import json
import math
import multiprocessing as mp
import os
import queue as queue_mod
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_commit, machine  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
CACHE = ROOT / "benchmarks" / ".data"
RESULTS = ROOT / "benchmarks" / "results"
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTA = 1e-6
MAX_N = 3
ORDER = 3
STAGE_BUDGET = {"dpne": 0.5, "lm_counts": 0.5}
SEED = 20261121  # generator seed of the generated corpus
GENERATED_USERS = 200_000
QUICK_USERS = 20_000
QUICK_EPSILON = 4.0
PUBLIC_SENTENCES = 57_340  # Brown's sentence count
HOLDOUT_MOD = 10  # sha256(user_id) % 10 == 0: held out
GENERATED_SCORE_EVERY = 10  # generated corpus: score held-out users with (h // 10) % 10 == 0
ORACLE_WORDS = 3_000
ORACLE_MIN_COUNT = 20
ORACLE_DISCOUNT = 1.0
ORACLE_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
LMPLZ_MEMORY = "2G"
PLACEHOLDER = "dpngramunk"  # stands for <unk> in lmplz input (lmplz refuses a literal <unk>)
REST = "<rest>"  # oracle counting: a training word outside its 3,000 words but inside its vocabulary
METRIC_KEYS = (
    "open_vocab_perplexity",
    "top1_accuracy",
    "top3_accuracy",
    "oov_rate",
    "perplexity",
    "perplexity_without_oov",
    "tokens",
    "sentences",
)
ROW_NAMES = (
    "dp",
    "public_only",
    "non_private",
    "public_only_at_dp_vocab",
    "non_private_at_dp_vocab",
    "oracle",
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------------------------
# Corpora and the user split
# ----------------------------------------------------------------------------------------------
@dataclass
class Corpus:
    name: str
    private: Path
    public: Path
    score_every: int  # among held-out users, (h // 10) % score_every == 0 are scored
    info: dict[str, Any]
    # if given, the held-out users scored are exactly those whose id is in it (score_every unused);
    # benchmarks/lm_growth_bench.py scores the same users at every corpus size this way
    scored_ids: frozenset[str] | None = None


def user_hash(user_id: str) -> int:
    return int(hashlib.sha256(user_id.encode()).hexdigest(), 16)


def generated_corpus(n_users: int) -> Corpus:
    """The generated corpus of ``n_users`` users and its public corpus (cached)."""
    from dpngram.text.sample import GENERATOR_VERSION, SampleSpec, write_sample

    folder = CACHE / f"lm_sample_u{n_users}_p{PUBLIC_SENTENCES}_s{SEED}_g{GENERATOR_VERSION}"
    paths = {"users": folder / "users.jsonl.gz", "public": folder / "public.txt.gz"}
    seconds = None
    if not all(p.is_file() for p in paths.values()):
        log(f"generating {n_users:,} users into {folder}")
        started = time.perf_counter()
        paths = write_sample(folder, n_users=n_users, seed=SEED, public_sentences=PUBLIC_SENTENCES)
        seconds = round(time.perf_counter() - started, 1)
    info = {
        "generator": "dpngram.text.sample.write_sample",
        "generator_version": GENERATOR_VERSION,
        "n_users": n_users,
        "seed": SEED,
        "public_sentences": PUBLIC_SENTENCES,
        "spec": SampleSpec().__dict__,
        "cache": str(folder.relative_to(ROOT)),
        "generate_seconds": seconds,
    }
    return Corpus("generated", paths["users"], paths["public"], GENERATED_SCORE_EVERY, info)


def split_users(corpus: Corpus, work: Path) -> dict[str, Any]:
    """train.jsonl.gz (every document of a non-held-out user, as read) and eval.txt (the scored
    held-out users' documents, one a line). Streams."""
    train, evaluation = work / "train.jsonl.gz", work / "eval.txt"
    users: dict[str, set[str]] = {"train": set(), "held_out": set(), "scored": set()}
    docs = Counter()
    with (
        gzip.open(corpus.private, "rt", encoding="utf-8") as src,
        gzip.open(train, "wt", encoding="utf-8", compresslevel=1) as tr,
        open(evaluation, "w", encoding="utf-8") as ev,
    ):
        for line in src:
            row = json.loads(line)
            uid = str(row["user_id"])
            h = user_hash(uid)
            if h % HOLDOUT_MOD != 0:
                tr.write(line)
                users["train"].add(uid)
                docs["train"] += 1
                continue
            users["held_out"].add(uid)
            if (
                uid in corpus.scored_ids
                if corpus.scored_ids is not None
                else (h // HOLDOUT_MOD) % corpus.score_every == 0
            ):
                ev.write(row["text"].replace("\n", " ").replace("\r", " ") + "\n")
                users["scored"].add(uid)
                docs["scored"] += 1
    return {
        "train": train,
        "eval": evaluation,
        "train_users": len(users["train"]),
        "held_out_users": len(users["held_out"]),
        "scored_users": len(users["scored"]),
        "train_documents": docs["train"],
        "scored_documents": docs["scored"],
    }


def tokenised_text(source: Path, target: Path, jsonl: bool) -> dict[str, int]:
    """One tokenised sentence per line (the pipeline tokenizer, lower-cased), for lmplz and the
    oracle's counts. Returns sentence and token counts."""
    from dpngram.text.public import read_public_corpus
    from dpngram.text.tokenizer import tokenize_texts

    n_sent = n_tok = 0
    with open(target, "w", encoding="utf-8") as out:

        def put(sentences) -> None:
            nonlocal n_sent, n_tok
            for s in sentences:
                if s:
                    out.write(" ".join(s) + "\n")
                    n_sent += 1
                    n_tok += len(s)

        if jsonl:
            with gzip.open(source, "rt", encoding="utf-8") as src:
                batch: list[str] = []
                for line in src:
                    batch.append(json.loads(line)["text"])
                    if len(batch) >= 5000:
                        for doc in tokenize_texts(batch):
                            put(doc)
                        batch = []
                for doc in tokenize_texts(batch):
                    put(doc)
        else:
            put(read_public_corpus(source))
    return {"sentences": n_sent, "tokens": n_tok}


def eval_sentences(path: Path) -> list[list[str]]:
    from dpngram.text.public import read_public_corpus

    return [s for s in read_public_corpus(path) if s]


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------
def lmplz_model(text: Path, binary: Path, tmp: Path, memory: str = LMPLZ_MEMORY) -> float:
    """lmplz (order 3, ``-S memory``) on ``text`` -> ``binary`` with the ARPA file beside it;
    returns seconds."""
    from dpngram.lm.build import compile_binary, run_lmplz

    started = time.perf_counter()
    arpa = binary.with_suffix(".arpa")
    run_lmplz(text, arpa, ORDER, memory, tmp)
    compile_binary(arpa, binary)
    return time.perf_counter() - started


def arpa_unigrams(path: Path) -> set[str]:
    """The unigrams of an ARPA file (read up to the 2-gram section)."""
    words: set[str] = set()
    section = None
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line.startswith("\\") and line.endswith("-grams:"):
                if section is not None:
                    break
                section = int(line[1:-7])
                continue
            if section == 1 and line:
                words.add(line.split("\t")[1])
    return words


def mapped_text(source: Path, target: Path, vocabulary: set[str]) -> int:
    """Tokenised text with tokens outside ``vocabulary`` replaced by PLACEHOLDER; returns how many."""
    mapped = 0
    with open(source, encoding="utf-8") as src, open(target, "w", encoding="utf-8") as out:
        for line in src:
            toks = line.split()
            new = [t if t in vocabulary else PLACEHOLDER for t in toks]
            mapped += sum(1 for t in toks if t not in vocabulary)
            out.write(" ".join(new) + "\n")
    return mapped


def placeholder_to_unk(src: Path, dst: Path) -> None:
    """Rewrite an lmplz ARPA file trained on mapped text: the placeholder becomes ``<unk>`` in every
    n-gram; its unigram and lmplz's own ``<unk>`` unigram merge (probabilities added, the
    placeholder's backoff kept). lmplz never lists ``<unk>`` above order 1 (--skip_symbols), so
    nothing else collides; every context still sums to one."""
    from dpngram.lm.arpa import UNK

    with open(src, encoding="utf-8") as fh:
        header: list[str] = []
        for line in fh:
            header.append(line)
            if line.startswith("\\1-grams:"):
                break
        unigrams: list[str] = []
        for line in fh:
            if not line.strip():
                break
            unigrams.append(line)
        rows = [u.rstrip("\n").split("\t") for u in unigrams]
        unk = next(r for r in rows if r[1] == UNK)
        ph = next((r for r in rows if r[1] == PLACEHOLDER), None)
        with open(dst, "w", encoding="utf-8") as out:
            if ph is None:  # nothing was mapped
                out.writelines(header)
                out.writelines(unigrams)
            else:
                for line in header:
                    if line.startswith("ngram 1="):
                        line = f"ngram 1={len(rows) - 1}\n"
                    out.write(line)
                p = 10 ** float(unk[0]) + 10 ** float(ph[0])
                merged = [f"{math.log10(p):.7f}", UNK] + ph[2:]
                for r in rows:
                    if r[1] == PLACEHOLDER:
                        continue
                    out.write("\t".join(merged if r[1] == UNK else r) + "\n")
            out.write("\n")
            for line in fh:
                if ph is not None and PLACEHOLDER in line:
                    parts = line.rstrip("\n").split("\t")
                    parts[1] = " ".join(UNK if t == PLACEHOLDER else t for t in parts[1].split(" "))
                    line = "\t".join(parts) + "\n"
                out.write(line)


def at_vocab_model(
    text: Path, vocabulary: set[str], binary: Path, tmp: Path, memory: str = LMPLZ_MEMORY
) -> dict[str, Any]:
    """lmplz on ``text`` with tokens outside ``vocabulary`` as the placeholder, renamed <unk>."""
    from dpngram.lm.build import compile_binary, run_lmplz

    started = time.perf_counter()
    mapped = tmp / f"{binary.stem}.txt"
    n_mapped = mapped_text(text, mapped, vocabulary)
    raw = tmp / f"{binary.stem}.raw.arpa"
    run_lmplz(mapped, raw, ORDER, memory, tmp)
    mapped.unlink()
    arpa = binary.with_suffix(".arpa")
    placeholder_to_unk(raw, arpa)
    raw.unlink()
    compile_binary(arpa, binary)
    return {"build_seconds": round(time.perf_counter() - started, 2), "training_tokens_mapped": n_mapped}


def evaluate(binary: Path, eval_text: Path) -> dict[str, Any]:
    from dpngram.lm.evaluate import evaluate_file

    started = time.perf_counter()
    m = evaluate_file(binary, eval_text, lowercase=True)
    out = {k: m.get(k) for k in METRIC_KEYS}
    if m.get("accuracy_note"):
        out["accuracy_note"] = m["accuracy_note"]
    out["model_unigrams"] = len(arpa_unigrams(binary.with_suffix(".arpa")))
    out["eval_seconds"] = round(time.perf_counter() - started, 1)
    return out


def oracle_counts(train_txt: Path, top: set[str], vocabulary: set[str]):
    """(n, ngram, noisy_count) rows of EXACT training counts for the oracle's Q: order 1 every
    counted class (the 3,000 words, </s>, <unk>, REST; <s> = sentences), orders 2-3 the n-grams of
    the 3,000 words and markers seen >= ORACLE_MIN_COUNT times."""
    import polars as pl

    from dpngram.lm.arpa import BOS, UNK
    from dpngram.lm.open_model import sentence_ngram_counts

    sentences = 0

    def mapped():
        nonlocal sentences
        with open(train_txt, encoding="utf-8") as fh:
            for line in fh:
                toks = line.split()
                if toks:
                    sentences += 1
                    yield [t if t in top else (REST if t in vocabulary else UNK) for t in toks]

    totals = sentence_ngram_counts(mapped(), ORDER)
    parts = [
        totals[1].select(n=pl.lit(1, pl.Int64), ngram="ngram", noisy_count="count"),
        pl.DataFrame({"n": [1], "ngram": [BOS], "noisy_count": [float(sentences)]}),
    ]
    bad = rf"(^| )({UNK}|{REST})( |$)"
    for n in range(2, ORDER + 1):
        kept = totals[n].filter((pl.col("count") >= ORACLE_MIN_COUNT) & ~pl.col("ngram").str.contains(bad))
        parts.append(kept.select(n=pl.lit(n, pl.Int64), ngram="ngram", noisy_count="count"))
    return pl.concat(parts)


def oracle_model(
    train_txt: Path, public_binary: Path, sentences: list[list[str]], eval_text: Path, work: Path
) -> dict[str, Any]:
    """The oracle (module docstring): public-only lmplz model + restricted non-private Q, the
    weight chosen on the evaluation text. Writes work/oracle.binary (+ .arpa)."""
    import kenlm
    import polars as pl

    from dpngram.lm.arpa import BOS, EOS, MIN_PROB, UNK, ArpaModel, read_arpa, write_arpa
    from dpngram.lm.build import compile_binary
    from dpngram.lm.evaluate import score_sentences
    from dpngram.lm.open_model import mix_models, noisy_count_model

    started = time.perf_counter()
    words: Counter[str] = Counter()
    with open(train_txt, encoding="utf-8") as fh:
        for line in fh:
            words.update(line.split())
    top = {w for _, w in sorted((-c, w) for w, c in words.items())[:ORACLE_WORDS]}
    del words
    _, public = read_arpa(public_binary.with_suffix(".arpa"))
    public_words = set(public.tables[1]["ngram"].to_list()) - {BOS, EOS, UNK}
    extra = sorted(top - public_words)
    tables = dict(public.tables)
    if extra:  # the 3,000 words the public model lacks: listed with probability ~0 (normalised)
        add = pl.DataFrame(
            {"ngram": extra, "logprob": [math.log10(MIN_PROB)] * len(extra), "backoff": [None] * len(extra)},
            schema=tables[1].schema,
        )
        tables[1] = pl.concat([tables[1], add]).sort("ngram")
    base = ArpaModel(tables)
    rows = oracle_counts(train_txt, top, public_words | top)
    private = noisy_count_model(rows, base, ORDER, threshold=ORACLE_MIN_COUNT, discount=ORACLE_DISCOUNT)
    estimate_seconds = time.perf_counter() - started
    quiet = kenlm.Config()
    quiet.show_progress = False
    grid: dict[str, float] = {}
    best: tuple[float, float] | None = None
    mix_seconds: dict[float, float] = {}
    for lam in ORACLE_GRID:
        t = time.perf_counter()
        path = work / f"oracle_{lam:g}.arpa"
        write_arpa(mix_models(base, private, lam), path)
        mix_seconds[lam] = time.perf_counter() - t
        ppl = score_sentences(kenlm.Model(str(path), quiet), sentences)["open_vocab_perplexity"]
        grid[f"{lam:g}"] = round(ppl, 3)
        if best is None or ppl < best[1]:
            if best is not None:
                (work / f"oracle_{best[0]:g}.arpa").unlink()
            best = (lam, ppl)
        else:
            path.unlink()
    assert best is not None
    binary = work / "oracle.binary"
    os.replace(work / f"oracle_{best[0]:g}.arpa", binary.with_suffix(".arpa"))
    t = time.perf_counter()
    compile_binary(binary.with_suffix(".arpa"), binary)
    compile_seconds = time.perf_counter() - t
    counts = {str(n): int((rows["n"] == n).sum()) for n in range(1, ORDER + 1)}
    return {
        "binary": binary,
        "build_seconds": round(estimate_seconds + mix_seconds[best[0]] + compile_seconds, 2),
        "search_seconds": round(time.perf_counter() - started, 2),
        "mix_weight": best[0],
        "open_vocab_perplexity_by_weight": grid,
        "private_words": len(top),
        "private_words_not_in_public_model": len(extra),
        "exact_count_rows_by_order": counts,
    }


# ----------------------------------------------------------------------------------------------
# The DP run (stage lm in a child process)
# ----------------------------------------------------------------------------------------------
def _vm_hwm_mb() -> float | None:
    """This process's peak RSS (VmHWM: the high-water mark of its own address space, which, unlike
    getrusage's ru_maxrss, does not carry over the RSS of the parent it was forked from)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def _lm_child(config_json: str, out: mp.Queue) -> None:
    from dpngram.config import RunConfig
    from dpngram.release.context import RunContext, stage_timer
    from dpngram.stages.lm import run_lm

    try:
        # flat names (RunConfig.to_json): model_dump_json's nested sections do not validate back
        ctx = RunContext(RunConfig.build(**json.loads(config_json)))
        started = time.perf_counter()
        with stage_timer(ctx, "lm"):
            run_lm(ctx)
        out.put({"wall_seconds": round(time.perf_counter() - started, 2), "vm_hwm_mb": _vm_hwm_mb()})
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        out.put({"error": f"{type(err).__name__}: {err}"})


class TreeRss:
    """Samples the summed RSS of a process and its descendants (the KenLM tools the stage runs)
    every ``interval`` seconds in a thread; ``peak_mb`` is the largest sum seen."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        import threading

        self.pid, self.interval, self.peak_mb = pid, interval, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak_mb = max(self.peak_mb, total / 2**20)
            self._stop.wait(self.interval)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak_mb, 1)


def run_lm_stage(config_json: str) -> dict[str, Any]:
    """Stage lm alone in a spawned child process; its wall time and peak RSS."""
    spawn = mp.get_context("spawn")
    out: mp.Queue = spawn.Queue()
    child = spawn.Process(target=_lm_child, args=(config_json, out))
    child.start()
    sampler = TreeRss(child.pid)
    try:
        while True:
            try:
                result = out.get(timeout=5)
                break
            except queue_mod.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"lm stage child died (exit code {child.exitcode})") from None
        child.join()
    finally:
        tree = sampler.stop()
    if "error" in result:
        raise RuntimeError(f"lm stage failed: {result['error']}")
    hwm = result.pop("vm_hwm_mb")
    return {
        **result,
        "peak_rss_mb": round(max(hwm or 0.0, tree), 1),
        "peak_rss_mb_python": round(hwm, 1) if hwm is not None else None,
        "peak_rss_mb_sampled_tree": tree,
    }


def bench_config(
    corpus: Corpus,
    eps: float,
    train: Path,
    work: Path,
    args: argparse.Namespace,
    *,
    stage_budget: dict[str, float] | None = None,
    max_n: int | None = None,
    warehouse: Path | None = None,
) -> Any:
    """The run configuration of one release on the training users (every lm_* option at its
    default; also used by benchmarks/lm_threshold_study.py and, with another ``stage_budget`` /
    ``max_n`` / a ``warehouse`` whose public-model cache is shared, benchmarks/lm_split_bench.py)."""
    from dpngram.config import RunConfig

    return RunConfig.build(
        dataset=f"lm-bench-{corpus.name}-eps{eps:g}",
        input=str(train),
        public=str(corpus.public),
        out=str(work / "out"),
        warehouse=str(warehouse or work / "wh.duckdb"),
        epsilon=eps,
        delta=args.delta,
        max_n=max_n or MAX_N,
        stage_budget=stage_budget or STAGE_BUDGET,
        memory_limit=args.memory_limit,
    )


def dp_run(
    corpus: Corpus, eps: float, train: Path, work: Path, args: argparse.Namespace, **overrides: Any
) -> dict[str, Any]:
    """One release on the training users; returns its paths, parts, timings and every step's public
    summary (released rows, ε, charged ε). ``overrides``: :func:`bench_config`'s keyword options."""
    from dpngram.orchestration.plan import release_steps
    from dpngram.release.context import RunContext, public_summary, read_parts, read_timings, stage_timer
    from dpngram.release.publish import prepare, publish_run

    config = bench_config(corpus, eps, train, work, args, **overrides)
    started = time.perf_counter()
    config = prepare(config)
    ctx = RunContext(config)
    lm_stage: dict[str, Any] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for step in release_steps(config):
        if step.name == "lm":
            lm_stage = run_lm_stage(ctx.config.to_json())
        else:
            with stage_timer(ctx, step.name):
                summaries[step.name] = public_summary(step.run(ctx))
    timings = read_timings(ctx)
    parts = read_parts(ctx)
    root = publish_run(ctx)
    return {
        "root": Path(root),
        # report parts no longer carry wall-clock seconds (operator-only): stage lm's time is the
        # operator timing of the child's stage_timer around run_lm
        "lm_seconds": timings.get("lm"),
        "budget_plan": config.budget_plan().report(),
        "run_seconds": round(time.perf_counter() - started, 1),
        "stage_seconds": timings,
        "lm_stage_child": lm_stage,
        "lm_counts": parts["lm_counts"],
        "lm": parts["lm"],
        "parts": parts,
        "summaries": summaries,
        "config": {
            k: v
            for k, v in json.loads(config.to_json()).items()
            if k not in ("input", "out", "warehouse", "run_id", "public", "dataset")
        },
    }


# ----------------------------------------------------------------------------------------------
# One corpus
# ----------------------------------------------------------------------------------------------
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


def targets(name: str, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, reported (nothing is tuned to meet them)."""
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
    at4 = [r for r in results if r["epsilon"] == 4.0]
    for r in at4:
        h = r["headline"]
        if name == "sotu":
            out.append(
                {
                    "target": "gap_closed >= 0.30 at ε = 4",
                    "epsilon": 4.0,
                    "value": h["gap_closed"],
                    "met": h["gap_closed"] is not None and h["gap_closed"] >= 0.30,
                }
            )
            out.append(
                {
                    "target": "top-3 >= public + 5 points at ε = 4",
                    "epsilon": 4.0,
                    "value": h["top3_gain_points"],
                    "met": h["top3_gain_points"] >= 5.0,
                }
            )
        if name == "generated":
            out.append(
                {
                    "target": "dp_over_nonprivate <= 1.5 at ε = 4",
                    "epsilon": 4.0,
                    "value": h["dp_over_nonprivate"],
                    "met": h["dp_over_nonprivate"] <= 1.5,
                }
            )
    return out


# ----------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------
def print_table(name: str, block: dict[str, Any]) -> None:
    print(f"\n== {name} ==")
    head = f"{'ε':>4} {'row':<24} {'ppl_open':>9} {'top1':>6} {'top3':>6} {'oov':>6} {'build s':>8}"
    print(head)
    print("-" * len(head))
    for r in block["results"]:
        for row in ROW_NAMES:
            m = r["rows"][row]
            print(
                f"{r['epsilon']:>4g} {row:<24} {m['open_vocab_perplexity']:>9.1f} {m['top1_accuracy']:>6.3f} "
                f"{m['top3_accuracy']:>6.3f} {m['oov_rate']:>6.3f} {m['build_seconds']:>8.1f}"
            )
        h = r["headline"]
        stage = r["lm_stage"]
        print(
            f"     λ={r['mix_weight']:g} released {r['released_by_order']} "
            f"lm stage {stage['seconds']:.1f} s {stage['peak_rss_mb']:.0f} MB | "
            f"gap_closed {h['gap_closed']} top3 +{h['top3_gain_points']} "
            f"dp/public {h['dp_vs_public']} dp/nonprivate {h['dp_over_nonprivate']}"
        )
    for t in block["targets"]:
        print(
            f"  target {t['target']} (ε={t['epsilon']:g}): {t['value']} -> {'met' if t['met'] else 'NOT met'}"
        )


def plot(out: dict[str, Any], path: Path) -> None:
    """Per corpus: open-vocabulary perplexity and top-3 accuracy vs ε, the DP model (each point
    labelled with the run's λ and unigram-adaptation β) against flat baselines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    corpora = list(out["results"])
    fig, axes = plt.subplots(len(corpora), 2, figsize=(10, 3.8 * len(corpora) + 0.5), squeeze=False)
    for i, name in enumerate(corpora):
        results = out["results"][name]["results"]
        base = out["results"][name]["baselines"]
        eps = [r["epsilon"] for r in results]
        for ax, key, label in (
            (axes[i][0], "open_vocab_perplexity", "open-vocabulary perplexity"),
            (axes[i][1], "top3_accuracy", "top-3 next-word accuracy"),
        ):
            ys = [r["rows"]["dp"][key] for r in results]
            ax.plot(eps, ys, "o-", color="C0", label="DP model (mixture; λ, β chosen by the run)")
            prev = ((out.get("previous_run") or {}).get("corpora") or {}).get(name)
            if prev:
                pk = "dp_open_vocab_perplexity" if key == "open_vocab_perplexity" else "dp_top3_accuracy"
                pe = sorted(prev["results"], key=float)
                commit = (out["previous_run"].get("commit") or "")[:7]
                when = (out["previous_run"].get("date") or "")[:10]
                ax.plot(
                    [float(e) for e in pe],
                    [prev["results"][e][pk] for e in pe],
                    "s--",
                    color="0.6",
                    markersize=4,
                    label=f"DP model, previous run ({commit}, {when})",
                )
            for r, y in zip(results, ys, strict=True):
                beta = r.get("unigram_adaptation")
                text = f"λ={r['mix_weight']:g}" + (f"\nβ={beta:g}" if isinstance(beta, int | float) else "")
                ax.annotate(
                    text, (r["epsilon"], y), textcoords="offset points", xytext=(4, 4), fontsize=7, color="C0"
                )
            for row, style, color, text in (
                ("public_only", "--", "C2", "public-only (lmplz)"),
                ("non_private", "--", "k", "non-private (lmplz)"),
                ("oracle", ":", "C3", "oracle (public + restricted non-private, best λ)"),
            ):
                ax.axhline(base[row][key], linestyle=style, color=color, label=text)
            ax.annotate(
                f"oracle λ={base['oracle']['mix_weight']:g}",
                (0.01, base["oracle"][key]),
                xycoords=("axes fraction", "data"),
                textcoords="offset points",
                xytext=(2, 3),
                fontsize=7,
                color="C3",
            )
            ax.set_xscale("log", base=2)
            ax.set_xticks(eps, [f"{e:g}" for e in eps])
            ax.set_xlabel("ε (whole run)")
            ax.set_ylabel(label)
            if key == "open_vocab_perplexity":
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(ScalarFormatter())
                ax.yaxis.set_minor_formatter(ScalarFormatter())
            sizes = out["results"][name]["sizes"]
            ax.set_title(
                f"{name}: {sizes['train_users']:,} training users, {sizes['scored_users']:,} scored",
                fontsize=9,
            )
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle("DP language model vs baselines (order 3; held-out users)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parameters(args: argparse.Namespace, epsilons: list[float]) -> dict[str, Any]:
    from dpngram.config import RunConfig
    from dpngram.lm.evaluate import SPELL_ALPHABET, SPELL_MEAN_LENGTH
    from dpngram.mechanisms.lm_counts import WEIGHT_GRID

    lm_defaults = {k: v for k, v in RunConfig.build(input="x", out="y").flat().items() if k.startswith("lm_")}
    return {
        "epsilons": epsilons,
        "delta": args.delta,
        "max_n": MAX_N,
        "order": ORDER,
        "stage_budget": STAGE_BUDGET,
        "memory_limit": args.memory_limit,
        "lm_options": {**lm_defaults, "lm_route": "auto (-> mixture: the run has an lm_counts share)"},
        "mix_weight_grid": list(WEIGHT_GRID),
        "split": "sha256(user_id) % 10 == 0: held out (never trained on); all other users train",
        "scored": {
            "sotu": "every held-out user",
            "generated": f"held-out users with (sha256(user_id) // 10) % {GENERATED_SCORE_EVERY} == 0",
        },
        "baselines": {
            "public_only": f"lmplz -o {ORDER} (modified Kneser-Ney, --discount_fallback) on the public "
            "corpus, own vocabulary",
            "non_private": f"lmplz -o {ORDER} on the training users' text, own vocabulary",
            "at_dp_vocab": "the same on text with tokens outside V_LM (released model's unigrams minus "
            "markers) as one placeholder, renamed <unk> in the ARPA file (unigram mass merged with lmplz's "
            "<unk>); scored on the raw evaluation text",
            "oracle": {
                "public": "the public_only lmplz model (its unigrams + the private words it lacks at p ~ 0)",
                "private": "lm.open_model.noisy_count_model on EXACT training counts",
                "private_words": ORACLE_WORDS,
                "min_count": ORACLE_MIN_COUNT,
                "discount": ORACLE_DISCOUNT,
                "weight_grid": list(ORACLE_GRID),
                "weight_choice": "lowest open-vocabulary perplexity on the evaluation text (oracle)",
                "mixture": "lm.open_model.mix_models (static linear mixture merged into one backoff model)",
            },
        },
        "tokenizer": "pipeline tokenizer, lower-cased (the evaluation's and the pipeline's)",
        "evaluation": {
            "function": "dpngram.lm.evaluate.evaluate_file",
            "spelling_model": {"alphabet": SPELL_ALPHABET, "mean_length": SPELL_MEAN_LENGTH},
        },
        "generated": {"users": args.users, "public_sentences": PUBLIC_SENTENCES, "seed": SEED},
        "noise": "secure (the pipeline's default NoiseSource): each run draws fresh noise; no seed",
        "lmplz_memory": LMPLZ_MEMORY,
        "quick": args.quick,
    }


def previous_summary(path: Path) -> dict[str, Any] | None:
    """The headline of an earlier lm.json (read before this run overwrites it), for comparison:
    its commit, date, baselines and, per corpus and ε, the DP row and the headline."""
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if old.get("benchmark") != "lm" or "results" not in old:
        return None
    corpora = {}
    for name, block in old["results"].items():
        corpora[name] = {
            "baselines": {
                row: {k: block["baselines"][row].get(k) for k in ("open_vocab_perplexity", "top3_accuracy")}
                for row in ("public_only", "non_private", "oracle")
            },
            "results": {
                f"{r['epsilon']:g}": {
                    "dp_open_vocab_perplexity": r["rows"]["dp"]["open_vocab_perplexity"],
                    "dp_top3_accuracy": r["rows"]["dp"]["top3_accuracy"],
                    "mix_weight": r.get("mix_weight"),
                    "unigram_adaptation": r.get("unigram_adaptation"),
                    "sigma": r.get("sigma"),
                    "released_by_order": r.get("released_by_order"),
                    "headline": r["headline"],
                }
                for r in block["results"]
            },
        }
    params = old.get("parameters", {})
    run_config = next(iter(params.get("run_config", {}).values()), {})
    return {
        "note": f"the previous result of this benchmark ({path.name} before this run replaced it)",
        "commit": (old.get("git_commit") or {}).get("head"),
        "date": old.get("date"),
        "seconds": old.get("seconds"),
        "machine": old.get("machine"),
        "parameters": {
            k: params.get(k) for k in ("epsilons", "delta", "max_n", "order", "stage_budget", "quick")
        },
        "run_config": {  # None: the option did not exist then
            k: run_config.get(k)
            for k in ("sigma_decay", "budget_calibration", "dpsu_policy", "dpne_variant", "eta")
        },
        "corpora": corpora,
    }


def write_out(out: dict[str, Any], out_json: Path, started: float, partial: bool) -> None:
    """Write the JSON and the plot (after each corpus, so a run cut short keeps what finished)."""
    out["partial"] = partial
    out["parameters"]["corpora"] = {
        name: {**block["corpus"], "sizes": block["sizes"]} for name, block in out["results"].items()
    }
    out["parameters"]["run_config"] = {name: block["run_config"] for name, block in out["results"].items()}
    out["baselines"] = {name: block["baselines"] for name, block in out["results"].items()}
    out["headline"] = {
        name: {f"{r['epsilon']:g}": r["headline"] for r in block["results"]}
        for name, block in out["results"].items()
    }
    out["targets"] = {name: block["targets"] for name, block in out["results"].items()}
    out["seconds"] = round(time.perf_counter() - started, 1)
    out["git_commit_at_end"] = git_commit()  # stage lm re-imports dpngram in each child process
    out["machine"]["load_average_1min_at_end"] = round(os.getloadavg()[0], 2)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
    plot(out, out_json.with_suffix(".png"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    ap.add_argument("--corpora", default="sotu,generated")
    ap.add_argument(
        "--users", type=int, default=None, help=f"generated corpus size (default {GENERATED_USERS:,})"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke test: ε={QUICK_EPSILON:g}, {QUICK_USERS:,} generated users",
    )
    ap.add_argument("--delta", type=float, default=DELTA)
    ap.add_argument("--memory-limit", default="4GB", help="DuckDB memory limit of the pipeline runs")
    ap.add_argument("--sotu", default=str(DATA / "sotu_users.jsonl.gz"))
    ap.add_argument("--brown", default=str(DATA / "brown_public.txt.gz"))
    ap.add_argument("--work", default=str(CACHE / "lm_work"), help="scratch folder (removed afterwards)")
    ap.add_argument("--keep-work", action="store_true")
    ap.add_argument(
        "--previous",
        default=None,
        help="an earlier lm.json whose headline is carried as previous_run (default: the output "
        "JSON if it exists, read before it is replaced; 'none' to skip)",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default benchmarks/results/lm.json; --quick: benchmarks/.data/lm_quick.json)",
    )
    args = ap.parse_args()
    epsilons = (
        [QUICK_EPSILON]
        if args.quick and "--epsilons" not in sys.argv
        else [float(e) for e in args.epsilons.split(",")]
    )
    if args.users is None:
        args.users = QUICK_USERS if args.quick else GENERATED_USERS
    out_json = (
        Path(args.out) if args.out else (CACHE / "lm_quick.json" if args.quick else RESULTS / "lm.json")
    )
    names = [c.strip() for c in args.corpora.split(",") if c.strip()]
    started = time.perf_counter()
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    mach = machine()
    out: dict[str, Any] = {
        "benchmark": "lm",
        "date": date,
        "machine": mach,
        "git_commit": git_commit(),
        "parameters": parameters(args, epsilons),
        "results": {},
    }
    previous = Path(args.previous) if args.previous not in (None, "none") else out_json
    if args.previous != "none" and previous.is_file():
        out["previous_run"] = previous_summary(previous)
    for name in names:
        if name == "sotu":
            if not Path(args.sotu).is_file() or not Path(args.brown).is_file():
                print(f"skipped sotu: shared data not found under {DATA}")
                continue
            corpus = Corpus("sotu", Path(args.sotu), Path(args.brown), 1, {"users": 12_807})
        elif name == "generated":
            corpus = generated_corpus(args.users)
        else:
            raise SystemExit(f"--corpora: unknown corpus {name!r} (sotu, generated)")
        out["results"][name] = run_corpus(corpus, epsilons, args)
        print_table(name, out["results"][name])
        write_out(out, out_json, started, partial=name != names[-1])
    print(f"\nwrote {out_json} and {out_json.with_suffix('.png').name}; total {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
