"""Study (BENCHMARK ONLY): what the noise of the LM's (β, λ) selection costs the model, with the
centred scores the product uses and with the scores it used before.

    python benchmarks/studies/lm_selection_sim.py [--corpora sotu,generated] [--epsilons 1,4] [--runs 2]
                                                  [--generated-users 200000] [--work DIR]
                                                  [--out benchmarks/results/lm_selection_sim.json]

Per corpus, ε and run: one release at the product's default split (``lm_bench.dp_run``, T = 5,
fresh noise) on lm_bench's training users. lm_bench's scored held-out users (grouped by user) stand
in for the selection users: for each of the stage's 30 (β, λ) candidates, every user's mean natural
log-probability per event under λ·Q + (1 − λ)·P_β is computed (``BackoffScorer``, the stage's
scorer), and so is each candidate's open-vocabulary perplexity on the same users. Report-noisy-max
is then simulated 20,000 times per scoring (continuous Laplace noise from ``simulation_rng``: a
simulation, nothing is released) at the run's ε_sel (``stages.lm_counts.selection_epsilon``), and
the expected perplexity of the chosen candidate is reported relative to the best candidate:

* ``clipped_B20`` (until 2026-11-28): each user's mean log-probability clipped to [−20, 0], Laplace
  scale 20/ε_sel;
* ``centred_C{c}``: each user's deviation from their own mean over the candidates, clipped to
  [−c, c] (``mechanisms.lm_selection.centred_contributions`` at C = c), scale 2c/ε_sel; the product's
  C is ``SCORE_DEVIATION_CLIP_NATS``; ``clipped_users_pct``: users for whom the clip binds.

The generated corpus's scored users are about 1% of its users while the product selects on 10%, so
its figures overstate the noise's cost there. Only aggregate metrics are written.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

# benchmarks/ for the shared helpers (_common, lm_bench, lm/), then benchmarks/studies/ for the
# studies that reuse each other; neither folder is a package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lm.common import (  # noqa: E402
    HOLDOUT_MOD,
    Corpus,
    finish_study,
    log,
    study_arguments,
    study_corpora,
    study_header,
    user_hash,
)
from lm.dp_run import study_releases  # noqa: E402

from dpngram.config import DEFAULT_STAGE_BUDGET  # noqa: E402
from dpngram.core.noise import simulation_rng  # noqa: E402
from dpngram.mechanisms.lm_selection import (  # noqa: E402
    ADAPTATION_GRID,
    SCORE_DEVIATION_CLIP_NATS,
    WEIGHT_GRID,
)

#: The score's clip before 2026-11-28: each user's mean log-probability in [−B, 0], scale B/ε_sel.
OLD_CLIP_NATS = 20.0
DEVIATION_CLIPS = (0.5, SCORE_DEVIATION_CLIP_NATS, 2.0)
DRAWS = 20_000


def parse_args() -> argparse.Namespace:
    return study_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), "lm_selection_sim")


def scored_users(corpus: Corpus) -> list[list[str]]:
    """The texts of lm_bench's scored held-out users, one list per user (lm.common.split_users's rule)."""
    texts: dict[str, list[str]] = defaultdict(list)
    with gzip.open(corpus.private, "rt", encoding="utf-8") as src:
        for line in src:
            row = json.loads(line)
            uid = str(row["user_id"])
            h = user_hash(uid)
            if h % HOLDOUT_MOD == 0 and (h // HOLDOUT_MOD) % corpus.score_every == 0:
                texts[uid].append(row["text"])
    return [texts[u] for u in sorted(texts)]


class UserEvents:
    """The scored users' events as one token series with sentence offsets and user bounds."""

    def __init__(self, users: list[list[str]]) -> None:
        import polars as pl

        from dpngram.text.tokenizer import tokenize_texts

        doc_owner = [u for u, docs in enumerate(users) for _ in docs]
        sentences, owner = [], []
        for u, doc in zip(doc_owner, tokenize_texts([d for docs in users for d in docs]), strict=True):
            for sentence in doc:
                if sentence:
                    sentences.append(sentence)
                    owner.append(u)
        lengths = np.array([len(s) for s in sentences], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.tokens = pl.Series([t for s in sentences for t in s], dtype=pl.String)
        per_user_events = np.bincount(np.repeat(np.array(owner), lengths + 1), minlength=len(users))
        kept = per_user_events > 0
        self.bounds = np.concatenate([[0], np.cumsum(per_user_events[kept])]).astype(np.int64)
        self.users = int(kept.sum())


def candidate_table(release_root: Path, config: Any, events: UserEvents) -> tuple[np.ndarray, np.ndarray]:
    """(per candidate and user: mean ln p per event; per candidate: open-vocabulary perplexity)."""
    import polars as pl

    from dpngram.lm.backoff_scorer import BackoffScorer
    from dpngram.lm.build import ReleasedInputs, adapted_public, mixture_components
    from dpngram.lm.evaluate import spelling_log10prob

    part = json.loads((release_root / "report.parts" / "lm_counts.json").read_text())
    part = part.get("report", part)
    _, public, private = mixture_components(ReleasedInputs(release_root), config, part)

    def score(model: Any) -> tuple[np.ndarray, np.ndarray]:
        scorer = BackoffScorer.from_model(model)
        rows = scorer.word_rows(events.tokens)
        return scorer.score(rows, events.offsets), rows == scorer.unk

    q, oov = score(private)
    spelled = sum(spelling_log10prob(w) for w in events.tokens.filter(pl.Series(oov)).to_list())
    means, perplexity = [], []
    for beta in ADAPTATION_GRID:
        p = np.power(10.0, score(adapted_public(public, private, beta))[0])
        for lam in WEIGHT_GRID:
            mix = np.maximum(lam * np.power(10.0, q) + (1.0 - lam) * p, 1e-300)
            means.append(np.add.reduceat(np.log(mix), events.bounds[:-1]) / np.diff(events.bounds))
            perplexity.append(10 ** (-(np.log10(mix).sum() + spelled) / mix.size))
    return np.array(means), np.array(perplexity)


def simulate(means: np.ndarray, perplexity: np.ndarray, epsilon: float, rng: Any) -> dict[str, Any]:
    def chosen(scores: np.ndarray, scale: float) -> dict[str, Any]:
        picks = np.argmax(scores[None, :] + rng.laplace(0.0, scale, (DRAWS, scores.size)), axis=1)
        ppl = perplexity[picks]
        return {
            "laplace_scale": round(scale, 3),
            "mean_excess_pct": round(float(100 * (ppl.mean() / perplexity.min() - 1)), 3),
            "p90_perplexity": round(float(np.quantile(ppl, 0.9)), 2),
        }

    out = {"clipped_B20": chosen(np.clip(means, -OLD_CLIP_NATS, 0.0).sum(axis=1), OLD_CLIP_NATS / epsilon)}
    deviation = means - means.mean(axis=0, keepdims=True)
    for c in DEVIATION_CLIPS:
        row = chosen(np.clip(deviation, -c, c).sum(axis=1), 2 * c / epsilon)
        row["clipped_users_pct"] = round(float(100 * (np.abs(deviation) > c).any(axis=0).mean()), 2)
        out[f"centred_C{c:g}"] = row
    return out


def main() -> None:
    from dpngram.stages.lm_counts import selection_epsilon

    args = parse_args()
    epsilons = [float(e) for e in args.epsilons.split(",")]
    started = time.perf_counter()
    rng = simulation_rng(20261128)  # a simulation: nothing is released
    out: dict[str, Any] = study_header(
        "lm_selection_sim",
        args,
        stage_budget=dict(DEFAULT_STAGE_BUDGET),
        draws=DRAWS,
        product_deviation_clip_nats=SCORE_DEVIATION_CLIP_NATS,
    )
    for name, corpus, work, split in study_corpora(args):
        events = UserEvents(scored_users(corpus))
        rows = []
        options = {"stage_budget": dict(DEFAULT_STAGE_BUDGET), "max_n": 5}
        releases = study_releases(corpus, epsilons, args.runs, split["train"], work, args, **options)
        for eps, run, release, config in releases:
            means, perplexity = candidate_table(release["root"], config, events)
            eps_sel = selection_epsilon(config)
            row = {
                "epsilon": eps,
                "run": run,
                "selection_epsilon": round(eps_sel, 4),
                "users": events.users,
                "best_perplexity": round(float(perplexity.min()), 2),
                **simulate(means, perplexity, eps_sel, rng),
            }
            log(f"{name} ε={eps:g} run {run}: {json.dumps(row)}")
            rows.append(row)
        summary = {}
        for eps in epsilons:
            mine = [r for r in rows if r["epsilon"] == eps]
            summary[f"{eps:g}"] = {
                k: round(float(np.mean([r[k]["mean_excess_pct"] for r in mine])), 3)
                for k in mine[0]
                if isinstance(mine[0][k], dict)
            }
        out["results"][name] = {"runs": rows, "mean_excess_pct_by_epsilon": summary}
    finish_study(out, args, started, "mean_excess_pct_by_epsilon")


if __name__ == "__main__":
    main()
