"""Study (benchmark-only): what the LM weight selection's noise costs the model, at the stage's
epsilon with scale 2B/eps (before 2026-11-25), at the selection epsilon of docs/lm_privacy.md
section 4 with 2B/eps, and with the one-sided scale B/eps the product now uses.

    python benchmarks/lm_selection_sim.py [--work DIR] [--out benchmarks/results/lm_selection_sim.json]

Needs the SOTU releases kept by ``benchmarks/lm_sources_study.py --corpora sotu --keep --work DIR``.
SOTU's held-out users (one document each) stand in for the selection users: for every (β, λ)
candidate of the stage, each user's clipped mean log-probability is summed (the stage's score) and
the open-vocabulary perplexity of the candidate on the same users is computed; report-noisy-max is
then simulated 20,000 times per setting (continuous Laplace noise from ``simulation_rng``: this is a
simulation, nothing is released) and the expected perplexity of the chosen candidate reported,
relative to the best candidate."""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lm_bench  # noqa: E402  (benchmarks/ is not a package)
from lm_sources_study import published_run  # noqa: E402

from dpngram.config import DEFAULT_STAGE_BUDGET  # noqa: E402
from dpngram.core.noise import simulation_rng  # noqa: E402
from dpngram.lm.arpa import write_arpa  # noqa: E402
from dpngram.lm.build import ReleasedInputs, adapted_public, mixture_components  # noqa: E402
from dpngram.lm.evaluate import load_model, spelling_log10prob  # noqa: E402
from dpngram.mechanisms.lm_counts import ADAPTATION_GRID, SCORE_CLIP_NATS, WEIGHT_GRID  # noqa: E402
from dpngram.stages.lm_counts import selection_epsilon  # noqa: E402
from dpngram.text.tokenizer import tokenize_texts  # noqa: E402

B = SCORE_CLIP_NATS
ap = argparse.ArgumentParser(description="LM weight selection: cost of its noise (simulation)")
ap.add_argument("--work", default=str(lm_bench.CACHE / "lm_sources"))
ap.add_argument("--out", default=str(lm_bench.RESULTS / "lm_selection_sim.json"))
cli = ap.parse_args()
out = {"study": "lm_selection_sim: expected perplexity of the selected (beta, lambda), simulated", "runs": {}}
work = Path(cli.work) / "sotu"
tmp = work / "sim"
tmp.mkdir(exist_ok=True)
corpus = lm_bench.Corpus(
    "sotu", lm_bench.DATA / "sotu_users.jsonl.gz", lm_bench.DATA / "brown_public.txt.gz", 1, {}
)
lines = [line.rstrip("\n") for line in open(work / "eval.txt", encoding="utf-8")]
docs = tokenize_texts(lines)
rng = simulation_rng(12345)  # a simulation: nothing is released
for eps in (1.0, 4.0):
    root = sorted((work / f"run-eps{eps:g}").glob("out/*/runs/*/report.json"))[-1].parent
    run = published_run(root)
    args = argparse.Namespace(delta=1e-7, memory_limit="4GB")
    cfg = lm_bench.bench_config(
        corpus,
        eps,
        work / "train.jsonl.gz",
        work / f"run-eps{eps:g}",
        args,
        stage_budget=dict(DEFAULT_STAGE_BUDGET),
        max_n=5,
        warehouse=work / f"wh-eps{eps:g}.duckdb",
    )
    inputs = ReleasedInputs(root)
    part = run["lm_counts"]
    _, public, private = mixture_components(inputs, cfg, part)
    write_arpa(private, tmp / "q.arpa")
    q = load_model(tmp / "q.arpa")
    users = []  # per user: per beta arrays (p10, q10, spell)
    pubs = {}
    for beta in ADAPTATION_GRID:
        write_arpa(adapted_public(public, private, beta), tmp / f"p{beta}.arpa")
        pubs[beta] = load_model(tmp / f"p{beta}.arpa")

    def lp(model, sents):
        a, sp = [], []
        for s in sents:
            for i, (x, _n, oov) in enumerate(model.full_scores(" ".join(s), bos=True, eos=True)):
                a.append(x)
                sp.append(spelling_log10prob(s[i]) if oov else 0.0)
        return np.array(a), np.array(sp)

    cand = [(b, lam) for b in ADAPTATION_GRID for lam in WEIGHT_GRID]
    scores = np.zeros(len(cand))
    logsum = np.zeros(len(cand))
    events = 0
    for sents in docs:
        sents = [s for s in sents if s]
        if not sents:
            continue
        qq, spell = lp(q, sents)
        pb = {b: lp(pubs[b], sents)[0] for b in ADAPTATION_GRID}
        for j, (b, lam) in enumerate(cand):
            m = lam * 10**qq + (1 - lam) * 10 ** pb[b]
            ln = np.log(np.maximum(m, 1e-300))
            scores[j] += np.clip(ln.mean(), -B, 0)
            logsum[j] += (np.log10(np.maximum(m, 1e-300)) + spell).sum()
        events += qq.size
    ppl = 10 ** (-logsum / events)
    eps_stage = cfg.stage_share("lm_counts").epsilon
    eps_sel = selection_epsilon(cfg)
    res = {"candidates": cand, "perplexity": ppl.tolist(), "best": float(ppl.min()), "users": len(docs)}
    for name, e, scale in (
        ("stage_epsilon_2B", eps_stage, 2 * B / eps_stage),
        ("selection_epsilon_2B", eps_sel, 2 * B / eps_sel),
        ("selection_epsilon_B_monotone", eps_sel, B / eps_sel),
    ):
        picks = np.argmax(scores[None, :] + rng.laplace(0, scale, (20000, len(cand))), axis=1)
        chosen = ppl[picks]
        res[name] = {
            "epsilon": e,
            "laplace_scale": scale,
            "mean_perplexity": float(chosen.mean()),
            "p90_perplexity": float(np.quantile(chosen, 0.9)),
            "mean_excess_pct": float(100 * (chosen.mean() / ppl.min() - 1)),
        }
    out["runs"][str(eps)] = res
    print(eps, {k: v for k, v in res.items() if k not in ("candidates", "perplexity")}, flush=True)
Path(cli.out).write_text(json.dumps(out, indent=1) + "\n")
