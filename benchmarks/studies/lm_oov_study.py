"""How much of the held-out text's out-of-vocabulary rate could a larger private vocabulary remove?
(issue 52, item 2: "a private vocabulary large enough to bring real text's OOV rate down").

    .venv/bin/python benchmarks/studies/lm_oov_study.py [--corpora sotu,chat,mail,generated]

No DP release and no noise: counting only, on the LM benchmark's user split (lm_bench's
``split_users``: sha256(user_id) % 10 == 0 held out, its scored users). Per corpus:

* the scored text's token OOV rate against the public corpus's words (the public-only model's
  vocabulary: every Brown word, lm_public_vocab_size 100,000 exceeds them) and against the
  training users' words (the non-private model's);
* for m in :data:`USER_THRESHOLDS`: the words outside the public corpus that at least m training
  users use, how many there are, and the OOV rate left if all of them were in the model's
  vocabulary. This is a NON-private upper bound for any private vocabulary that can only admit
  words used by at least m users; a DP set union needs far more than m = 1 (its threshold is many
  noise standard deviations of a user's weight), so the rows tell how far each threshold gets;
* the same as a share of the public-only OOV that such words remove.

The DP model's own OOV rate and the size of its DP vocabulary at ε = 1 and 4 are in
``results/lm.json`` (rows ``dp``, fields ``oov_rate`` and ``dp_vocabulary_size``); the JSON here
copies them when that file carries the corpus.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
from lm.common import CACHE, DATA, RESULTS, Corpus, eval_sentences, generated_corpus, log, split_users  # noqa: E402
from lm.real_corpora import REAL_CORPORA, real_corpus  # noqa: E402

USER_THRESHOLDS = (1, 2, 5, 10, 20, 50, 100)


def corpus_by_name(name: str, users: int) -> Corpus:
    brown = DATA / "brown_public.txt.gz"
    if name == "sotu":
        return Corpus("sotu", DATA / "sotu_users.jsonl.gz", brown, 1, {})
    if name == "generated":
        return generated_corpus(users)
    if name in REAL_CORPORA:
        return real_corpus(name, brown)
    raise SystemExit(f"--corpora: unknown corpus {name!r}")


def users_per_word(train: Path) -> Counter[str]:
    """How many training users use each word (the pipeline tokenizer, lower-cased)."""
    from dpngram.text.tokenizer import tokenize_texts

    words_of: dict[str, set[str]] = {}
    batch_ids: list[str] = []
    batch_texts: list[str] = []

    def flush() -> None:
        for uid, doc in zip(batch_ids, tokenize_texts(batch_texts), strict=True):
            seen = words_of.setdefault(uid, set())
            for sentence in doc:
                seen.update(sentence)
        batch_ids.clear()
        batch_texts.clear()

    with gzip.open(train, "rt", encoding="utf-8") as src:
        for line in src:
            row = json.loads(line)
            batch_ids.append(str(row["user_id"]))
            batch_texts.append(row["text"])
            if len(batch_ids) >= 5000:
                flush()
    flush()
    users: Counter[str] = Counter()
    for seen in words_of.values():
        users.update(seen)
    return users


def study(corpus: Corpus, work: Path) -> dict:
    from dpngram.text.public import read_public_corpus

    split = split_users(corpus, work)
    public = {w for s in read_public_corpus(corpus.public) for w in s}
    users = users_per_word(split["train"])
    tokens = [w for s in eval_sentences(split["eval"]) for w in s]
    total = len(tokens)
    outside = Counter(w for w in tokens if w not in public)
    oov_public = sum(outside.values())
    rows = []
    for m in USER_THRESHOLDS:
        admitted = {w for w, n in users.items() if n >= m and w not in public}
        left = sum(c for w, c in outside.items() if w not in admitted)
        rows.append(
            {
                "min_users": m,
                "private_words": len(admitted),
                "oov_rate": round(left / total, 4),
                "share_of_public_oov_removed": round(1 - left / oov_public, 4) if oov_public else None,
            }
        )
    return {
        "train_users": split["train_users"],
        "scored_users": split["scored_users"],
        "eval_tokens": total,
        "oov_rate_public_vocabulary": round(oov_public / total, 4),
        "oov_rate_training_vocabulary": round(sum(1 for w in tokens if w not in users) / total, 4),
        "by_min_users": rows,
        "most_frequent_outside_public": [[w, c, users.get(w, 0)] for w, c in outside.most_common(25)],
    }


def dp_model_rows(name: str) -> dict | None:
    """The DP model's OOV rate and DP vocabulary size per ε from results/lm.json, if it has them."""
    try:
        lm = json.loads((RESULTS / "lm.json").read_text())
        block = lm["results"][name]
    except (OSError, ValueError, KeyError):
        return None
    out: dict[str, dict] = {}
    for r in block["results"]:
        row = out.setdefault(f"{r['epsilon']:g}", {"oov_rate": [], "dp_vocabulary_size": []})
        row["oov_rate"].append(r["rows"]["dp"]["oov_rate"])
        row["dp_vocabulary_size"].append(r["dp_vocabulary_size"])
    return {
        "from": "results/lm.json",
        "git_commit": lm.get("git_commit"),
        "runs": out,
    }


def main() -> None:
    import datetime as dt

    from _common import git_commit, machine

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="sotu,chat,mail,generated")
    ap.add_argument("--generated-users", type=int, default=200_000)
    ap.add_argument("--work", default=str(CACHE / "lm_oov_work"))
    ap.add_argument("--out", default=str(RESULTS / "lm_oov.json"))
    args = ap.parse_args()
    started = time.perf_counter()
    out = {
        "benchmark": "lm_oov_study",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "git_commit": git_commit(),
        "parameters": {
            "split": "lm_bench's: sha256(user_id) % 10 == 0 held out; its scored users",
            "public_vocabulary": "every word of the public corpus (Brown)",
            "user_thresholds": list(USER_THRESHOLDS),
            "tokenizer": "pipeline tokenizer, lower-cased",
            "note": "NON-private counting: upper bounds for a private vocabulary, not a release",
        },
        "results": {},
    }
    for name in [c.strip() for c in args.corpora.split(",") if c.strip()]:
        corpus = corpus_by_name(name, args.generated_users)
        if not corpus.private.is_file():
            print(f"skipped {name}: {corpus.private} not found")
            continue
        work = Path(args.work) / name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        log(f"{name}: counting")
        out["results"][name] = {**study(corpus, work), "dp_model": dp_model_rows(name)}
        shutil.rmtree(work, ignore_errors=True)
        r = out["results"][name]
        log(
            f"{name}: OOV public {r['oov_rate_public_vocabulary']:.3f}, training "
            f"{r['oov_rate_training_vocabulary']:.3f}; "
            + ", ".join(
                f"m>={x['min_users']}: {x['oov_rate']:.3f} ({x['private_words']})" for x in r["by_min_users"]
            )
        )
    out["seconds"] = round(time.perf_counter() - started, 1)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
