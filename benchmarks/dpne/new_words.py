"""Scenario ``new-words``: the vocabulary's new-words round (docs/dpne.md, "New words";
``dpsu_new_words``) against the same runs without it, on SOTU and the LM benchmark's two real
corpora (public corpus: Brown) and a generated corpus (its own shifted public corpus): what the
round costs or gives the DPNE release itself. Writes ``results/dpne_new_words.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dpne.budget import BROWN, budget_runs
from dpne.common import PAPER, SOTU, SPEED_T, corpus, header, write_result
from dpne.sips import SIPS_EPSILONS

#: Off (the default when the round was added) against m = 10 words per user with the default
#: share 0.25 of the vocabulary's budget; the run's public corpus in both.
NEW_WORDS_CONFIGS: dict[str, dict[str, Any]] = {
    "new-words-off": {"dpsu_new_words": 0},
    "new-words-10": {"dpsu_new_words": 10},
}


def _corpora(users: int) -> dict[str, tuple[Path, Path]]:
    from lm.real_corpora import REAL_CORPORA, real_corpus

    corpora: dict[str, tuple[Path, Path]] = {}
    if SOTU.is_file() and BROWN.is_file():
        corpora["sotu (public: brown)"] = (SOTU, BROWN)
    if BROWN.is_file():
        for name in REAL_CORPORA:
            corpora[f"{name} (public: brown)"] = (real_corpus(name, BROWN).private, BROWN)
    generated = corpus(users)
    corpora[f"generated-{users} (public: its own)"] = (generated, generated.parent / "public.txt.gz")
    return corpora


def mode_new_words(args: argparse.Namespace) -> None:
    """The new-words round at eps 4 and 1, ``--repeat`` runs each, on SOTU, the real corpora and
    ``--users`` (200k) generated users: released n-grams per level (k = 1 is the vocabulary),
    spurious fraction (benchmark-only ground truth) and DPNE seconds, with and without the round.
    Writes ``results/dpne_new_words.json``."""
    workdir = Path(args.workdir) / "new_words"
    users = (args.users or [200_000])[0]
    record = header(
        "dpne_new_words",
        {
            **PAPER,
            "max_n": SPEED_T,
            "epsilons": list(SIPS_EPSILONS),
            "repeat": args.repeat,
            "generated_users": users,
            "configs": NEW_WORDS_CONFIGS,
            "other_parameters": "defaults (dp-sips with admission; public domain 100,000 words)",
        },
    )
    record["corpora"] = {}
    summary: dict[str, Any] = {}
    for label, (path, public) in _corpora(users).items():
        configs = {name: {**o, "public": str(public)} for name, o in NEW_WORDS_CONFIGS.items()}
        result = budget_runs(workdir, label.split(" ")[0], path, configs, SIPS_EPSILONS, args.repeat)
        record["corpora"][label] = result
        for eps in SIPS_EPSILONS:
            rows = {c: result["runs"][f"{c} eps={eps:g}"] for c in configs}
            off, on = (rows[c] for c in NEW_WORDS_CONFIGS)
            summary[f"{label} eps={eps:g}"] = {
                "released_total": {c: r["released_total"]["mean"] for c, r in rows.items()},
                "released_per_k": {c: r["released_per_k_mean"] for c, r in rows.items()},
                "ratio": round(on["released_total"]["mean"] / off["released_total"]["mean"], 4),
                "spurious_fraction": {c: r["spurious_fraction"]["mean"] for c, r in rows.items()},
                "dpne_seconds": {c: r["dpne_seconds"]["mean"] for c, r in rows.items()},
            }
        write_result("dpne_new_words.json", {**record, "summary": summary})
    record["summary"] = summary
    print(json.dumps(summary, indent=1))
    write_result("dpne_new_words.json", record)
