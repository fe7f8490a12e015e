"""Scenario ``new-words``: the vocabulary's new-words round (docs/dpne.md, "New words";
``dpsu_new_words``) against the same runs without it, on SOTU and the LM benchmark's two real
corpora (public corpus: Brown) and a generated corpus (its own shifted public corpus): what the
round costs or gives the DPNE release itself. Writes ``results/dpne_new_words.json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dpne.budget import BROWN
from dpne.common import PAPER, SOTU, SPEED_T, corpus, header
from dpne.public_vocab import compare_configs
from dpne.sips import SIPS_EPSILONS

#: Off (the default when the round was added) against m = 10 words per user with the default
#: share 0.25, paid by the vocabulary's other rounds or by every DPNE level
#: (``dpsu_new_words_funding``); the run's public corpus in all three.
NEW_WORDS_CONFIGS: dict[str, dict[str, Any]] = {
    "new-words-off": {"dpsu_new_words": 0},
    "new-words-10": {"dpsu_new_words": 10},
    "new-words-10-dpne": {"dpsu_new_words": 10, "dpsu_new_words_funding": "dpne"},
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
    compare_configs(
        workdir, _corpora(users), NEW_WORDS_CONFIGS, args.repeat, record, {}, "dpne_new_words.json", "ratio"
    )
