"""DPNE benchmark: the paper's Table 4 and Figure 1, the public reference side by side, speed and
scaling (issue 3; docs/dpne.md "Benchmark results").

    .venv/bin/python benchmarks/dpne_bench.py sotu       [--repeat 3] [--no-table4]
    .venv/bin/python benchmarks/dpne_bench.py synthetic  [--users 1000000] [--table4-users 100000]
                                                          [--large-baselines dpsu-single:4-9]
    .venv/bin/python benchmarks/dpne_bench.py speed      (re-measure the 1M speed run only)
    .venv/bin/python benchmarks/dpne_bench.py large-baselines --large-baselines dpsu-single:4-9
    .venv/bin/python benchmarks/dpne_bench.py scaling    [--users 100000 300000 1000000] [--rerun]
    .venv/bin/python benchmarks/dpne_bench.py figure
    .venv/bin/python benchmarks/dpne_bench.py budget     [--users 200000] [--repeat 3]
    .venv/bin/python benchmarks/dpne_bench.py budget-speed [--users 200000] [--repeat 3]
    .venv/bin/python benchmarks/dpne_bench.py sips       [--users 200000] [--repeat 3] [--tuning-repeat 2]
    .venv/bin/python benchmarks/dpne_bench.py sips-speed [--users 200000] [--repeat 2]
    .venv/bin/python benchmarks/dpne_bench.py public-vocab [--users 200000] [--repeat 3]
    .venv/bin/python benchmarks/dpne_bench.py sips-admission [--users 200000] [--repeat 3]
    .venv/bin/python benchmarks/dpne_bench.py default-check [--users 200000] [--repeat 3]
                                              [--generated-repeat N]
    .venv/bin/python benchmarks/dpne_bench.py new-words [--users 200000] [--repeat 3]
    .venv/bin/python benchmarks/dpne_bench.py [all]      (the scenarios of BENCH_STEPS, in order; hours)

Parameters are the paper's §3.1.2 setting: eps = 4, delta = 1e-7, Delta_0 = 100, eta = 0.01, both-side
pruning; T = 9 for Table 4, T = 5 for the reference comparison and the speed runs.

* ``sotu`` — ``ROOT/../shared/data/sotu_users.jsonl.gz`` (skipped with a message when absent):
  ``--repeat`` end-to-end runs at T = 5 next to the public reference implementation's published
  figures, and Table 4 at T = 9: DPNE, DPSU-all, DPSU-even and DPSU-single (one run per k).
  Writes ``results/dpne_sotu.json``.
* ``synthetic`` — corpora from the project's generator (``dpngram.text.sample.write_sample``, ~100 tokens
  per user, cached under ``benchmarks/.data/``), ingested with ``dpngram.stages.ingest.run_ingest``:
  the 1M-user speed run at T = 5 (ingest included and excluded, users/s, tokens/s, per-level split,
  peak RSS), DPNE at T = 9 on the same 1M users, and the full Table 4 (all baselines) on
  ``--table4-users`` users (DPSU-all over all n-grams of 1M users does not fit the time budget:
  measured 245 s at 100k users, so ~40 min at 1M). Writes ``results/dpne_synthetic_1m.json``.
* ``scaling`` — T = 5 end to end at each ``--users``; the 1M point is reused from
  ``dpne_synthetic_1m.json`` unless ``--rerun``. Fits time ~ users^b. Writes
  ``results/dpne_scaling.json``.
* ``budget`` — more from the same budget: the DPSU policy (weighted vs policy Gaussian), the level
  schedule c and the delta split, each alone and together (the defaults), at eps 1 and 4 on SOTU and
  a generated corpus of ``--users`` (200k) users, against the previous default and the reference;
  the public-text grid (Brown as pseudo-users) the defaults were chosen on; and the run's composed
  epsilon before and after joint calibration for every stage combination. Writes
  ``results/dpne_budget.json`` and ``results/dpne_budget.png``.
* ``sips`` — the DP-SIPS policy: (R, ratio) tuned on Brown pseudo-users (public) at eps 4 and 1,
  then the chosen setting against the weighted policy and the policy Gaussian on SOTU and
  ``--users`` generated users (released n-grams, spurious fraction, per-round SQL seconds).
  Writes ``results/dpne_sips.json`` and ``results/dpne_sips.png``.
* ``default-check`` — the current DPSU default, plain DP-SIPS, the policy Gaussian (the default when
  issue "Scale" was filed) and the weighted policy side by side on SOTU and ``--users`` generated
  users at eps 4 and 1 (``benchmarks/dpne/default_check.py``). Writes
  ``results/dpne_default_check.json`` and ``.png``.
* ``new-words`` — the vocabulary's new-words round (``dpsu_new_words``) on and off on SOTU, the LM
  benchmark's real corpora (``benchmarks/lm/real_corpora.py``) and ``--users`` generated users
  (``benchmarks/dpne/new_words.py``). Writes ``results/dpne_new_words.json``.
* ``figure`` — ``results/dpne_figure1.png`` (n-grams per k, log y, one panel per corpus; like the
  paper's Figure 1) from the two JSON files.

Every measured run is its own Python process (``_job``), so its wall time includes interpreter
start-up and imports ("end to end", as for the reference) and its peak RSS is its own
(``getrusage`` of the process; DuckDB runs in-process). Released counts are DP outputs. The
spurious fraction and the corpus sizes (users, tokens) are exact statistics: benchmark-only, on
public/synthetic corpora — never compute them on private data.

The scenarios live in ``benchmarks/dpne/``: ``common`` (paths, parameters, results), ``jobs`` (one
measured run per process), ``table4``, ``budget`` and ``sips``; this file is their one entry point.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dpne import jobs  # noqa: E402
from dpne.admission import mode_sips_admission  # noqa: E402
from dpne.budget import mode_budget, mode_budget_speed  # noqa: E402
from dpne.common import CACHE  # noqa: E402
from dpne.default_check import mode_default_check  # noqa: E402
from dpne.jobs import job_main  # noqa: E402
from dpne.new_words import mode_new_words  # noqa: E402
from dpne.public_vocab import mode_public_vocab  # noqa: E402
from dpne.sips import mode_sips, mode_sips_speed  # noqa: E402
from dpne.table4 import mode_figure, mode_large_baselines, mode_scaling, mode_sotu, mode_speed, mode_synthetic  # noqa: E402

#: What ``all`` runs, in this order. `make bench` runs each as a step of its own
#: (benchmarks/run_all.py reads this tuple without importing the script), so a stopped run resumes at
#: the scenario it stopped in rather than at ``sotu``; ``dpne_bench.py all`` runs the same work.
BENCH_STEPS = ("sotu", "synthetic", "scaling", "figure", "budget", "budget-speed", "public-vocab")

#: Each scenario's entry point.
SCENARIOS = {
    "sotu": mode_sotu,
    "synthetic": mode_synthetic,
    "speed": mode_speed,
    "large-baselines": mode_large_baselines,
    "scaling": mode_scaling,
    "figure": mode_figure,
    "budget": mode_budget,
    "budget-speed": mode_budget_speed,
    "sips": mode_sips,
    "sips-speed": mode_sips_speed,
    "public-vocab": mode_public_vocab,
    "sips-admission": mode_sips_admission,
    "default-check": mode_default_check,
    "new-words": mode_new_words,
}


#: The scenarios ``mode`` may name.
MODES = [*SCENARIOS, "all"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "mode",
        nargs="?",
        default="all",
        choices=MODES,
        help="default: all (`make bench` runs the same scenarios, one step each)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="sotu: end-to-end runs at T=5 (>= 3)")
    parser.add_argument("--no-table4", action="store_true", help="skip Table 4 (T=9 with baselines)")
    parser.add_argument(
        "--users",
        type=int,
        nargs="+",
        default=None,
        help="synthetic: speed-run users (default 1000000); scaling: the points "
        "(default 100000 300000 1000000)",
    )
    parser.add_argument(
        "--table4-users",
        type=int,
        default=100_000,
        help="synthetic: users of the corpus for Table 4 with every baseline",
    )
    parser.add_argument(
        "--large-baselines",
        default="",
        help="synthetic: baselines also run on the large corpus, e.g. 'dpsu-single:4-9'",
    )
    parser.add_argument("--rerun", action="store_true", help="scaling: re-measure the 1M point")
    parser.add_argument("--tuning-repeat", type=int, default=2, help="sips: runs per Brown grid point")
    parser.add_argument(
        "--generated-repeat",
        type=int,
        default=None,
        help="default-check: runs per point on the generated corpus (default --repeat)",
    )
    parser.add_argument(
        "--reuse-jobs", action="store_true", help="reuse the results of jobs already run with the same spec"
    )
    parser.add_argument(
        "--sips-choice", default=None, help="sips: skip the Brown grid and use this grid entry"
    )
    parser.add_argument(
        "--workdir",
        default=str(CACHE / "dpne_work"),
        help="warehouses and releases of the runs (default benchmarks/.data/dpne_work)",
    )
    return parser.parse_args()


def run_modes(args: argparse.Namespace) -> None:
    """Run the scenario ``args.mode`` names, or every one of :data:`BENCH_STEPS` in order for
    ``all``, each with the ``--users`` default of its own."""
    users = args.users
    for mode in BENCH_STEPS if args.mode == "all" else (args.mode,):
        if mode == "synthetic":
            args.users = (users or [1_000_000])[0]
        elif mode == "scaling":
            args.users = users or [100_000, 300_000, 1_000_000]
        else:
            args.users = users
        SCENARIOS[mode](args)


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "_job":
        job_main(sys.argv[2], sys.argv[3])
        return
    args = parse_args()
    jobs.REUSE_JOBS = args.reuse_jobs
    run_modes(args)


if __name__ == "__main__":
    main()
