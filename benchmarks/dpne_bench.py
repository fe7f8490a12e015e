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
    .venv/bin/python benchmarks/dpne_bench.py [all]      (sotu, synthetic, scaling, figure; ~35 min)

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
* ``figure`` — ``results/dpne_figure1.png`` (n-grams per k, log y, one panel per corpus; like the
  paper's Figure 1) from the two JSON files.

Every measured run is its own Python process (``_job``), so its wall time includes interpreter
start-up and imports ("end to end", as for the reference) and its peak RSS is its own
(``getrusage`` of the process; DuckDB runs in-process). Released counts are DP outputs. The
spurious fraction and the corpus sizes (users, tokens) are exact statistics: benchmark-only, on
public/synthetic corpora — never compute them on private data.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import inspect
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dpngram.orchestration.plan import run_dpne
from dpngram.stages import dpne as dpne_stage

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_commit, machine  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SOTU = DATA / "sotu_users.jsonl.gz"
CACHE = ROOT / "benchmarks" / ".data"
RESULTS = ROOT / "benchmarks" / "results"
SEED = 20261121  # same corpora (and cache folders) as benchmarks/ingest_bench.py
PUBLIC_SENTENCES = 20_000
#: DPNE alone, with the whole budget (the product's default split also funds other stages).
PAPER = {
    "epsilon": 4.0,
    "delta": 1e-7,
    "max_contribution": 100,
    "eta": 0.01,
    "pruning": "both",
    "stage_budget": {"dpne": 1.0},
}
TABLE4_T = 9
SPEED_T = 5
METHODS = ("dpne", "dpsu-all", "dpsu-even", "dpsu-single")
FALSE_FAILURE = 1e-4  # of the spurious-count upper bands

# The public DPNE implementation (PySpark local, 2 cores), as measured on this kind of machine
# (issue 3): eps = 4, delta = 1e-7, eta = 0.01, Delta = 100, T = 5, both-side pruning.
REFERENCE = {
    "implementation": "public DPNE reference (PySpark local, 2 cores, top-k per-user sampling)",
    "released_total_runs": [4237, 4364],
    "released_per_k_first_run": [1023, 1316, 1190, 505, 203],
    "end_to_end_seconds": 13.4 * 60,
    "end_to_end_seconds_tuned": 8.1 * 60,
    "tuning": "Spark with 4 shuffle partitions",
    "peak_rss_mb": 6.3 * 1024,
}


# ----------------------------------------------------------------------------------------------
# Environment
# ----------------------------------------------------------------------------------------------
def peak_rss_mb() -> float:
    """Peak resident set size of this process (and any waited-for children), MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024, 1)


def corpus(n_users: int) -> Path:
    """The generated corpus of ``n_users`` users (cached; same folders as ingest_bench.py)."""
    from dpngram.text.sample import GENERATOR_VERSION, write_sample

    folder = CACHE / f"sample_u{n_users}_s{SEED}_g{GENERATOR_VERSION}"
    users = folder / "users.jsonl.gz"
    if not users.is_file():
        started = time.perf_counter()
        print(f"generating {n_users:,} users into {folder} ...", file=sys.stderr, flush=True)
        write_sample(folder, n_users=n_users, seed=SEED, public_sentences=PUBLIC_SENTENCES)
        print(f"  generated in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return users


def write_sample_default(name: str) -> Any:
    from dpngram.text.sample import write_sample

    return inspect.signature(write_sample).parameters[name].default


def write_result(name: str, record: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    print(f"\nresults: {path.relative_to(ROOT)}")
    return path


def header(benchmark: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "benchmark": benchmark,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "machine": machine(),
        "parameters": parameters,
    }


# ----------------------------------------------------------------------------------------------
# Jobs: one measured run per process
# ----------------------------------------------------------------------------------------------
#: ``--reuse-jobs``: a job whose spec file matches and whose result exists is not run again (to
#: resume an interrupted benchmark; every reused result is named on stderr).
REUSE_JOBS = False


def run_job(workdir: Path, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec`` in a fresh interpreter (``_job``); return its result record."""
    jobs = workdir / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    spec_path, result_path = jobs / f"{name}.json", jobs / f"{name}.result.json"
    if REUSE_JOBS and result_path.is_file() and spec_path.is_file():
        old = json.loads(spec_path.read_text(encoding="utf-8"))
        if {k: v for k, v in old.items() if k not in ("name", "workdir", "result")} == spec:
            print(f"[{name}] reused (--reuse-jobs)", file=sys.stderr, flush=True)
            return json.loads(result_path.read_text(encoding="utf-8"))
    result_path.unlink(missing_ok=True)
    shutil.rmtree(workdir / name, ignore_errors=True)  # a fresh warehouse and release per job
    spec = {**spec, "name": name, "workdir": str(workdir), "result": str(result_path)}
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    print(f"[{name}] starting", file=sys.stderr, flush=True)
    spec_started = time.time()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "_job", str(spec_path), str(spec_started)]
    )
    if proc.returncode != 0 or not result_path.is_file():
        raise SystemExit(f"benchmark job {name} failed (exit {proc.returncode}); see its output above")
    result = json.loads(result_path.read_text(encoding="utf-8"))
    print(f"[{name}] done in {time.time() - spec_started:.0f} s", file=sys.stderr, flush=True)
    return result


def job_main(spec_path: str, spawned_at: str) -> None:
    """Body of a job process: ingest (or clone sentences), DPNE, checks, baselines."""
    spawned = float(spawned_at)
    from dpngram.mechanisms import dpne  # noqa: F401 - import cost belongs to the measured start-up
    from dpngram.stages.ingest import run_ingest

    startup_s = time.time() - spawned  # interpreter start + imports: part of "end to end"
    load_before = os.getloadavg()[0]  # the machine may be shared: recorded with every job
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    workdir, name = Path(spec["workdir"]), spec["name"]
    out: dict[str, Any] = {"name": name, "max_n": spec["max_n"]}
    ctx = new_context(
        workdir,
        name,
        spec["input"],
        spec["max_n"],
        spec.get("memory_limit", "4GB"),
        overrides=spec.get("overrides"),
    )
    t0 = time.perf_counter()
    if spec.get("clone_from"):
        clone_sentences(ctx, spec["clone_from"])
        out["ingest"] = {"cloned_from": spec["clone_from"]}
    else:
        run_ingest(ctx)
    ingest_s = time.perf_counter() - t0
    corpus_size = corpus_stats(ctx, spec.get("clone_from"))
    if spec.get("baselines_only"):  # DPSU baselines on an earlier job's sentences, nothing else
        out.update({"corpus": corpus_size, "baselines": []})
        for method, k in spec["baselines"]:
            out["baselines"].append(
                run_one_baseline(workdir, ctx, method, k, spec["max_n"], spec.get("memory_limit", "4GB"))
            )
        out["peak_rss_mb_job"] = peak_rss_mb()
        Path(spec["result"]).write_text(json.dumps(out, indent=2, default=str), encoding="utf-8")
        return
    dpne_run = timed_dpne(ctx, name)
    ended = time.time()
    out.update(
        {
            "schema": ctx.schema,
            "warehouse": ctx.config.warehouse,
            "corpus": corpus_size,
            "timing": {
                "startup_seconds": round(startup_s, 2),
                "ingest_seconds": round(ingest_s, 2),
                "dpne_seconds": dpne_run["seconds"],
                "end_to_end_seconds": round(ended - spawned, 2),
                "stage_seconds": dpne_run["stage_seconds"],
            },
            "peak_rss_mb": peak_rss_mb(),
            "load_average_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "dpne": dpne_run["levels"],
            "released_total": sum(row["released"] for row in dpne_run["levels"]),
        }
    )
    if spec.get("spurious", True):
        t1 = time.perf_counter()
        out["spurious"] = spurious_check(ctx, dpne_run["levels"])
        out["spurious"]["check_seconds"] = round(time.perf_counter() - t1, 1)
    baselines = []
    for method, k in spec.get("baselines", []):
        baselines.append(
            run_one_baseline(workdir, ctx, method, k, spec["max_n"], spec.get("memory_limit", "4GB"))
        )
    if baselines:
        out["baselines"] = baselines
    from dpngram.mechanisms.dpsu import SIPS_TIMINGS

    if SIPS_TIMINGS:  # DP-SIPS: seconds of each round's histogram SQL and draw (no data)
        out["sips_timings"] = list(SIPS_TIMINGS)
    out["peak_rss_mb_job"] = peak_rss_mb()
    Path(spec["result"]).write_text(json.dumps(out, indent=2, default=str), encoding="utf-8")


