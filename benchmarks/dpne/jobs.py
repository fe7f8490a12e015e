"""One measured run per process (``run_job`` spawns ``dpne_bench.py _job``), and the
benchmark-only ground truth of a run (spurious fraction, baselines, corpus sizes: exact statistics
on public or synthetic corpora only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dpne.common import (
    FALSE_FAILURE,
    PAPER,
    peak_rss_mb,
)
from dpngram.orchestration.plan import STEP_BY_NAME, release_steps
from dpngram.stages import dpne as dpne_stage

#: The benchmark's one entry point: each job runs in a fresh interpreter through it.
ENTRY_POINT = Path(__file__).resolve().parent.parent / "dpne_bench.py"


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
    proc = subprocess.run([sys.executable, str(ENTRY_POINT), "_job", str(spec_path), str(spec_started)])
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
            "warehouse": str(ctx.config.run_warehouse),  # the run's own DuckDB file
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
        warehouse=warehouse or str(workdir / name / "wh"),
        memory_limit=memory_limit,
        max_n=max_n,
        **{**PAPER, **(overrides or {})},
    )
    return RunContext(prepare(config))


#: What a run reads of its ingest: the sentences (tokens and their ids) and the token dictionary the
#: ids index (docs/engines.md, "Integer token ids from ingest").
CLONED_TABLES = ("sentences", "token_ids")


def clone_sentences(ctx: Any, source: dict[str, str]) -> None:
    """Copy the ingested sentences of an earlier job (its run's DuckDB file and schema) into this
    run's schema, with the token dictionary (:data:`CLONED_TABLES`), so several runs share one
    ingest (benchmark plumbing; private tables to private tables)."""
    from dpngram.engines.sql import safe_identifier

    schema = safe_identifier(source["schema"])
    with ctx.warehouse() as wh:
        same = Path(source["warehouse"]).resolve() == ctx.config.run_warehouse.resolve()
        prefix = schema
        if not same:
            location = str(Path(source["warehouse"]).resolve()).replace("'", "''")
            wh.con.execute(f"ATTACH '{location}' AS bench_source (READ_ONLY)")
            prefix = f"bench_source.{schema}"
        for table in CLONED_TABLES:
            wh.con.execute(f"CREATE OR REPLACE TABLE {ctx.schema}.{table} AS SELECT * FROM {prefix}.{table}")
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


def run_dpne_steps(ctx: Any, progress: Any) -> None:
    """The plan's DPNE steps in this process, as a release runs them: the vocabulary, the levels
    2..T that apply, then the k-gram merge; ``progress(step_name)`` after each."""
    steps = [s for s in release_steps(ctx.config) if s.name.startswith("dpne.k") and s.name != "dpne.kgrams"]
    for step in [*steps, STEP_BY_NAME["dpne.kgrams"]]:
        step.run(ctx)
        progress(step.name)


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

    run_dpne_steps(ctx, progress)
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
    clone_sentences(ctx, {"warehouse": str(source_ctx.config.run_warehouse), "schema": source_ctx.schema})
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
