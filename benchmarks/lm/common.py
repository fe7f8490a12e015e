"""Shared by the LM benchmark's scenarios: paths, the benchmark's parameters, the two corpora and
the held-out user split (``sha256(user_id) % 10 == 0``), tokenised text for lmplz and the evaluation.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The repository.
ROOT = Path(__file__).resolve().parent.parent.parent

DATA = ROOT.parent / "shared" / "data"
CACHE = ROOT / "benchmarks" / ".data"
RESULTS = ROOT / "benchmarks" / "results"
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTA = 1e-6
#: The product's defaults since 2026-11-27 (a user's default run: T = 5 and every stage budgeted;
#: until then T = 3 and dpne 0.5 / lm_counts 0.5, the setting of lm.json's ``previous_run``).
MAX_N = 5
ORDER = 3
STAGE_BUDGET = {"dpne": 0.4, "lm_counts": 0.4, "bayes": 0.1, "synth": 0.1}
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


def study_arguments(
    parser: Any, name: str, runs: int = 2, corpora: str = "sotu,generated", epsilons: str = "1,4"
) -> Any:
    """The options every LM study shares: --corpora, --epsilons, --runs, --generated-users,
    --delta, --memory-limit, --work (``benchmarks/.data/<name>_work``) and --out
    (``benchmarks/results/<name>.json``). Returns the parsed arguments."""
    parser.add_argument("--corpora", default=corpora)
    parser.add_argument("--epsilons", default=epsilons)
    parser.add_argument("--runs", type=int, default=runs, help="releases per corpus and ε (fresh noise each)")
    parser.add_argument("--generated-users", type=int, default=GENERATED_USERS)
    parser.add_argument("--delta", type=float, default=DELTA)
    parser.add_argument("--memory-limit", default="4GB")
    parser.add_argument("--work", default=str(CACHE / f"{name}_work"))
    parser.add_argument("--out", default=str(RESULTS / f"{name}.json"))
    return parser.parse_args()


def study_header(benchmark: str, args: Any, **parameters: Any) -> dict[str, Any]:
    """The head of a study's JSON: name, date, machine, commit and the shared parameters of
    :func:`study_arguments` plus ``parameters``; ``results`` still empty."""
    import datetime as dt

    from _common import git_commit, machine

    return {
        "benchmark": benchmark,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "git_commit": git_commit(),
        "parameters": {
            "epsilons": [float(e) for e in args.epsilons.split(",")],
            "runs": args.runs,
            "delta": args.delta,
            "generated_users": args.generated_users,
            **parameters,
        },
        "results": {},
    }


#: The held-out split every LM study scores on (lm_bench's).
STUDY_SPLIT = "lm_bench's: sha256(user_id) % 10 == 0 held out; its scored users"


def start_study(benchmark: str, args: Any, **parameters: Any) -> tuple[list[float], float, dict[str, Any]]:
    """(the ε of ``args.epsilons``, the start time, :func:`study_header` with the held-out split
    and lm_bench's stage split unless ``parameters`` name others)."""
    parameters.setdefault("split", STUDY_SPLIT)
    parameters.setdefault("stage_budget", STAGE_BUDGET)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    return epsilons, time.perf_counter(), study_header(benchmark, args, **parameters)


def finish_study(out: dict[str, Any], args: Any, started: float, summary_key: str) -> None:
    """Close a study: its seconds into ``out``, the JSON to ``args.out``, and each corpus's
    ``summary_key`` printed, then the path."""
    import json

    out["seconds"] = round(time.perf_counter() - started, 1)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v[summary_key] for k, v in out["results"].items()}, indent=1))
    print(f"wrote {args.out}")


def study_corpora(args: Any):
    """A study's corpora (``args.corpora``: 'sotu' — SOTU with Brown public —, 'sotu-2k' — its
    users with sha256(user_id) % 6 == 0, lm_speed_bench's small corpus — and/or 'generated' —
    :func:`generated_corpus` of ``args.generated_users``), each yielded as (name, corpus, fresh
    scratch folder ``args.work/name``, :func:`split_users`'s result); the folder is removed
    afterwards. SOTU is skipped, with a message, when the shared data is missing."""
    import shutil

    names = [c.strip() for c in args.corpora.split(",") if c.strip()]
    unknown = [n for n in names if n not in ("sotu", "sotu-2k", "generated")]
    if unknown:
        raise SystemExit(f"--corpora: unknown corpus {unknown[0]!r} (sotu, sotu-2k, generated)")
    for name in names:
        if name in ("sotu", "sotu-2k"):
            corpus = Corpus("sotu", DATA / "sotu_users.jsonl.gz", DATA / "brown_public.txt.gz", 1, {})
            if not corpus.private.is_file():
                print(f"skipped {name}: {corpus.private} not found")
                continue
            if name == "sotu-2k":  # lm_speed_bench's small corpus: sha256(user_id) % 6 == 0
                from lm_speed_bench import corpus_paths

                corpus = Corpus("sotu-2k", corpus_paths("sotu-2k")[0], corpus.public, 1, {})
        else:
            corpus = generated_corpus(args.generated_users)
        work = Path(args.work) / name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        yield name, corpus, work, split_users(corpus, work)
        shutil.rmtree(work, ignore_errors=True)


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
