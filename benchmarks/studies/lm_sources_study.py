"""Study (issue 25 item 1, BENCHMARK ONLY): does the language model gain anything from the released
artifacts it does not use yet — the Bayesian trigram distribution θ (stage ``bayes``,
``released/trigram_dist.parquet``) and the Chen et al. noisy variable-length counts (stage
``synth``, ``released/ngram_counts_noisy.parquet``) — over the current model M = λ·Q + (1 − λ)·P′
at the product's default split (dpne .4 / lm_counts .4 / bayes .1 / synth .1)?

    python benchmarks/studies/lm_sources_study.py [--corpora sotu,generated] [--epsilons 1,4]
                                                  [--generated-users 50000] [--work DIR]
                                                  [--out benchmarks/results/lm_sources.json]

Per corpus and ε: ONE default release (``lm_bench.dp_run`` with the product's ``stage_budget``,
T = 5, δ = 1e-7) on the training users (lm_bench's split: sha256(user_id) % 10 == 0 held out), then,
by post-processing of the released files only:

* P  — public Kneser-Ney over V_LM; P′ — P adapted to Q's unigrams with the release's β;
  Q — the noisy-count model of ``lm_counts`` (``dpngram.lm.build.mixture_components``);
* T  — the θ component: P′ whose trigram entries inside θ's space are redistributed by θ,
  T(w|h) = m(h)·θ(h w)/Σ_{w'∈V(h)} θ(h w') for w ∈ V(h), m(h) = Σ_{w∈V(h)} P′(w|h), P′ elsewhere
  (θ gives the shape of a context's continuations inside its space, P′ the mass of that space);
* C  — the Chen component: interpolated absolute discounting (``noisy_count_model``, the same
  estimator as Q, backing off to P) on the Chen counts mapped to order ≤ 3 (``&`` = ``</s>``, a
  leading ``&`` = ``<s>``; n-grams with ``<unk>`` (outside the DP vocabulary, which is not V_LM's
  ``<unk>``) or spanning two sentences are dropped).

Every component's per-event log10 probability on the scored held-out users' text (the
open-vocabulary events of ``dpngram.lm.evaluate``: tokens and ``</s>``, an OOV token also pays the
spelling model, the same for every component since all share V_LM's unigrams) is computed once;
the perplexity of a mixture Σ_k w_k·p_k is then exact at the event level. **The weights are chosen
on the evaluation text itself (an ORACLE, benchmark-only)**: a simplex grid per component set. This
measures the headroom a private selection could at best reach. The best mixture of each set is
also written as ONE ARPA model by nested ``mix_models`` (the form the product would release),
compiled and scored with ``dpngram.lm.evaluate`` (``arpa_*`` keys): the backoff approximation of
``mix_models`` for n-grams listed in no component is thereby measured too.

Rows: P alone, P′ alone, the released M (privately chosen (β, λ), the released model itself), M with
the oracle λ, M + T, M + C, M + T + C (oracle weights), and T, C alone. Only aggregate metrics and
released-row counts are written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# benchmarks/ for the shared helpers (_common, lm_bench, lm/), then benchmarks/studies/ for the
# studies that reuse each other; neither folder is a package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import lm_bench  # noqa: E402  (benchmarks/ is not a package)
from lm_bench import DATA, RESULTS, Corpus, log  # noqa: E402

EPSILONS = (1.0, 4.0)
DELTA = 1e-7  # the product default
MAX_N = 5  # the product default T (the model's order stays lm_order = 3)
GENERATED_USERS = 50_000
GENERATED_SCORE_EVERY = 4  # held-out users with (h // 10) % 4 == 0 are scored (~1,250 users)
SEED = lm_bench.SEED
CHEN_OOV = "<chen-oov>"  # Chen's <unk> (outside the DP vocabulary): counted in the total, never listed
GRID_STEP = {2: 0.05, 3: 0.05, 4: 0.05}  # simplex grid step by number of components


# ----------------------------------------------------------------------------------------------
# Components (post-processing of released files)
# ----------------------------------------------------------------------------------------------
def theta_component(base: Any, theta: Any) -> tuple[Any, dict[str, Any]]:
    """T: ``base`` (P′) with the continuations of each θ context redistributed by θ (module doc)."""
    import polars as pl

    from dpngram.lm.mixture import backoff_weights, model_probabilities
    from dpngram.lm.ngram_tables import UNK, model_from_probabilities, ngram_suffix

    order = base.order
    vocab = base.tables[1]["ngram"]
    th = theta.filter(
        pl.col("w1").is_in(vocab.implode())
        & pl.col("w2").is_in(vocab.implode())
        & pl.col("w3").is_in(vocab.implode())
        & (pl.col("w1") != UNK)
        & (pl.col("w2") != UNK)
        & (pl.col("w3") != UNK)
    ).select(
        ngram=pl.concat_str(["w1", "w2", "w3"], separator=" "),
        ctx=pl.concat_str(["w1", "w2"], separator=" "),
        theta=pl.col("prob").cast(pl.Float64),
    )
    tri = pl.concat([base.tables[3].select("ngram"), th.select("ngram")]).unique()
    bi = pl.concat(
        [
            base.tables[2].select("ngram"),
            th.select(ngram=pl.col("ctx")),
            th.select(ngram=ngram_suffix()),
        ]
    ).unique()
    probs = model_probabilities(base, {1: base.tables[1].select("ngram"), 2: bi, 3: tri})
    p3 = probs[3].join(th, on="ngram", how="left")
    mass = (
        p3.filter(pl.col("theta").is_not_null())
        .group_by("ctx")
        .agg(m=pl.col("prob").sum(), z=pl.col("theta").sum())
    )
    p3 = p3.join(mass, on="ctx", how="left").select(
        "ngram",
        prob=pl.when(pl.col("theta").is_not_null())
        .then(pl.col("m") * pl.col("theta") / pl.col("z"))
        .otherwise(pl.col("prob")),
    )
    probs[3] = p3
    model = model_from_probabilities(probs, backoff_weights(probs, order), order)
    info = {
        "theta_rows": theta.height,
        "theta_rows_used": th.height,
        "theta_contexts_used": mass.height,
        "theta_mass_used": round(float(th["theta"].sum()), 4),
    }
    return model, info


def chen_rows(path: Path) -> Any:
    """The Chen counts as (n, ngram, noisy_count) rows of order ≤ 3 in the LM's conventions."""
    import polars as pl

    from dpngram.lm.ngram_tables import BOS, EOS, UNK

    src = pl.read_parquet(path, columns=["ngram", "noisy_count"])
    out: dict[tuple[int, str], float] = {}
    for gram, c in zip(src["ngram"].to_list(), src["noisy_count"].to_list(), strict=True):
        items = gram.split(" ")
        c = float(c)
        if items == ["&"]:
            for tok in (EOS, BOS):
                out[(1, tok)] = out.get((1, tok), 0.0) + c
            continue
        if len(items) == 1:
            tok = CHEN_OOV if items[0] == UNK else items[0]
            out[(1, tok)] = out.get((1, tok), 0.0) + c
            continue
        if UNK in items or "&" in items[1:-1]:
            continue
        lead, trail = items[0] == "&", items[-1] == "&"
        middle = items[int(lead) : len(items) - int(trail)]
        if not middle:
            continue
        toks = ([BOS] if lead else []) + middle + ([EOS] if trail else [])
        if len(toks) > 3:
            continue
        key = (len(toks), " ".join(toks))
        out[key] = out.get(key, 0.0) + c
    return pl.DataFrame(
        {
            "n": [k[0] for k in out],
            "ngram": [k[1] for k in out],
            "noisy_count": list(out.values()),
        },
        schema={"n": pl.Int64, "ngram": pl.String, "noisy_count": pl.Float64},
    )


