"""The open-vocabulary DP language model (route 'mixture': stage lm_counts + stage lm) against
public-only, non-private and oracle KenLM models, on held-out users of four corpora, at each ε.

    python benchmarks/lm_bench.py [--epsilons 1,4] [--runs 3] [--corpora sotu,generated,chat,mail]
                                  [--baseline-commit REV] [--users 200000] [--quick]
                                  [--previous PATH|none] [--table]

Corpora (users split by sha256(user_id) % 10 == 0: held out, never seen by any model):

* ``chat`` and ``mail``: real user-written text with authors, built from registry packages pinned
  by version and sha256 (``benchmarks/lm/real_corpora.py``: the BYU Chit-Chat Challenge from PyPI,
  the SpamAssassin corpus's ham from the npm registry), Brown public; every held-out user is
  scored;
* ``sotu``: ``../shared/data/sotu_users.jsonl.gz`` (12,807 users) private, Brown
  (``../shared/data/brown_public.txt.gz``) public; every held-out user is scored;
* ``generated``: ``dpngram.text.sample.write_sample`` with ``--users`` users (default 200,000) and a
  public corpus of Brown's sentence count from the same generator with shifted statistics
  (cached under ``benchmarks/.data/`` keyed by users, public sentences, seed and
  ``GENERATOR_VERSION``); the held-out users with (sha256 // 10) % 10 == 0 (a tenth of them, about
  1% of all users) are scored, which keeps the Python top-k scorer at ~200k tokens per model.

``--runs`` releases per corpus and ε (default 3, fresh noise each); each cell is summarised as mean,
min and max (``summary`` per corpus, ``headline`` in the JSON). ``--baseline-commit REV`` also
releases with REV's own code (its ``dpngram run``, a worktree under benchmarks/.data/) on the same
training file and settings and scores its model with this checkout's evaluation: row
``dp_baseline``, and the target that the mean gap closed is not below the baseline's by more than
one run's spread (max − min of the runs); by default REV is ``BASELINE_COMMIT`` (main of 2026-12-05,
the baseline issue 52 names), ``--baseline-commit none`` skips the row (``--quick`` does).
``--table`` prints an existing JSON's headline as markdown.

Per (corpus, ε, run): one pipeline run on the training users (a user's default run: every stage,
DPNE T = 5, the default split dpne 0.4 / lm_counts 0.4 / bayes 0.1 / synth 0.1, every lm_* option
at its default; fresh secure noise per run), with stage ``lm`` alone in a spawned child process: its
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
* ``oracle`` (ε-independent): the public-only lmplz model mixed (``lm.mixture.mix_models``)
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

``previous_run`` in the JSON: the headline of the lm.json this run replaces (or of ``--previous``; with
``--option``, of the default's ``results/lm.json``), so a reader can compare the two; the plot draws
its DP curve in grey.

``--quick`` (smoke test): ε = 4 only and a 20,000-user generated corpus; writes
benchmarks/.data/lm_quick.json/.png instead of benchmarks/results/lm.json and lm.png. Scratch files
go to benchmarks/.data/lm_work (removed per ε; ``--keep-work`` keeps them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# The scenario modules live in benchmarks/lm/; the names other benchmarks and tests use
# (``lm_bench.split_users``, ``from lm_bench import Corpus``, ...) stay importable from here.
from _common import git_commit, machine  # noqa: E402, F401
from lm.common import (  # noqa: E402, F401
    CACHE,
    DATA,
    DELTA,
    EPSILONS,
    GENERATED_USERS,
    HOLDOUT_MOD,
    MAX_N,
    ORDER,
    PUBLIC_SENTENCES,
    QUICK_EPSILON,
    QUICK_USERS,
    RESULTS,
    SEED,
    STAGE_BUDGET,
    Corpus,
    eval_sentences,
    generated_corpus,
    log,
    split_users,
    tokenised_text,
    user_hash,
)
from lm.corpus import headline, run_corpus, targets  # noqa: E402, F401
from lm.dp_run import bench_config, dp_run, run_lm_stage  # noqa: E402, F401
from lm.models import evaluate, lmplz_model, oracle_model  # noqa: E402, F401
from lm.output import markdown_table, parameters, previous_summary, print_table, refresh_derived, write_out  # noqa: E402, F401
from lm.real_corpora import REAL_CORPORA, real_corpus  # noqa: E402

#: The baseline row's code when none is named: main of 2026-12-05, the row issue 52's lm.json must
#: carry (so `make bench`, which runs this script with no arguments, keeps it).
BASELINE_COMMIT = "e539b2f"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epsilons", default="1,4", help="comma-separated ε of the whole run (default 1,4)")
    ap.add_argument(
        "--corpora",
        default=",".join(("sotu", "generated", *REAL_CORPORA)),
        help="comma-separated: sotu, generated and the real user-written corpora of "
        f"benchmarks/lm/real_corpora.py ({', '.join(REAL_CORPORA)})",
    )
    ap.add_argument("--runs", type=int, default=3, help="DP releases per corpus and ε (fresh noise each)")
    ap.add_argument(
        "--baseline-commit",
        default=BASELINE_COMMIT,
        help="also release with this commit's code (a worktree under benchmarks/.data/) on the same "
        f"split and score it as row dp_baseline (default {BASELINE_COMMIT}, main of 2026-12-05, the "
        "baseline issue 52 names; 'none' to skip)",
    )
    ap.add_argument(
        "--users", type=int, default=None, help=f"generated corpus size (default {GENERATED_USERS:,})"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke test: ε={QUICK_EPSILON:g}, {QUICK_USERS:,} generated users",
    )
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of every DP release by its flat name (JSON value), e.g. dpsu_new_words=10; "
        "repeatable. The baseline commit's releases keep their defaults",
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
        help="an earlier lm.json whose headline is carried as previous_run (default: with --option, "
        "results/lm.json, the default's latest run; else the output JSON if it exists, read before "
        "it is replaced; 'none' to skip)",
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the results of the corpora not run from the existing --out (each corpus block "
        "keeps its own commit and date under parameters.merged)",
    )
    ap.add_argument(
        "--refresh-derived",
        action="store_true",
        help="only recompute missed_targets and ablations of the existing --out from its results and "
        "the studies' JSON (no run)",
    )
    ap.add_argument(
        "--table", action="store_true", help="only print the existing --out's headline as a markdown table"
    )
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default benchmarks/results/lm.json; --quick: benchmarks/.data/lm_quick.json)",
    )
    args = ap.parse_args()
    if str(args.baseline_commit).lower() == "none" or args.quick:
        args.baseline_commit = None
    args.options = {}
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--option {item!r}: expected NAME=VALUE")
        try:
            args.options[name] = json.loads(value)
        except json.JSONDecodeError:
            args.options[name] = value
    return args


def previous_path(previous: str | None, options: list[str], out_json: Path) -> Path | None:
    """The lm.json whose headline becomes ``previous_run``: ``--previous`` (None for 'none'); by
    default, for an ``--option`` run the default's latest ``results/lm.json`` (an option is judged
    against the default, not against an earlier run of itself), else the file this run replaces."""
    if previous == "none":
        return None
    if previous is not None:
        return Path(previous)
    return RESULTS / "lm.json" if options else out_json


def main() -> None:
    args = parse_args()
    epsilons = (
        [QUICK_EPSILON]
        if args.quick and "--epsilons" not in sys.argv
        else [float(e) for e in args.epsilons.split(",")]
    )
    if args.quick and "--runs" not in sys.argv:
        args.runs = 1
    if args.users is None:
        args.users = QUICK_USERS if args.quick else GENERATED_USERS
    out_json = (
        Path(args.out) if args.out else (CACHE / "lm_quick.json" if args.quick else RESULTS / "lm.json")
    )
    if args.table:
        print(markdown_table(json.loads(out_json.read_text(encoding="utf-8"))))
        return
    if args.refresh_derived:
        refresh_derived(out_json)
        print(f"refreshed missed_targets and ablations of {out_json}")
        return
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
    previous = previous_path(args.previous, args.option, out_json)
    if previous is not None and previous.is_file():
        out["previous_run"] = previous_summary(previous, replaced=previous == out_json)
    if args.merge and out_json.is_file():
        old = json.loads(out_json.read_text(encoding="utf-8"))
        kept = {n: block for n, block in old.get("results", {}).items() if n not in names}
        out["results"].update(kept)
        out["parameters"]["merged"] = {
            n: {"git_commit": old.get("git_commit"), "date": old.get("date")} for n in kept
        }
    for name in names:
        if name == "sotu":
            if not Path(args.sotu).is_file() or not Path(args.brown).is_file():
                print(f"skipped sotu: shared data not found under {DATA}")
                continue
            corpus = Corpus("sotu", Path(args.sotu), Path(args.brown), 1, {"users": 12_807})
        elif name == "generated":
            corpus = generated_corpus(args.users)
        elif name in REAL_CORPORA:
            corpus = real_corpus(name, Path(args.brown))
        else:
            known = ", ".join(("sotu", "generated", *REAL_CORPORA))
            raise SystemExit(f"--corpora: unknown corpus {name!r} ({known})")
        out["results"][name] = run_corpus(corpus, epsilons, args)
        print_table(name, out["results"][name])
        write_out(out, out_json, started, partial=name != names[-1])
    print(f"\nwrote {out_json} and {out_json.with_suffix('.png').name}; total {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
