"""Scenario ``public-vocab``: the vocabulary's public domain (docs/dpne.md, "The public domain of
the vocabulary") against the previous default without it, on SOTU (public corpus: Brown) and a
generated corpus (its own shifted public corpus). Writes ``results/dpne_public_vocab.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from dpne.budget import BROWN, budget_runs
from dpne.common import PAPER, REFERENCE, SOTU, SPEED_T, corpus, header, write_result
from dpne.sips import SIPS_EPSILONS

#: The default (dpne_public_vocabulary 100,000) against the previous default (0: off), both with
#: the run's public corpus, which only the vocabulary's public domain reads in a dpne-only run.
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
    summary: dict[str, Any] = {"reference_sotu_eps4_mean": statistics.fmean(REFERENCE["released_total_runs"])}
    compare_configs(
        workdir, corpora, PUBLIC_VOCAB_CONFIGS, args.repeat, record, summary, "dpne_public_vocab.json", "gain"
    )


def compare_configs(
    workdir: Path,
    corpora: dict[str, tuple[Path, Path]],
    configs: dict[str, dict[str, Any]],
    repeat: int,
    record: dict[str, Any],
    summary: dict[str, Any],
    out_name: str,
    ratio_key: str,
) -> None:
    """Two or more settings (``configs``: the first is the reference, the others are judged) on every
    corpus (path, its public corpus) at eps 4 and 1, ``repeat`` runs each (:func:`budget_runs`):
    the runs go to ``record["corpora"]``, the per-corpus means and the second's ratio to the first
    (under ``ratio_key``; every judged setting's under ``RATIO_KEY_by_config`` when there are more)
    to ``summary``; ``results/OUT_NAME`` is rewritten after each corpus."""
    record["corpora"] = {}
    for label, (path, public) in corpora.items():
        with_public = {name: {**o, "public": str(public)} for name, o in configs.items()}
        result = budget_runs(workdir, label.split(" ")[0], path, with_public, SIPS_EPSILONS, repeat)
        record["corpora"][label] = result
        for eps in SIPS_EPSILONS:
            rows = {c: result["runs"][f"{c} eps={eps:g}"] for c in with_public}
            reference, *judged = configs
            ratios = {
                c: round(rows[c]["released_total"]["mean"] / rows[reference]["released_total"]["mean"], 4)
                for c in judged
            }
            summary[f"{label} eps={eps:g}"] = {
                "released_total": {c: r["released_total"]["mean"] for c, r in rows.items()},
                "released_per_k": {c: r["released_per_k_mean"] for c, r in rows.items()},
                ratio_key: ratios[judged[0]],
                **({f"{ratio_key}_by_config": ratios} if len(judged) > 1 else {}),
                "spurious_fraction": {c: r["spurious_fraction"]["mean"] for c, r in rows.items()},
                "dpne_seconds": {c: r["dpne_seconds"]["mean"] for c, r in rows.items()},
            }
        write_result(out_name, {**record, "summary": summary})
    record["summary"] = summary
    print(json.dumps(summary, indent=1))
    write_result(out_name, record)