def chen_component(public: Any, path: Path, discount: float) -> tuple[Any, dict[str, Any]]:
    from dpngram.lm.open_model import noisy_count_model

    rows = chen_rows(path)
    model = noisy_count_model(rows, public, public.order, threshold=1e-9, discount=discount)
    by_order = {str(n): int((rows["n"] == n).sum()) for n in (1, 2, 3)}
    listed = {str(n): model.tables[n].height for n in (2, 3)}
    return model, {"rows_by_order": by_order, "discount": discount, "listed_by_order": listed}


def without_dpne_keys(
    inputs: Any, config: Any, part: dict[str, Any], public: Any
) -> tuple[Any, dict[str, Any]]:
    """Q⁻: Q without the released n-grams that only the DPNE keys put into the count domain (not
    among the ``lm_count_domain`` most frequent public n-grams of their order), i.e. Q as a domain
    without DPNE keys would have given it (each coordinate's noise is independent)."""
    import polars as pl

    from dpngram.lm.build import LM_COUNTS
    from dpngram.lm.open_model import noisy_count_model, open_public_model
    from dpngram.release.identity import public_cache_dir

    order = int(part["order"])
    _, counts, _ = open_public_model(
        inputs.vocabulary(),
        config.public,
        order=order,
        public_cap=config.lm.public_vocab_size,
        lowercase=config.lowercase,
        cache_dir=public_cache_dir(config),
    )
    rows = pl.read_parquet(inputs.root / LM_COUNTS)
    keep = [rows.filter(pl.col("n") == 1)]
    dropped = {}
    for n in range(2, order + 1):
        top = counts[n].sort(["count", "ngram"], descending=[True, False]).head(config.lm.count_domain)
        mine = rows.filter(pl.col("n") == n)
        kept = mine.join(top.select("ngram"), on="ngram", how="semi")
        dropped[str(n)] = mine.height - kept.height
        keep.append(kept)
    model = noisy_count_model(
        pl.concat(keep),
        public,
        order,
        threshold=float(part["threshold"]),
        discount=float(part["discount"]),
    )
    return model, {"released_rows_only_from_dpne_keys": dropped}