def new_context(
    workdir: Path,
    name: str,
    input_path: str,
    max_n: int,
    memory_limit: str,
    warehouse: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Any:
    from dpngram.config import RunConfig
    from dpngram.release.context import RunContext
    from dpngram.release.publish import prepare

    config = RunConfig.build(
        input=input_path,
        out=str(workdir / name / "out"),
        warehouse=warehouse or str(workdir / name / "wh.duckdb"),
        memory_limit=memory_limit,
        max_n=max_n,
        **{**PAPER, **(overrides or {})},
    )
    return RunContext(prepare(config))


def clone_sentences(ctx: Any, source: dict[str, str]) -> None:
    """Copy the ingested sentences of an earlier job (its warehouse file and schema) into this
    run's schema, so several runs share one ingest (benchmark plumbing; private table to private
    table)."""
    from dpngram.engines.sql import safe_identifier

    schema = safe_identifier(source["schema"])
    with ctx.warehouse() as wh:
        same = Path(source["warehouse"]).resolve() == Path(ctx.config.warehouse).resolve()
        prefix = schema
        if not same:
            location = str(Path(source["warehouse"]).resolve()).replace("'", "''")
            wh.con.execute(f"ATTACH '{location}' AS bench_source (READ_ONLY)")
            prefix = f"bench_source.{schema}"
        wh.con.execute(f"CREATE OR REPLACE TABLE {ctx.schema}.sentences AS SELECT * FROM {prefix}.sentences")
        if not same:
            wh.con.execute("DETACH bench_source")


def corpus_stats(ctx: Any, cloned: dict[str, str] | None) -> dict[str, int]:
    """Users, documents, sentences and tokens of the ingested corpus (exact: public/synthetic
    corpora only)."""
    with ctx.warehouse() as wh:
        row = wh.con.sql(
            f"SELECT count(DISTINCT user_id), count(DISTINCT (user_id, doc_id)), count(*), "
            f"sum(len(tokens)) FROM {ctx.schema}.sentences"
        ).fetchall()[0]
    return {"users": int(row[0]), "documents": int(row[1]), "sentences": int(row[2]), "tokens": int(row[3])}


def timed_dpne(ctx: Any, name: str) -> dict[str, Any]:
    from dpngram.release.context import read_parts

    stages: dict[str, float] = {}
    last = time.perf_counter()
    started = last

    def progress(stage: str) -> None:
        nonlocal last
        now = time.perf_counter()
        stages[stage] = round(now - last, 2)
        last = now
        print(f"  [{name}] {stage} {stages[stage]:.1f} s", file=sys.stderr, flush=True)

    run_dpne(ctx, progress=progress)
    seconds = round(time.perf_counter() - started, 2)
    parts = read_parts(ctx)
    levels = []
    for k in range(1, ctx.config.dpne.max_n + 1):
        part = parts.get(f"dpne.k{k}", {})
        levels.append(
            {
                "k": k,
                "released": int(part["released"]),
                "valid": part.get("valid"),
                "variant": part.get("variant"),
                "sigma": part.get("sigma"),
                "rho": part.get("rho"),
                **({"public_domain": part["public_domain"]} if part.get("public_domain") else {}),
            }
        )
    return {"seconds": seconds, "stage_seconds": stages, "levels": levels}


# Benchmark-only ground truth (PRIVATE statistics; never part of the product): which released
# k-grams occur in some user's text, after the same tokenization (the ingested sentences).
SPURIOUS_SQL = """
WITH released AS (
    {released}
),
text_kgrams AS (
    SELECT array_to_string(list_slice(tokens, i, i + $k - 1), ' ') AS ngram
    FROM (
        SELECT tokens, unnest(generate_series(1, len(tokens) - $k + 1)) AS i
        FROM {schema}.sentences
    ) AS starts
)
SELECT (SELECT count(*) FROM released) AS released,
       (SELECT count(DISTINCT r.ngram) FROM released AS r JOIN text_kgrams AS t ON t.ngram = r.ngram)
           AS present
"""


def spurious_check(ctx: Any, levels: list[dict[str, Any]]) -> dict[str, Any]:
    """Actual spurious k-grams per level (released but absent from every user's text) against the
    expectation bound of DPNE Prop. 2.2, E[spurious_k] <= eta min{|S_{k-1}|, |V_k|}.

    Band: the spurious count at level k is Binomial(|V_k| - |supp H_k|, p_k) with
    p_k = eta min{1, |S_{k-1}|/|V_k|}; we use n = |V_k| (an upper bound), and flag a level whose
    count exceeds the binomial (1 - 1e-4) quantile. For the total, the Poisson quantile of the summed
    bound (a binomial's upper tail above its mean + 1 is below the Poisson tail of the same mean,
    Anderson & Samuels 1967). A k-gram held by a user but dropped by contribution bounding can be
    drawn as a "spurious" candidate yet occurs in text: it counts as present here, so this measures
    what an analyst cares about (released n-grams nobody wrote)."""
    from scipy import stats

    from dpngram.release.layout import level_path

    eta = ctx.config.dpne.eta
    root = ctx.release.root
    rows = []
    with ctx.warehouse() as wh:
        for level in levels:
            k = level["k"]
            if k == 1:  # DPSU releases held tokens only, except a public domain's unheld words
                path = root / "released/vocabulary.parquet"
                released_sql = "SELECT token AS ngram FROM read_parquet($path)"
            else:
                path = root / level_path(k)
                released_sql = "SELECT ngram FROM read_parquet($path) WHERE k = $k"
            released, present = wh.con.sql(
                SPURIOUS_SQL.format(schema=ctx.schema, released=released_sql),
                params={"path": str(path), "k": k},
            ).fetchall()[0]
            spurious = int(released) - int(present)
            row: dict[str, Any] = {"k": k, "released": int(released), "spurious": spurious}
            if k >= 2:
                previous, valid = levels[k - 2]["released"], level["valid"] or 0
                p = eta * min(1.0, previous / valid) if valid else 0.0
                bound = eta * min(previous, valid)
                band = int(stats.binom.ppf(1 - FALSE_FAILURE, valid, p)) if valid else 0
                row.update(
                    {"expected_bound": round(bound, 2), "band_upper": band, "within_band": spurious <= band}
                )
            else:
                # With a public domain (docs/dpne.md, "The public domain of the vocabulary"), round r
                # releases each unheld public word with probability p_r = share_r eta min{1, N_<r/|P|}:
                # Binomial(|P|, sum_r p_r) bounds the count.
                public = level.get("public_domain") or {}
                size = int(public.get("words", 0))
                rounds = public.get("rounds", [])
                share = 1.0 / max(1, len(rounds))
                p = sum(eta * share * min(1.0, r["released_before"] / size) for r in rounds) if size else 0.0
                band = int(stats.binom.ppf(1 - FALSE_FAILURE, size, p)) if p > 0 else 0
                row.update(
                    {
                        "expected_bound": round(p * size, 2),
                        "band_upper": band,
                        "within_band": spurious <= band,
                    }
                )
            row["fraction"] = round(spurious / released, 5) if released else 0.0
            rows.append(row)
    total = sum(r["released"] for r in rows)
    spurious_total = sum(r["spurious"] for r in rows)
    bound_total = sum(r["expected_bound"] for r in rows)
    band_total = int(stats.poisson.ppf(1 - FALSE_FAILURE, bound_total)) if bound_total > 0 else 0
    return {
        "per_k": rows,
        "released": total,
        "spurious": spurious_total,
        "fraction": round(spurious_total / total, 5) if total else 0.0,
        "expected_bound": round(bound_total, 2),
        "expected_fraction_bound": round(bound_total / total, 5) if total else 0.0,
        "eta": eta,
        "band_upper": band_total,
        "within_band": spurious_total <= band_total and all(r["within_band"] for r in rows),
        "fraction_le_eta": (spurious_total / total if total else 0.0) <= eta,
    }


def run_one_baseline(
    workdir: Path, source_ctx: Any, method: str, k: int | None, max_n: int, memory_limit: str
) -> dict[str, Any]:
    """One DPSU baseline (§3.1.2) in its own run, on the sentences of ``source_ctx``."""
    import pyarrow.parquet as pq

    name = f"{source_ctx.run_id}-{method}{'' if k is None else f'-k{k}'}"
    ctx = new_context(
        workdir, name, source_ctx.config.input, max_n, memory_limit, source_ctx.config.warehouse
    )
    clone_sentences(ctx, {"warehouse": source_ctx.config.warehouse, "schema": source_ctx.schema})
    started = time.perf_counter()
    dpne_stage.run_baseline(ctx, method, k)
    seconds = round(time.perf_counter() - started, 2)
    ks = pq.read_table(ctx.release.root / f"released/baseline_{method}.parquet", columns=["k"]).column("k")
    per_k = [0] * max_n
    for kk in ks.to_pylist():
        per_k[int(kk) - 1] += 1
    with ctx.warehouse() as wh:  # the cloned sentences are not needed any more
        wh.con.execute(f"DROP SCHEMA IF EXISTS {ctx.schema} CASCADE")
    print(
        f"  baseline {method}{'' if k is None else f' k={k}'}: {sum(per_k)} in {seconds:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return {"method": method, "k": k, "seconds": seconds, "per_k": per_k}


# ----------------------------------------------------------------------------------------------
# Table 4 (per-k counts per method)
# ----------------------------------------------------------------------------------------------
def table4(job: dict[str, Any]) -> dict[str, Any]:
    """Rows DPNE / DPSU-all / DPSU-even / DPSU-single (the k-th column of DPSU-single is the run
    with the whole budget on k), columns k = 1..T and total; None where not run."""
    T = job["max_n"]
    rows: dict[str, list[int | None]] = {"dpne": [lvl["released"] for lvl in job["dpne"]]}
    single: list[int | None] = [None] * T
    for b in job.get("baselines", []):
        if b["method"] == "dpsu-single":
            single[b["k"] - 1] = b["per_k"][b["k"] - 1]
        else:
            rows[b["method"]] = list(b["per_k"])
    if any(v is not None for v in single):
        rows["dpsu-single"] = single
    out = {
        method: {
            "per_k": counts,
            "total": sum(c for c in counts if c is not None) if None not in counts else None,
        }
        for method, counts in rows.items()
    }
    largest = max((lvl["k"] for lvl in job["dpne"] if lvl["released"] > 0), default=0)
    return {"T": T, "largest_k_with_output": largest, "rows": out, "claims": claims(out, T)}


def claims(rows: dict[str, Any], T: int) -> dict[str, Any]:
    """The paper's central claim on these numbers: DPNE total > DPSU-all and DPSU-even totals, and
    DPNE's k-grams > DPSU-single's for every k >= 4 (None where a baseline was not run)."""
    dpne_rows = rows["dpne"]
    out: dict[str, Any] = {}
    for method in ("dpsu-all", "dpsu-even"):
        if method in rows:
            out[f"total_gt_{method}"] = dpne_rows["total"] > rows[method]["total"]
    if "dpsu-single" in rows:
        single = rows["dpsu-single"]["per_k"]
        per_k = {
            k: dpne_rows["per_k"][k - 1] > single[k - 1] for k in range(4, T + 1) if single[k - 1] is not None
        }
        out["gt_dpsu_single_per_k_ge_4"] = per_k
        out["gt_dpsu_single_all_k_ge_4"] = all(per_k.values()) if per_k else None
        out["ties_at_zero"] = [
            k for k in range(4, T + 1) if single[k - 1] == 0 and dpne_rows["per_k"][k - 1] == 0
        ]
    return out


def print_table4(title: str, t4: dict[str, Any]) -> None:
    T = t4["T"]
    print(f"\n{title}")
    head = f"{'method':<13}" + "".join(f"{f'k={k}':>8}" for k in range(1, T + 1)) + f"{'total':>9}"
    print(head)
    print("-" * len(head))
    for method in METHODS:
        if method not in t4["rows"]:
            continue
        row = t4["rows"][method]
        cells = "".join(f"{'-' if c is None else c:>8}" for c in row["per_k"])
        total = "-" if row["total"] is None else row["total"]
        print(f"{method:<13}{cells}{total:>9}")
    print(f"claims: {json.dumps(t4['claims'])}")


def print_spurious(title: str, sp: dict[str, Any]) -> None:
    print(f"\n{title}")
    print(f"{'k':>3}{'released':>10}{'spurious':>10}{'fraction':>10}{'E bound':>9}{'band':>6}")
    for r in sp["per_k"]:
        print(
            f"{r['k']:>3}{r['released']:>10}{r['spurious']:>10}{r['fraction']:>10.4f}"
            f"{r['expected_bound']:>9.1f}{r['band_upper']:>6}"
        )
    print(
        f"all{sp['released']:>10}{sp['spurious']:>10}{sp['fraction']:>10.4f}{sp['expected_bound']:>9.1f}"
        f"{sp['band_upper']:>6}   eta = {sp['eta']}, expected-fraction bound "
        f"{sp['expected_fraction_bound']:.4f}, within band: {sp['within_band']}"
    )


def print_timing(title: str, jobs: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    head = (
        f"{'run':<26}{'users':>9}{'tokens':>12}{'start s':>8}{'ingest s':>9}{'dpne s':>8}"
        f"{'e2e s':>8}{'RSS MB':>8}{'n-grams':>8}"
    )
    print(head)
    print("-" * len(head))
    for j in jobs:
        t = j["timing"]
        print(
            f"{j['name']:<26}{j['corpus']['users']:>9}{j['corpus']['tokens']:>12}{t['startup_seconds']:>8.1f}"
            f"{t['ingest_seconds']:>9.1f}{t['dpne_seconds']:>8.1f}{t['end_to_end_seconds']:>8.1f}"
            f"{j['peak_rss_mb']:>8.0f}{j['released_total']:>8}"
        )


def mean_sd(values: list[float], digits: int = 2) -> dict[str, float]:
    return {
        "mean": round(statistics.fmean(values), digits),
        "sd": round(statistics.stdev(values), digits) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


# ----------------------------------------------------------------------------------------------
# Modes
# ----------------------------------------------------------------------------------------------
def baseline_plan(
    T: int, singles: list[int] | None = None, full: bool = True
) -> list[tuple[str, int | None]]:
    plan: list[tuple[str, int | None]] = [("dpsu-all", None), ("dpsu-even", None)] if full else []
    return plan + [("dpsu-single", k) for k in (singles if singles is not None else range(1, T + 1))]


def mode_sotu(args: argparse.Namespace) -> None:
    if not SOTU.is_file():
        print(
            f"SKIP sotu: {SOTU} not found (the shared corpora live next to the repository, in ../shared/data)"
        )
        return
    workdir = Path(args.workdir) / "sotu"
    record = header(
        "dpne_sotu",
        {
            **PAPER,
            "input": "../shared/data/sotu_users.jsonl.gz",
            "reference_T": SPEED_T,
            "table4_T": TABLE4_T,
            "repeat": args.repeat,
        },
    )
    reps = [
        run_job(workdir, f"sotu-T{SPEED_T}-rep{i}", {"input": str(SOTU), "max_n": SPEED_T})
        for i in range(args.repeat)
    ]
    totals = [r["released_total"] for r in reps]
    ours = {
        "implementation": "dpngram (DuckDB, this machine, 2 cores)",
        "runs": len(reps),
        "released_total": mean_sd(totals),
        "released_per_k_mean": [
            round(statistics.fmean(r["dpne"][k]["released"] for r in reps), 1) for k in range(SPEED_T)
        ],
        "end_to_end_seconds": mean_sd([r["timing"]["end_to_end_seconds"] for r in reps]),
        "dpne_seconds": mean_sd([r["timing"]["dpne_seconds"] for r in reps]),
        "peak_rss_mb_max": max(r["peak_rss_mb"] for r in reps),
        "spurious_fraction": mean_sd([r["spurious"]["fraction"] for r in reps], digits=5),
    }
    ref_mean = statistics.fmean(REFERENCE["released_total_runs"])
    record["reference_comparison"] = {
        "reference": REFERENCE,
        "ours": ours,
        "targets": {
            "more_ngrams_than_reference_mean": ours["released_total"]["mean"] >= ref_mean,
            "more_ngrams_than_reference_best": ours["released_total"]["mean"]
            >= max(REFERENCE["released_total_runs"]),
            "under_tenth_of_tuned_time": ours["end_to_end_seconds"]["max"]
            < REFERENCE["end_to_end_seconds_tuned"] / 10,
            "speedup_vs_tuned": round(
                REFERENCE["end_to_end_seconds_tuned"] / ours["end_to_end_seconds"]["mean"], 1
            ),
            "speedup_vs_untuned": round(
                REFERENCE["end_to_end_seconds"] / ours["end_to_end_seconds"]["mean"], 1
            ),
        },
    }
    record["reference_runs"] = reps
    print_timing(f"SOTU, T = {SPEED_T}: end-to-end runs (fresh process each)", reps)
    print_reference(record["reference_comparison"])
    if not args.no_table4:
        job = run_job(
            workdir,
            f"sotu-T{TABLE4_T}-table4",
            {"input": str(SOTU), "max_n": TABLE4_T, "baselines": baseline_plan(TABLE4_T)},
        )
        record["table4"] = {"corpus": "sotu", "users": job["corpus"]["users"], **table4(job)}
        record["table4_run"] = job
        print_table4(f"Table 4, SOTU ({job['corpus']['users']:,} users), T = {TABLE4_T}", record["table4"])
        print_spurious(f"Spurious k-grams, DPNE on SOTU, T = {TABLE4_T}", job["spurious"])
    write_result("dpne_sotu.json", record)


def print_reference(cmp: dict[str, Any]) -> None:
    ref, ours = cmp["reference"], cmp["ours"]
    print("\nReference comparison, SOTU, eps=4, delta=1e-7, Delta=100, eta=0.01, T=5, both-side")
    head = f"{'implementation':<40}{'n-grams':>20}{'k=1..5':>30}{'end to end':>22}{'peak RSS':>10}"
    print(head)
    print("-" * len(head))
    print(
        f"{'public reference (PySpark, 2 cores)':<40}{'4237 / 4364':>20}"
        f"{'/'.join(map(str, ref['released_per_k_first_run'])):>30}"
        f"{'13.4 min (8.1 tuned)':>22}{'6.3 GB':>10}"
    )
    rt, e2e = ours["released_total"], ours["end_to_end_seconds"]
    label = "dpngram ({} runs)".format(ours["runs"])
    counts = "{:.0f} ± {:.0f}".format(rt["mean"], rt["sd"])
    per_k = "/".join(f"{v:.0f}" for v in ours["released_per_k_mean"])
    seconds = "{:.1f} ± {:.1f} s".format(e2e["mean"], e2e["sd"])
    rss = "{:.2f} GB".format(ours["peak_rss_mb_max"] / 1024)
    print(f"{label:<40}{counts:>20}{per_k:>30}{seconds:>22}{rss:>10}")
    print(f"targets: {json.dumps(cmp['targets'])}")


def parse_baselines(text: str | None) -> list[tuple[str, int | None]]:
    """'dpsu-single:4-9,dpsu-all' -> plan entries."""
    plan: list[tuple[str, int | None]] = []
    for item in filter(None, (text or "").split(",")):
        method, _, ks = item.partition(":")
        if method not in ("dpsu-all", "dpsu-even", "dpsu-single"):
            raise SystemExit(f"--large-baselines: unknown method {method!r}")
        if method == "dpsu-single":
            lo, _, hi = ks.partition("-")
            plan += [(method, k) for k in range(int(lo), int(hi or lo) + 1)]
        else:
            plan.append((method, None))
    return plan


def mode_synthetic(args: argparse.Namespace) -> None:
    from dpngram.text.sample import GENERATOR_VERSION, SampleSpec

    workdir = Path(args.workdir) / "synthetic"
    users_path = corpus(args.users)
    small_path = corpus(args.table4_users)
    record = header(
        "dpne_synthetic",
        {
            **PAPER,
            "generator": {
                "function": "dpngram.text.sample.write_sample",
                "seed": SEED,
                "vocab_size": write_sample_default("vocab_size"),
                "spec": dataclasses.asdict(SampleSpec()),
                "generator_version": GENERATOR_VERSION,
                "public_sentences": PUBLIC_SENTENCES,
                "mean_tokens_per_user": 100,
            },
            "speed_users": args.users,
            "speed_T": SPEED_T,
            "table4_T": TABLE4_T,
            "table4_users_all_baselines": args.table4_users,
            "large_baselines": args.large_baselines,
        },
    )
    record["speed"], record["speed_run"] = speed_run(workdir, args.users, users_path)
    speed = record["speed_run"]

    if not args.no_table4:
        small = run_job(
            workdir,
            f"synth-{args.table4_users}-T{TABLE4_T}-table4",
            {"input": str(small_path), "max_n": TABLE4_T, "baselines": baseline_plan(TABLE4_T)},
        )
        record["table4"] = {
            "corpus": f"generated, {small['corpus']['users']:,} users",
            "users": small["corpus"]["users"],
            **table4(small),
        }
        record["table4_run"] = small
        print_table4(
            f"Table 4, generated {small['corpus']['users']:,} users, T = {TABLE4_T}", record["table4"]
        )
        print_spurious(
            f"Spurious k-grams, DPNE on {small['corpus']['users']:,} users, T = {TABLE4_T}", small["spurious"]
        )
        large = run_job(
            workdir,
            f"synth-{args.users}-T{TABLE4_T}",
            {
                "input": str(users_path),
                "max_n": TABLE4_T,
                "clone_from": {"warehouse": speed["warehouse"], "schema": speed["schema"]},
                "baselines": parse_baselines(args.large_baselines),
            },
        )
        record["table4_large"] = {
            "corpus": f"generated, {large['corpus']['users']:,} users",
            "users": large["corpus"]["users"],
            **table4(large),
            "note": "baselines at this size: only those listed in parameters.large_baselines",
        }
        record["table4_large_run"] = large
        print_table4(
            f"Table 4, generated {large['corpus']['users']:,} users, T = {TABLE4_T}", record["table4_large"]
        )
        print_spurious(
            f"Spurious k-grams, DPNE on {large['corpus']['users']:,} users, T = {TABLE4_T}", large["spurious"]
        )
    write_result("dpne_synthetic_1m.json", record)


def speed_run(workdir: Path, users: int, users_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The speed run at T = 5 (a fresh process): its summary and the job record."""
    speed = run_job(workdir, f"synth-{users}-T{SPEED_T}", {"input": str(users_path), "max_n": SPEED_T})
    t = speed["timing"]
    c = speed["corpus"]
    summary = {
        "users": c["users"],
        "tokens": c["tokens"],
        "tokens_per_user": round(c["tokens"] / c["users"], 1),
        "end_to_end_seconds_ingest_included": t["end_to_end_seconds"],
        "seconds_ingest_excluded": t["dpne_seconds"],
        "ingest_seconds": t["ingest_seconds"],
        "startup_seconds": t["startup_seconds"],
        "users_per_second_ingest_included": round(c["users"] / t["end_to_end_seconds"]),
        "users_per_second_ingest_excluded": round(c["users"] / t["dpne_seconds"]),
        "tokens_per_second_ingest_included": round(c["tokens"] / t["end_to_end_seconds"]),
        "tokens_per_second_ingest_excluded": round(c["tokens"] / t["dpne_seconds"]),
        "level_seconds": t["stage_seconds"],
        "level_share": {s: round(v / t["dpne_seconds"], 3) for s, v in t["stage_seconds"].items()},
        "peak_rss_mb": speed["peak_rss_mb"],
        "targets": {
            "le_10_minutes": t["end_to_end_seconds"] <= 600,
            "rss_le_8_gb": speed["peak_rss_mb"] <= 8 * 1024,
        },
        "released_total": speed["released_total"],
    }
    print_timing(f"Synthetic {users:,} users, T = {SPEED_T} (fresh process)", [speed])
    print("level split (s): " + ", ".join(f"{s} {v:.1f}" for s, v in t["stage_seconds"].items()))
    print_spurious(f"Spurious k-grams, DPNE on {users:,} users, T = {SPEED_T}", speed["spurious"])
    return summary, speed


def mode_speed(args: argparse.Namespace) -> None:
    """Re-measure only the speed run of an existing dpne_synthetic_1m.json (e.g. on a quiet
    machine); Table 4 and the rest of the record are kept."""
    path = RESULTS / "dpne_synthetic_1m.json"
    if not path.is_file():
        raise SystemExit("speed: run the synthetic mode first (needs dpne_synthetic_1m.json)")
    record = json.loads(path.read_text(encoding="utf-8"))
    users = record["parameters"]["speed_users"]
    workdir = Path(args.workdir) / "synthetic"
    record["speed"], record["speed_run"] = speed_run(workdir, users, corpus(users))
    record["speed_remeasured"] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "machine": machine(),
    }
    write_result("dpne_synthetic_1m.json", record)


def mode_large_baselines(args: argparse.Namespace) -> None:
    """Add DPSU baselines on the large corpus to an existing dpne_synthetic_1m.json (its T = 9
    DPNE run's sentences), e.g. ``--large-baselines dpsu-single:4-9``; Table 4 is recomputed."""
    path = RESULTS / "dpne_synthetic_1m.json"
    if not path.is_file() or "table4_large_run" not in json.loads(path.read_text(encoding="utf-8")):
        raise SystemExit("large-baselines: run the synthetic mode first (needs dpne_synthetic_1m.json)")
    plan = parse_baselines(args.large_baselines)
    if not plan:
        raise SystemExit("large-baselines: give --large-baselines, e.g. dpsu-single:4-9")
    record = json.loads(path.read_text(encoding="utf-8"))
    large = record["table4_large_run"]
    job = run_job(
        Path(args.workdir) / "synthetic",
        f"synth-{large['corpus']['users']}-T{large['max_n']}-baselines",
        {
            "input": str(corpus(large["corpus"]["users"])),
            "max_n": large["max_n"],
            "clone_from": {"warehouse": large["warehouse"], "schema": large["schema"]},
            "baselines_only": True,
            "baselines": plan,
        },
    )
    done = {(b["method"], b["k"]) for b in job["baselines"]}
    large["baselines"] = [b for b in large.get("baselines", []) if (b["method"], b["k"]) not in done]
    large["baselines"] += job["baselines"]
    listed = ",".join(filter(None, [record["parameters"].get("large_baselines"), args.large_baselines]))
    record["parameters"]["large_baselines"] = listed
    record["large_baselines_added"] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "peak_rss_mb": job["peak_rss_mb_job"],
    }
    record["table4_large"] = {
        **{k: v for k, v in record["table4_large"].items() if k in ("corpus", "users", "note")},
        **table4(large),
    }
    print_table4(
        f"Table 4, generated {large['corpus']['users']:,} users, T = {large['max_n']}", record["table4_large"]
    )
    write_result("dpne_synthetic_1m.json", record)


def mode_scaling(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir) / "scaling"
    record = header("dpne_scaling", {**PAPER, "T": SPEED_T, "users": args.users, "seed": SEED})
    reuse = None
    synth = RESULTS / "dpne_synthetic_1m.json"
    if synth.is_file() and not args.rerun:
        reuse = json.loads(synth.read_text(encoding="utf-8"))
    points = []
    for n in args.users:
        if reuse and reuse["parameters"]["speed_users"] == n:
            job = reuse["speed_run"]
            source = "dpne_synthetic_1m.json (speed run)"
        else:
            job = run_job(
                workdir,
                f"scale-{n}-T{SPEED_T}",
                {"input": str(corpus(n)), "max_n": SPEED_T, "spurious": False},
            )
            source = "measured here"
        t = job["timing"]
        points.append(
            {
                "users": job["corpus"]["users"],
                "tokens": job["corpus"]["tokens"],
                "ingest_seconds": t["ingest_seconds"],
                "dpne_seconds": t["dpne_seconds"],
                "end_to_end_seconds": t["end_to_end_seconds"],
                "level_seconds": t["stage_seconds"],
                "peak_rss_mb": job["peak_rss_mb"],
                "released_total": job["released_total"],
                "source": source,
            }
        )
    record["points"] = points
    record["fit"] = {
        key: fit_power(points, key) for key in ("dpne_seconds", "end_to_end_seconds", "ingest_seconds")
    }
    print(f"\nScaling, T = {SPEED_T}")
    print(
        f"{'users':>9}{'tokens':>12}{'ingest s':>9}{'dpne s':>8}{'e2e s':>8}{'RSS MB':>8}"
        f"{'n-grams':>9}  source"
    )
    for p in points:
        print(
            f"{p['users']:>9}{p['tokens']:>12}{p['ingest_seconds']:>9.1f}{p['dpne_seconds']:>8.1f}"
            f"{p['end_to_end_seconds']:>8.1f}{p['peak_rss_mb']:>8.0f}{p['released_total']:>9}  {p['source']}"
        )
    for key, fit in record["fit"].items():
        print(f"{key}: time ~ users^{fit['exponent']:.2f}")
    write_result("dpne_scaling.json", record)


def fit_power(points: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Least-squares fit of log(time) = a + b log(users); b is the scaling exponent."""
    xs = [math.log(p["users"]) for p in points]
    ys = [math.log(p[key]) for p in points]
    if len(points) < 2:
        return {"exponent": None}
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return {"exponent": round(b, 3), "seconds_at_1m": round(math.exp(my + b * (math.log(1e6) - mx)), 1)}


def mode_figure(args: argparse.Namespace) -> None:
    """Figure 1 of the paper: released n-grams per length k (log scale), one panel per corpus."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for name in ("dpne_sotu.json", "dpne_synthetic_1m.json"):
        path = RESULTS / name
        if path.is_file():
            rec = json.loads(path.read_text(encoding="utf-8"))
            if "table4" in rec:
                panels.append(rec)
    if not panels:
        print("SKIP figure: no Table 4 results yet (run sotu and/or synthetic first)")
        return
    styles = {
        "dpne": ("DPNE", "o", "-"),
        "dpsu-all": ("DPSU-all", "s", "--"),
        "dpsu-even": ("DPSU-even", "^", "--"),
        "dpsu-single": ("DPSU-single", "D", ":"),
    }
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.4), squeeze=False)
    for ax, rec in zip(axes[0], panels, strict=True):
        t4 = rec["table4"]
        ks = list(range(1, t4["T"] + 1))
        for method in METHODS:
            if method not in t4["rows"]:
                continue
            label, marker, line = styles[method]
            ys = [c if c else float("nan") for c in t4["rows"][method]["per_k"]]
            ax.plot(ks, ys, marker=marker, linestyle=line, label=label)
        large = rec.get("table4_large")
        if large:
            ys = [c if c else float("nan") for c in large["rows"]["dpne"]["per_k"]]
            ax.plot(ks, ys, marker="o", linestyle="-", color="0.45", label=f"DPNE, {large['users']:,} users")
            if "dpsu-single" in large["rows"]:
                ys = [c if c else float("nan") for c in large["rows"]["dpsu-single"]["per_k"]]
                ax.plot(
                    ks,
                    ys,
                    marker="D",
                    linestyle=":",
                    color="0.45",
                    label=f"DPSU-single, {large['users']:,} users",
                )
        title = "SOTU" if rec["benchmark"] == "dpne_sotu" else "Generated corpus"
        ax.set_title(f"{title} ({t4['users']:,} users), T = {t4['T']}")
        ax.set_yscale("log")
        ax.set_xlabel("n-gram length k")
        ax.set_ylabel("released k-grams")
        ax.set_xticks(ks)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Released n-grams per length (ε = 4, δ = 1e-7, Δ0 = 100, η = 0.01)", fontsize=10)
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "dpne_figure1.png"
    fig.savefig(out, dpi=120)
    print(f"figure: {out.relative_to(ROOT)}")


# ----------------------------------------------------------------------------------------------
# More from the same budget: DPSU policy, level schedule, delta split, joint calibration
# ----------------------------------------------------------------------------------------------
#: What a run used before these options existed (the paper's choices), and each change alone.
PREVIOUS_DEFAULT = {"dpsu_policy": "weighted", "sigma_decay": 1.0, "dpne_threshold_delta": 0.5}
BUDGET_CONFIGS: dict[str, dict[str, Any]] = {
    "previous-default": PREVIOUS_DEFAULT,
    "policy-gaussian-only": {**PREVIOUS_DEFAULT, "dpsu_policy": "policy-gaussian", "dpsu_policy_cap": 10.0},
    "schedule-and-split-only": {**PREVIOUS_DEFAULT, "sigma_decay": 1.2, "dpne_threshold_delta": 0.1},
    "default": {},  # the current defaults
}
#: The public-text grid the defaults were chosen on (Brown as pseudo-users), around the choice.
TUNING_GRID: dict[str, dict[str, Any]] = {
    "previous-default": PREVIOUS_DEFAULT,
    "default": {},
    **{f"cap-{a:g}": {"dpsu_policy_cap": a} for a in (2.0, 4.0, 6.0, 14.0)},
    **{f"decay-{c:g}": {"sigma_decay": c} for c in (1.0, 1.1, 1.3, 1.5)},
    **{f"threshold-delta-{t:g}": {"dpne_threshold_delta": t} for t in (0.5, 0.9)},
    "weighted": {"dpsu_policy": "weighted"},
}
BROWN = DATA / "brown_public.txt.gz"
BUDGET_EPSILONS = (1.0, 4.0)
#: The run-level stage splits whose composed epsilon is reported (the demo's and the default's).
DEMO_SPLITS = {
    "issue-demo dpne 0.5 / bayes 0.3 / synth 0.2": {"dpne": 0.5, "bayes": 0.3, "synth": 0.2},
    "make demo: dpne 0.4 / lm_counts 0.3 / bayes 0.15 / synth 0.15": {
        "dpne": 0.4,
        "lm_counts": 0.3,
        "bayes": 0.15,
        "synth": 0.15,
    },
}


def brown_users() -> Path:
    """Brown (the public corpus) as pseudo-users of 5 consecutive sentences, like SOTU's users:
    the public data the defaults were chosen on."""
    path = CACHE / "brown_users_5.jsonl"
    if not path.is_file():
        import gzip

        lines = [ln.strip() for ln in gzip.open(BROWN, "rt", encoding="utf-8") if ln.strip()]
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as out:
            for i in range(0, len(lines), 5):
                out.write(
                    json.dumps({"user_id": f"brown{i // 5}", "text": " ".join(lines[i : i + 5])}) + "\n"
                )
    return path


def budget_runs(
    workdir: Path, label: str, input_path: Path, configs: dict[str, dict[str, Any]], epsilons, repeat: int
) -> dict[str, Any]:
    """DPNE at T = 5 (the paper's other parameters) for every config and epsilon, ``repeat`` runs
    each, on one ingest of ``input_path``."""
    base = run_job(
        workdir, f"{label}-ingest", {"input": str(input_path), "max_n": SPEED_T, "spurious": False}
    )
    source = {"schema": base["schema"], "warehouse": base["warehouse"]}
    out: dict[str, Any] = {"users": base["corpus"]["users"], "tokens": base["corpus"]["tokens"], "runs": {}}
    for eps in epsilons:
        for name, overrides in configs.items():
            reps = [
                run_job(
                    workdir,
                    f"{label}-{name}-eps{eps:g}-rep{i}",
                    {
                        "input": str(input_path),
                        "max_n": SPEED_T,
                        "clone_from": source,
                        "overrides": {**overrides, "epsilon": eps},
                    },
                )
                for i in range(repeat)
            ]
            out["runs"][f"{name} eps={eps:g}"] = {
                "config": name,
                "epsilon": eps,
                "overrides": overrides,
                "released_total": mean_sd([r["released_total"] for r in reps]),
                "released_per_k_mean": [
                    round(statistics.fmean(r["dpne"][k]["released"] for r in reps), 1) for k in range(SPEED_T)
                ],
                "spurious_fraction": mean_sd([r["spurious"]["fraction"] for r in reps], digits=5),
                "dpne_seconds": mean_sd([r["timing"]["dpne_seconds"] for r in reps]),
                "runs": [
                    {
                        "released_total": r["released_total"],
                        "released_per_k": [lv["released"] for lv in r["dpne"]],
                        "spurious_fraction": r["spurious"]["fraction"],
                        "dpne_seconds": r["timing"]["dpne_seconds"],
                        "load_average_1min_before_after": r["load_average_1min_before_after"],
                    }
                    for r in reps
                ],
            }
            row = out["runs"][f"{name} eps={eps:g}"]
            print(
                f"{label:>10} eps={eps:<3g} {name:<26} released {row['released_total']['mean']:>8.1f} "
                f"per k {row['released_per_k_mean']} spurious {row['spurious_fraction']['mean']:.4f} "
                f"dpne {row['dpne_seconds']['mean']:.1f} s",
                flush=True,
            )
    return out


def composed_epsilons() -> dict[str, Any]:
    """The run's composed epsilon before (every stage calibrated to its share alone) and after
    joint calibration, for the demo splits and for every combination of stages at equal shares."""
    import itertools

    from dpngram.config import RunConfig

    def row(fractions: dict[str, float], **extra: Any) -> dict[str, Any]:
        values = {"input": "x", "out": "y", "epsilon": 4.0, "delta": 1e-7, "stage_budget": fractions, **extra}
        joint = RunConfig.build(**values).budget_plan()
        alone = RunConfig.build(**values, budget_calibration="per-stage").budget_plan()
        return {
            "stage_budget": fractions,
            "target_epsilon": joint.target.epsilon,
            "composed_per_stage": alone.composed_epsilon,
            "composed_joint": joint.composed_epsilon,
            "multiplier": joint.multiplier,
            "relative_error": abs(joint.composed_epsilon - joint.target.epsilon) / joint.target.epsilon,
        }

    demo = {name: row(fr) for name, fr in DEMO_SPLITS.items()}
    combos = []
    stages = ("dpne", "lm_counts", "bayes", "synth")
    for n in range(1, len(stages) + 1):
        for subset in itertools.combinations(stages, n):
            combos.append(row({s: 1.0 / n for s in subset}))
            if "dpne" in subset:  # TrieHH vocabulary: its share, and no sigma_1 reserved
                fr = {s: 1.0 / (n + 1) for s in (*subset, "triehh")}
                combos.append(row(fr, vocabulary_method="triehh"))
    worst = max(c["relative_error"] for c in combos)
    return {"demo_splits": demo, "every_combination": combos, "max_relative_error": worst}


def mode_budget(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir) / "budget"
    users = (args.users or [200_000])[0]
    record = header(
        "dpne_budget",
        {
            **PAPER,
            "max_n": SPEED_T,
            "epsilons": list(BUDGET_EPSILONS),
            "repeat": args.repeat,
            "generated_users": users,
            "configs": BUDGET_CONFIGS,
            "tuning_grid": TUNING_GRID,
        },
    )
    record["composed_epsilon"] = composed_epsilons()
    print(json.dumps(record["composed_epsilon"]["demo_splits"], indent=1))
    if BROWN.is_file():  # the public text the defaults were chosen on (epsilon 4 only)
        record["public_tuning_brown"] = budget_runs(
            workdir, "brown", brown_users(), TUNING_GRID, (4.0,), args.repeat
        )
    corpora: dict[str, Path] = {}
    if SOTU.is_file():
        corpora["sotu"] = SOTU
    corpora[f"generated-{users}"] = corpus(users)
    record["corpora"] = {
        label: budget_runs(workdir, label, path, BUDGET_CONFIGS, BUDGET_EPSILONS, args.repeat)
        for label, path in corpora.items()
    }
    ref_mean = statistics.fmean(REFERENCE["released_total_runs"])
    targets: dict[str, Any] = {"reference_mean": ref_mean, "reference_target_1_25x": 1.25 * ref_mean}
    for label, result in record["corpora"].items():
        for eps in BUDGET_EPSILONS:
            new = result["runs"][f"default eps={eps:g}"]
            old = result["runs"][f"previous-default eps={eps:g}"]
            targets[f"{label} eps={eps:g}"] = {
                "default": new["released_total"]["mean"],
                "previous_default": old["released_total"]["mean"],
                "gain_over_previous_default": round(
                    new["released_total"]["mean"] / old["released_total"]["mean"], 3
                ),
                "spurious_fraction_default": new["spurious_fraction"]["mean"],
                "dpne_seconds_ratio": round(new["dpne_seconds"]["mean"] / old["dpne_seconds"]["mean"], 2),
            }
            if label == "sotu" and eps == 4.0:
                targets[f"{label} eps={eps:g}"]["gain_over_reference"] = round(
                    new["released_total"]["mean"] / ref_mean, 3
                )
    record["targets"] = targets
    print(json.dumps(targets, indent=1))
    write_result("dpne_budget.json", record)
    budget_figure(record)


def budget_figure(record: dict[str, Any]) -> None:
    """results/dpne_budget.png: released n-grams per configuration, per corpus and epsilon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(label, eps) for label in record["corpora"] for eps in BUDGET_EPSILONS]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), squeeze=False)
    names = list(BUDGET_CONFIGS)
    for ax, (label, eps) in zip(axes[0], panels, strict=True):
        runs = record["corpora"][label]["runs"]
        means = [runs[f"{n} eps={eps:g}"]["released_total"]["mean"] for n in names]
        sds = [runs[f"{n} eps={eps:g}"]["released_total"]["sd"] for n in names]
        ax.bar(range(len(names)), means, yerr=sds, color=["#999999", "#6baed6", "#74c476", "#08519c"])
        ax.set_xticks(range(len(names)), [n.replace("-", "\n", 1) for n in names], fontsize=7)
        if label == "sotu" and eps == 4.0:
            ref = statistics.fmean(REFERENCE["released_total_runs"])
            ax.axhline(ref, color="black", linestyle="--", linewidth=1, label="reference implementation")
            ax.axhline(1.25 * ref, color="red", linestyle=":", linewidth=1, label="target 1.25x reference")
            ax.legend(fontsize=7, loc="lower right")
        ax.set_title(f"{label}, eps = {eps:g}", fontsize=9)
        ax.set_ylabel("released n-grams, k = 1..5")
    fig.suptitle("DPNE at T = 5 (delta 1e-7, eta 0.01, Delta0 100): what each change adds", fontsize=10)
    fig.tight_layout()
    out = RESULTS / "dpne_budget.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def mode_budget_speed(args: argparse.Namespace) -> None:
    """End-to-end time (fresh process: start-up, ingest, DPNE) of the previous default and the
    current default, alternating, ``--repeat`` runs each, on SOTU and on ``--users`` generated users
    (one run each there): the issue's "no slower than today by more than 20%". Run it on a quiet
    machine; every job records the load average."""
    workdir = Path(args.workdir) / "budget_speed"
    users = (args.users or [200_000])[0]
    record = header(
        "dpne_budget_speed",
        {**PAPER, "max_n": SPEED_T, "repeat": args.repeat, "generated_users": users},
    )
    corpora: list[tuple[str, Path, int]] = []
    if SOTU.is_file():
        corpora.append(("sotu", SOTU, args.repeat))
    corpora.append((f"generated-{users}", corpus(users), 1))
    out: dict[str, Any] = {}
    for label, path, reps in corpora:
        rows: dict[str, list[dict[str, Any]]] = {"previous-default": [], "default": []}
        for i in range(reps):
            for name in rows:
                job = run_job(
                    workdir,
                    f"{label}-{name}-rep{i}",
                    {
                        "input": str(path),
                        "max_n": SPEED_T,
                        "spurious": False,
                        "overrides": BUDGET_CONFIGS[name],
                    },
                )
                rows[name].append(
                    {
                        "end_to_end_seconds": job["timing"]["end_to_end_seconds"],
                        "dpne_seconds": job["timing"]["dpne_seconds"],
                        "stage_seconds": job["timing"]["stage_seconds"],
                        "released_total": job["released_total"],
                        "load_average_1min_before_after": job["load_average_1min_before_after"],
                    }
                )
        summary = {
            name: {
                "end_to_end_seconds": mean_sd([r["end_to_end_seconds"] for r in runs]),
                "dpne_seconds": mean_sd([r["dpne_seconds"] for r in runs]),
                "runs": runs,
            }
            for name, runs in rows.items()
        }
        new, old = summary["default"], summary["previous-default"]
        summary["end_to_end_ratio"] = round(
            new["end_to_end_seconds"]["mean"] / old["end_to_end_seconds"]["mean"], 3
        )
        summary["dpne_ratio"] = round(new["dpne_seconds"]["mean"] / old["dpne_seconds"]["mean"], 3)
        out[label] = summary
        print(
            f"{label}: end to end x{summary['end_to_end_ratio']}, DPNE x{summary['dpne_ratio']}", flush=True
        )
    record["corpora"] = out
    record["target"] = "end to end no slower than the previous default by more than 20%"
    record["met"] = all(v["end_to_end_ratio"] <= 1.2 for v in out.values())
    write_result("dpne_budget_speed.json", record)


# ----------------------------------------------------------------------------------------------
# DP-SIPS (Swanberg, Desfontaines & Haney 2023): the parallel DPSU policy, tuned on public text
# ----------------------------------------------------------------------------------------------
SIPS_EPSILONS = (4.0, 1.0)
#: The public-text grid (Brown as pseudo-users): R rounds and the geometric budget ratio.
SIPS_GRID: dict[str, dict[str, Any]] = {
    "sips-R1": {"dpsu_policy": "dp-sips", "dpsu_sips_rounds": 1},
    **{
        f"sips-R{r}-ratio{q:g}": {"dpsu_policy": "dp-sips", "dpsu_sips_rounds": r, "dpsu_sips_ratio": q}
        for r in (2, 3, 4)
        for q in (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    },
}
#: The policies compared (the rest of the configuration at its defaults: c = 1.2, theta = 0.1).
SIPS_BASELINES: dict[str, dict[str, Any]] = {
    "weighted": {"dpsu_policy": "weighted"},
    "policy-gaussian": {"dpsu_policy": "policy-gaussian", "dpsu_policy_cap": 10.0},
}


def sips_choice(grid: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, float]]:
    """The grid entry with the largest geometric mean over the epsilons of its released total
    relative to the weighted policy's (on Brown: public text only)."""
    scores: dict[str, float] = {}
    for name in SIPS_GRID:
        ratios = [
            grid["runs"][f"{name} eps={eps:g}"]["released_total"]["mean"]
            / grid["runs"][f"weighted eps={eps:g}"]["released_total"]["mean"]
            for eps in SIPS_EPSILONS
        ]
        scores[name] = round(math.exp(statistics.fmean(math.log(r) for r in ratios)), 4)
    best = max(scores, key=lambda n: scores[n])
    return best, SIPS_GRID[best], scores


def sips_round_seconds(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean seconds of each DP-SIPS round (histogram SQL, draw) per release (vocabulary, level k)."""
    rows: dict[str, dict[str, list[float]]] = {}
    for r in reps:
        for t in r.get("sips_timings", []):
            key = f"{t['label']} round {t['round']}"
            rows.setdefault(key, {"histogram_seconds": [], "draw_seconds": []})
            rows[key]["histogram_seconds"].append(t["histogram_seconds"])
            rows[key]["draw_seconds"].append(t["draw_seconds"])
    return {k: {n: round(statistics.fmean(v), 3) for n, v in row.items()} for k, row in rows.items()}


def mode_sips(args: argparse.Namespace) -> None:
    """Tune DP-SIPS (R, ratio) on Brown pseudo-users (public) at eps 4 and 1, then compare the
    chosen setting with the weighted policy and the policy Gaussian on SOTU and ``--users`` (200k)
    generated users, ``--repeat`` runs each: released n-grams, spurious fraction (benchmark-only
    ground truth), DPNE seconds and the per-round SQL seconds. Writes ``results/dpne_sips.json``
    and ``results/dpne_sips.png``."""
    workdir = Path(args.workdir) / "sips"
    users = (args.users or [200_000])[0]
    record = header(
        "dpne_sips",
        {
            **PAPER,
            "max_n": SPEED_T,
            "epsilons": list(SIPS_EPSILONS),
            "repeat": args.repeat,
            "tuning_repeat": args.tuning_repeat,
            "generated_users": users,
            "grid": SIPS_GRID,
            "baselines": SIPS_BASELINES,
            "other_parameters": "defaults: sigma_decay 1.2, dpne_threshold_delta 0.1, variant auto",
        },
    )
    if args.sips_choice:
        name = args.sips_choice
        record["choice"] = {"name": name, "overrides": SIPS_GRID[name], "given_on_command_line": True}
    else:
        grid = budget_runs(
            workdir,
            "brown",
            brown_users(),
            {**SIPS_BASELINES, **SIPS_GRID},
            SIPS_EPSILONS,
            args.tuning_repeat,
        )
        record["public_tuning_brown"] = grid
        name, _, scores = sips_choice(grid)
        record["choice"] = {"name": name, "overrides": SIPS_GRID[name], "scores_vs_weighted": scores}
        write_result("dpne_sips.json", record)
    print(f"chosen on Brown: {name} {SIPS_GRID[name]}", flush=True)
    configs = {**SIPS_BASELINES, "dp-sips": SIPS_GRID[name]}
    corpora: dict[str, Path] = {}
    if SOTU.is_file():
        corpora["sotu"] = SOTU
    corpora[f"generated-{users}"] = corpus(users)
    record["corpora"] = {}
    for label, path in corpora.items():
        record["corpora"][label] = budget_runs(workdir, label, path, configs, SIPS_EPSILONS, args.repeat)
        write_result("dpne_sips.json", record)
    summary: dict[str, Any] = {"reference_sotu_eps4_mean": statistics.fmean(REFERENCE["released_total_runs"])}
    for label, result in record["corpora"].items():
        for eps in SIPS_EPSILONS:
            row = {c: result["runs"][f"{c} eps={eps:g}"]["released_total"]["mean"] for c in configs}
            row["sips_over_policy_gaussian"] = round(row["dp-sips"] / row["policy-gaussian"], 4)
            row["sips_over_weighted"] = round(row["dp-sips"] / row["weighted"], 4)
            row["spurious_fraction"] = {
                c: result["runs"][f"{c} eps={eps:g}"]["spurious_fraction"]["mean"] for c in configs
            }
            row["dpne_seconds"] = {
                c: result["runs"][f"{c} eps={eps:g}"]["dpne_seconds"]["mean"] for c in configs
            }
            summary[f"{label} eps={eps:g}"] = row
    record["summary"] = summary
    print(json.dumps(summary, indent=1))
    write_result("dpne_sips.json", record)
    sips_figure(record)


#: The vocabulary's public domain (docs/dpne.md, "The public domain of the vocabulary"): the default
#: (dpne_public_vocabulary 100,000) against the previous default (0: off), both with the run's
#: public corpus, which only the vocabulary's public domain reads in a dpne-only run.
PUBLIC_VOCAB_CONFIGS: dict[str, dict[str, Any]] = {
    "public-domain-off (previous default)": {"dpne_public_vocabulary": 0},
    "public-domain (default)": {},
}


def mode_public_vocab(args: argparse.Namespace) -> None:
    """The vocabulary's public domain on SOTU (public corpus: Brown) and ``--users`` (200k)
    generated users (their own shifted public corpus), at eps 4 and 1, ``--repeat`` runs each:
    released n-grams per level, spurious fraction (benchmark-only ground truth) and DPNE seconds,
    against the same runs without it. Writes ``results/dpne_public_vocab.json``."""
    workdir = Path(args.workdir) / "public_vocab"
    users = (args.users or [200_000])[0]
    record = header(
        "dpne_public_vocab",
        {
            **PAPER,
            "max_n": SPEED_T,
            "epsilons": list(SIPS_EPSILONS),
            "repeat": args.repeat,
            "generated_users": users,
            "configs": PUBLIC_VOCAB_CONFIGS,
            "other_parameters": "defaults (dp-sips R = 2, ratio 16; sigma_decay 1.2; threshold share 0.1)",
        },
    )
    corpora: dict[str, tuple[Path, Path]] = {}
    if SOTU.is_file() and BROWN.is_file():
        corpora["sotu (public: brown)"] = (SOTU, BROWN)
    generated = corpus(users)
    corpora[f"generated-{users} (public: its own)"] = (generated, generated.parent / "public.txt.gz")
    record["corpora"] = {}
    summary: dict[str, Any] = {"reference_sotu_eps4_mean": statistics.fmean(REFERENCE["released_total_runs"])}
    for label, (path, public) in corpora.items():
        configs = {name: {**o, "public": str(public)} for name, o in PUBLIC_VOCAB_CONFIGS.items()}
        result = budget_runs(workdir, label.split(" ")[0], path, configs, SIPS_EPSILONS, args.repeat)
        record["corpora"][label] = result
        for eps in SIPS_EPSILONS:
            rows = {c: result["runs"][f"{c} eps={eps:g}"] for c in configs}
            off, on = (rows[c] for c in PUBLIC_VOCAB_CONFIGS)
            summary[f"{label} eps={eps:g}"] = {
                "released_total": {c: r["released_total"]["mean"] for c, r in rows.items()},
                "released_per_k": {c: r["released_per_k_mean"] for c, r in rows.items()},
                "gain": round(on["released_total"]["mean"] / off["released_total"]["mean"], 4),
                "spurious_fraction": {c: r["spurious_fraction"]["mean"] for c, r in rows.items()},
                "dpne_seconds": {c: r["dpne_seconds"]["mean"] for c, r in rows.items()},
            }
        write_result("dpne_public_vocab.json", {**record, "summary": summary})
    record["summary"] = summary
    print(json.dumps(summary, indent=1))
    write_result("dpne_public_vocab.json", record)


def mode_sips_speed(args: argparse.Namespace) -> None:
    """DPNE seconds of the three policies at eps 4 on ``--users`` generated users, alternating
    (weighted, policy Gaussian, dp-sips) ``--repeat`` times on one ingest, so that they share the
    machine's load; with dp-sips' per-round seconds. Added to ``results/dpne_sips.json`` as
    ``speed``."""
    workdir = Path(args.workdir) / "sips"
    users = (args.users or [200_000])[0]
    path = corpus(users)
    label = f"generated-{users}"
    base = run_job(workdir, f"{label}-ingest", {"input": str(path), "max_n": SPEED_T, "spurious": False})
    source = {"schema": base["schema"], "warehouse": base["warehouse"]}
    record = json.loads((RESULTS / "dpne_sips.json").read_text(encoding="utf-8"))
    choice = record["choice"]["overrides"]
    configs = {**SIPS_BASELINES, "dp-sips": choice}
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    for i in range(args.repeat):
        for name, overrides in configs.items():
            job = run_job(
                workdir,
                f"speed-{label}-{name}-rep{i}",
                {
                    "input": str(path),
                    "max_n": SPEED_T,
                    "clone_from": source,
                    "spurious": False,
                    "overrides": {**overrides, "epsilon": 4.0},
                },
            )
            rows[name].append(
                {
                    "dpne_seconds": job["timing"]["dpne_seconds"],
                    "stage_seconds": job["timing"]["stage_seconds"],
                    "released_total": job["released_total"],
                    "load_average_1min_before_after": job["load_average_1min_before_after"],
                    "sips_timings": job.get("sips_timings", []),
                }
            )
    speed: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "corpus": label,
        "epsilon": 4.0,
        "note": "alternating runs on one ingest, spurious check off; DPNE seconds only",
    }
    for name, runs in rows.items():
        speed[name] = {"dpne_seconds": mean_sd([r["dpne_seconds"] for r in runs]), "runs": runs}
    speed["dp-sips"]["round_seconds"] = sips_round_seconds(rows["dp-sips"])
    record["speed"] = speed
    print(json.dumps({k: v["dpne_seconds"] for k, v in speed.items() if isinstance(v, dict)}, indent=1))
    print(json.dumps(speed["dp-sips"]["round_seconds"], indent=1))
    write_result("dpne_sips.json", record)


def sips_figure(record: dict[str, Any]) -> None:
    """results/dpne_sips.png: released n-grams per policy, per corpus and epsilon; the Brown grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(label, eps) for label in record["corpora"] for eps in SIPS_EPSILONS]
    grid = record.get("public_tuning_brown")
    n = len(panels) + (1 if grid else 0)
    fig, axes = plt.subplots(1, n, figsize=(3.8 * n, 4), squeeze=False)
    names = ["weighted", "policy-gaussian", "dp-sips"]
    for ax, (label, eps) in zip(axes[0], panels, strict=False):
        runs = record["corpora"][label]["runs"]
        means = [runs[f"{c} eps={eps:g}"]["released_total"]["mean"] for c in names]
        sds = [runs[f"{c} eps={eps:g}"]["released_total"]["sd"] for c in names]
        ax.bar(range(len(names)), means, yerr=sds, color=["#999999", "#6baed6", "#e6550d"])
        ax.set_xticks(range(len(names)), names, fontsize=7)
        if label == "sotu" and eps == 4.0:
            ax.axhline(5450, color="red", linestyle=":", linewidth=1, label="target 5,450")
            ax.axhline(
                statistics.fmean(REFERENCE["released_total_runs"]),
                color="black",
                linestyle="--",
                linewidth=1,
                label="reference implementation",
            )
            ax.legend(fontsize=7, loc="lower right")
        ax.set_title(f"{label}, eps = {eps:g}", fontsize=9)
        ax.set_ylabel("released n-grams, k = 1..5")
    if grid:
        ax = axes[0][-1]
        for eps, marker in zip(SIPS_EPSILONS, ("o", "s"), strict=True):
            base = grid["runs"][f"weighted eps={eps:g}"]["released_total"]["mean"]
            xs = list(SIPS_GRID)
            ys = [grid["runs"][f"{x} eps={eps:g}"]["released_total"]["mean"] / base for x in xs]
            ax.plot(range(len(xs)), ys, marker=marker, label=f"eps = {eps:g}")
            pg = grid["runs"][f"policy-gaussian eps={eps:g}"]["released_total"]["mean"] / base
            ax.axhline(pg, linestyle=":", linewidth=1, color=ax.lines[-1].get_color())
        ax.set_xticks(range(len(xs)), [x.removeprefix("sips-") for x in xs], rotation=60, fontsize=6)
        ax.set_title("Brown (public) tuning: / weighted\n(dotted: policy Gaussian)", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(
        "DP-SIPS vs weighted and policy Gaussian (T = 5, delta 1e-7, eta 0.01, Delta0 100)", fontsize=10
    )
    fig.tight_layout()
    out = RESULTS / "dpne_sips.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "_job":
        job_main(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "mode",
        nargs="?",
        default="all",
        choices=[
            "sotu",
            "synthetic",
            "speed",
            "large-baselines",
            "scaling",
            "figure",
            "budget",
            "budget-speed",
            "sips",
            "sips-speed",
            "public-vocab",
            "all",
        ],
        help="default: all (what `make bench` runs)",
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
    args = parser.parse_args()
    global REUSE_JOBS
    REUSE_JOBS = args.reuse_jobs
    users = args.users
    if args.mode in ("sotu", "all"):
        mode_sotu(args)
    if args.mode in ("synthetic", "all"):
        args.users = (users or [1_000_000])[0]
        mode_synthetic(args)
    if args.mode == "speed":
        mode_speed(args)
    if args.mode == "large-baselines":
        mode_large_baselines(args)
    if args.mode in ("scaling", "all"):
        args.users = users or [100_000, 300_000, 1_000_000]
        mode_scaling(args)
    if args.mode in ("figure", "all"):
        mode_figure(args)
    if args.mode in ("budget", "all"):
        args.users = users
        mode_budget(args)
    if args.mode in ("budget-speed", "all"):
        args.users = users
        mode_budget_speed(args)
    if args.mode == "sips":
        args.users = users
        mode_sips(args)
    if args.mode in ("public-vocab", "all"):
        args.users = users
        mode_public_vocab(args)
    if args.mode == "sips-speed":
        args.users = users
        mode_sips_speed(args)


if __name__ == "__main__":
    main()