# ----------------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------------
def event_logprobs(model_path: Path, sentences: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """(log10 p per event, spelling log10 per event (0 for in-vocabulary)) — the events of
    ``dpngram.lm.evaluate.score_sentences`` (every token and ``</s>``)."""
    from dpngram.lm.evaluate import load_model, spelling_log10prob

    model = load_model(model_path)
    lps: list[float] = []
    spell: list[float] = []
    for s in sentences:
        scores = list(model.full_scores(" ".join(s), bos=True, eos=True))
        for i, (lp, _n, oov) in enumerate(scores):
            lps.append(lp)
            spell.append(spelling_log10prob(s[i]) if oov else 0.0)
    return np.asarray(lps), np.asarray(spell)


def perplexity(logs: np.ndarray, weights: np.ndarray, spell: np.ndarray) -> float:
    """Open-vocabulary perplexity of the event-level mixture Σ_k w_k p_k."""
    p = weights @ np.power(10.0, logs)
    return float(10 ** (-(np.log10(np.maximum(p, 1e-300)) + spell).mean()))


def simplex(k: int, step: float) -> list[tuple[float, ...]]:
    m = round(1 / step)
    return [
        tuple(c / m for c in combo) + ((m - sum(combo)) / m,)
        for combo in itertools.product(range(m + 1), repeat=k - 1)
        if sum(combo) <= m
    ]


def best_mixture(names: list[str], logs: dict[str, np.ndarray], spell: np.ndarray) -> dict[str, Any]:
    if len(names) == 1:
        return {
            "weights": {names[0]: 1.0},
            "perplexity": perplexity(logs[names[0]][None, :], np.ones(1), spell),
        }
    probs = np.power(10.0, np.stack([logs[n] for n in names]))
    best: tuple[float, tuple[float, ...]] = (math.inf, ())
    for w in simplex(len(names), GRID_STEP[len(names)]):
        mix = np.asarray(w) @ probs
        ppl = float(10 ** (-(np.log10(np.maximum(mix, 1e-300)) + spell).mean()))
        if ppl < best[0]:
            best = (ppl, w)
    return {"weights": dict(zip(names, best[1], strict=True)), "perplexity": best[0]}


def nested_mixture(models: dict[str, Any], weights: dict[str, float]) -> Any:
    """Σ_k w_k·model_k as one ARPA model: mix_models applied component by component."""
    from dpngram.lm.mixture import mix_models

    names = [n for n in weights if weights[n] > 0]
    acc, total = models[names[0]], weights[names[0]]
    for n in names[1:]:
        total += weights[n]
        acc = mix_models(acc, models[n], weights[n] / total)
    return acc


# ----------------------------------------------------------------------------------------------
# One release
# ----------------------------------------------------------------------------------------------
def study_run(corpus: Corpus, eps: float, prep: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import polars as pl

    from dpngram.config import DEFAULT_STAGE_BUDGET
    from dpngram.lm.arpa_file import write_arpa
    from dpngram.lm.build import ReleasedInputs, adapted_public, compile_binary, mixture_components
    from dpngram.release.layout import NGRAM_COUNTS_NOISY

    work = prep["work"] / f"run-eps{eps:g}"
    budget = dict(DEFAULT_STAGE_BUDGET)
    started = time.perf_counter()
    warehouse = prep["work"] / f"wh-eps{eps:g}.duckdb"
    published = sorted(work.glob("out/*/runs/*/report.json"))
    if args.reuse and published:  # a release of an earlier pass (development of this study)
        run = published_run(published[-1].parent)
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        run = lm_bench.dp_run(
            corpus, eps, prep["train"], work, args, stage_budget=budget, max_n=MAX_N, warehouse=warehouse
        )
    release_seconds = round(time.perf_counter() - started, 1)
    root = run["root"]
    config = lm_bench.bench_config(
        corpus, eps, prep["train"], work, args, stage_budget=budget, max_n=MAX_N, warehouse=warehouse
    )
    inputs = ReleasedInputs(root)
    part = run["lm_counts"]
    beta, lam = float(part.get("unigram_adaptation", 0.0)), float(part["mix_weight"])
    log(f"  released: β={beta:g} λ={lam:g}; building components")
    t0 = time.perf_counter()
    vocabulary, public, private = mixture_components(inputs, config, part)
    adapted = adapted_public(public, private, beta)
    theta = inputs.theta()
    models: dict[str, Any] = {"P": public, "P'": adapted, "Q": private}
    info: dict[str, Any] = {}
    models["Q-"], info["Q-"] = without_dpne_keys(inputs, config, part, public)
    if theta is not None and theta.height:
        models["T"], info["T"] = theta_component(adapted, theta)
    chen_path = root / NGRAM_COUNTS_NOISY
    if chen_path.is_file():
        # the absolute discount of C: one level-1 Laplace scale ℓ_max·n_max/ε_synth (public)
        eps_synth = float(config.stage_share("synth").epsilon)
        d = float(config.synth.l_max) * float(config.synth.n_max) / eps_synth
        models["C"], info["C"] = chen_component(public, chen_path, d)
        info["C"]["chen_rows_released"] = pl.read_parquet(chen_path).height
    build_seconds = round(time.perf_counter() - t0, 1)
    sentences = lm_bench.eval_sentences(prep["eval"])
    logs: dict[str, np.ndarray] = {}
    spell = None
    for name, model in models.items():
        path = work / f"{name.replace(chr(39), 'a')}.arpa"
        write_arpa(model, path)
        logs[name], sp = event_logprobs(path, sentences)
        if spell is None:
            spell = sp
        elif not np.array_equal(spell, sp):
            raise RuntimeError(f"component {name}: OOV events differ (vocabularies differ)")
        path.unlink()
    assert spell is not None
    rows: dict[str, Any] = {}
    released_metrics = lm_bench.evaluate(root / "model" / "model.binary", prep["eval"])
    rows["M released (private (β, λ))"] = {
        "weights": {"P'": 1 - lam, "Q": lam},
        "perplexity": released_metrics["open_vocab_perplexity"],
        "event_level_perplexity": perplexity(
            np.stack([logs["P'"], logs["Q"]]), np.array([1 - lam, lam]), spell
        ),
        "top3_accuracy": released_metrics["top3_accuracy"],
    }
    sets = {
        "P alone (public-only)": ["P"],
        "P' alone": ["P'"],
        "M oracle λ": ["P'", "Q"],
        "M oracle λ, Q without DPNE-only n-grams": ["P'", "Q-"],
        "M + T (θ)": ["P'", "Q", "T"],
        "M + C (Chen)": ["P'", "Q", "C"],
        "M + T + C": ["P'", "Q", "T", "C"],
        "T alone": ["T"],
        "C alone": ["C"],
        "P' + T": ["P'", "T"],
        "P' + C": ["P'", "C"],
    }
    for row, names in sets.items():
        if all(n in logs for n in names):
            rows[row] = best_mixture(names, logs, spell)
            log(f"  {row}: {rows[row]['perplexity']:.2f} {rows[row]['weights']}")
    # the best mixtures as ONE ARPA (the form the product would release), scored by dpngram.lm.evaluate
    if not args.no_arpa:
        for row in ("M oracle λ", "M + T (θ)", "M + C (Chen)", "M + T + C"):
            if row not in rows:
                continue
            model = nested_mixture(models, rows[row]["weights"])
            arpa = work / "mix.arpa"
            write_arpa(model, arpa)
            compile_binary(arpa, work / "mix.binary")
            m = lm_bench.evaluate(work / "mix.binary", prep["eval"])
            rows[row]["arpa_perplexity"] = m["open_vocab_perplexity"]
            rows[row]["arpa_top3_accuracy"] = m["top3_accuracy"]
            log(f"  {row} as one ARPA: {m['open_vocab_perplexity']:.2f}")
            for p in (arpa, work / "mix.binary"):
                p.unlink(missing_ok=True)
    base = rows["M oracle λ"]["perplexity"]
    for r in rows.values():  # event level against event level (the released row: its event-level value)
        r["vs_M_oracle_pct"] = round(100 * (r.get("event_level_perplexity", r["perplexity"]) / base - 1), 2)
    if "arpa_perplexity" in rows["M oracle λ"]:
        arpa_base = rows["M oracle λ"]["arpa_perplexity"]
        for r in rows.values():
            if "arpa_perplexity" in r:
                r["arpa_vs_M_oracle_pct"] = round(100 * (r["arpa_perplexity"] / arpa_base - 1), 2)
    out = {
        "corpus": corpus.name,
        "epsilon": eps,
        "stage_budget": budget,
        "budget_plan": run["budget_plan"],
        "released": {
            "beta": beta,
            "lambda": lam,
            "lm_counts_sigma": part.get("sigma"),
            "lm_counts_released_by_order": part.get("released_by_order"),
            "dp_vocabulary": len(inputs.vocabulary()),
            "model_vocabulary": len(vocabulary),
            "bayes_part": _scalars(run["parts"].get("bayes") or {}),
            "synth_part": _scalars(run["parts"].get("synth") or {}),
        },
        "components": info,
        "events": int(spell.size),
        "rows": rows,
        "release_seconds": release_seconds,
        "component_build_seconds": build_seconds,
    }
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
        for p in prep["work"].glob(f"wh-eps{eps:g}.duckdb*"):
            if p.is_file():
                p.unlink()
    return out


def published_run(root: Path) -> dict[str, Any]:
    """The parts of :func:`lm_bench.dp_run`'s result this study reads, from a published run."""
    parts = {p.stem: json.loads(p.read_text()) for p in (root / "report.parts").glob("*.json")}
    report = json.loads((root / "report.json").read_text())
    return {
        "root": root,
        "lm_counts": parts["lm_counts"],
        "parts": parts,
        "budget_plan": report["privacy"]["calibration"],
    }


def _scalars(part: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in part.items()
        if (isinstance(v, (int, float, str)) or k.endswith("per_level"))
        and "second" not in k
        and k not in ("guarantee", "paper")
    }


def generated(n_users: int, folder: Path) -> Corpus:
    from dpngram.text.sample import write_sample

    users, public = folder / "users.jsonl.gz", folder / "public.txt.gz"
    if not (users.is_file() and public.is_file()):
        write_sample(folder, n_users=n_users, seed=SEED, public_sentences=lm_bench.PUBLIC_SENTENCES)
    return Corpus(
        "generated",
        users,
        public,
        GENERATED_SCORE_EVERY,
        {"n_users": n_users, "seed": SEED, "public_sentences": lm_bench.PUBLIC_SENTENCES},
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--corpora", default="sotu,generated")
    ap.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    ap.add_argument("--generated-users", type=int, default=GENERATED_USERS)
    ap.add_argument("--work", default=str(lm_bench.CACHE / "lm_sources"))
    ap.add_argument("--out", default=str(RESULTS / "lm_sources.json"))
    ap.add_argument("--memory-limit", default="4GB")
    ap.add_argument("--keep", action="store_true", help="keep the work directories (for --reuse)")
    ap.add_argument("--reuse", action="store_true", help="reuse the releases kept by an earlier --keep pass")
    ap.add_argument("--no-arpa", action="store_true", help="skip writing the best mixtures as one ARPA")
    args = ap.parse_args()
    args.delta = DELTA
    out_path = Path(args.out)
    out: dict[str, Any] = {
        "study": "lm_sources (issue 25 item 1): headroom of θ and Chen components, ORACLE weights",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": lm_bench.git_commit(),
        "machine": lm_bench.machine(),
        "parameters": {"delta": DELTA, "max_n": MAX_N, "grid_step": GRID_STEP, "order": 3},
        "runs": [],
    }
    if out_path.is_file():
        out["runs"] = json.loads(out_path.read_text()).get("runs", [])
    work = Path(args.work)
    for name in args.corpora.split(","):
        if name == "sotu":
            corpus = Corpus(
                "sotu", DATA / "sotu_users.jsonl.gz", DATA / "brown_public.txt.gz", 1, {"users": 12_807}
            )
        else:
            corpus = generated(args.generated_users, work / f"gen_u{args.generated_users}")
        cwork = work / corpus.name
        if not args.reuse:
            shutil.rmtree(cwork, ignore_errors=True)
        cwork.mkdir(parents=True, exist_ok=True)
        prep = {**lm_bench.split_users(corpus, cwork), "work": cwork}
        sizes = {k: v for k, v in prep.items() if isinstance(v, int)}
        for eps in [float(e) for e in args.epsilons.split(",")]:
            log(f"{corpus.name} ε={eps:g}")
            rec = {**study_run(corpus, eps, prep, args), "sizes": sizes, "corpus_info": corpus.info}
            out["runs"] = [r for r in out["runs"] if (r["corpus"], r["epsilon"]) != (corpus.name, eps)]
            out["runs"].append(rec)
            out_path.parent.mkdir(parents=True, exist_ok=True)
            out_path.write_text(json.dumps(out, indent=1, default=str) + "\n")
        if not args.keep:
            shutil.rmtree(cwork, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("POLARS_MAX_THREADS", "2")
    main()
