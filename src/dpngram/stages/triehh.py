"""Step ``triehh``: out-of-vocabulary word discovery with local DP (LDP TrieHH).

:func:`privacy_plan` turns the triehh share of (ε, δ) into the per-report budget ε0 and the
user-level central guarantee after shuffling (public numbers, refused before any data is read when
they do not fit). :func:`run_triehh` simulates the federated protocol on the ingested corpus
(:func:`dpngram.mechanisms.triehh.run_trie`, leaving the known vocabulary out when one is given)
and releases the discovered words to ``released/oov_words.parquet`` through
:func:`dpngram.release.spend.spend_once`; the ``dpne.k1`` step can take them into S_1. The
protocol and its privacy argument are in :mod:`dpngram.mechanisms.triehh` and ``docs/triehh.md``.

Owns: the ``triehh`` step (its privacy plan, parameters, released file and report part).
Imports: dpngram.mechanisms.triehh, dpngram.release, dpngram.engines, dpngram.text, dpngram.config,
    dpngram.core;
pyarrow.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dpngram.config import RunConfig
from dpngram.config.stages import TRIEHH
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.mechanisms.triehh import (
    TrieParameters,
    WarehouseSource,
    drop_work_tables,
    plan_events,
    prepare_user_words,
    run_trie,
    shuffle_privacy_plan,
)
from dpngram.release.context import RunContext, StageResult, released_summary
from dpngram.release.layout import OOV_WORDS
from dpngram.release.spend import spend_once
from dpngram.text.public import load_known_vocabulary

#: The stage's one name (declared in :mod:`dpngram.config.stages`).
STAGE = TRIEHH.name


def trie_parameters(config: RunConfig, epsilon0: float) -> TrieParameters:
    return TrieParameters(
        epsilon0=epsilon0,
        users_per_layer=config.triehh.users_per_layer,
        max_depth=config.triehh.max_depth,
        max_words=config.triehh.max_words,
        max_prefixes=config.triehh.max_prefixes,
        passes=config.triehh.passes,
        sampling=config.triehh.sampling,
        alphabet=config.triehh.alphabet,
        end_symbol=config.triehh.end_symbol,
        spurious_rate=config.triehh.spurious_rate,
    )


def privacy_plan(config: RunConfig) -> dict[str, float]:
    """eps0 and the guarantees it gives, from the triehh share of (epsilon, delta) (public):
    :func:`dpngram.mechanisms.triehh.shuffle_privacy_plan` with the run's parameters."""
    epsilon, delta = config.stage_share(STAGE)
    return shuffle_privacy_plan(
        epsilon,
        delta,
        users_per_layer=config.triehh.users_per_layer,
        max_words=config.triehh.max_words,
        epsilon0=config.triehh.epsilon0,
    )


GUARANTEE = (
    "user-level ({eps:.4g}, {delta:.3g})-differential privacy (central, after shuffling/secure "
    "aggregation of each layer's reports; FMT21 numerical bound for {n} users per layer of "
    "{ueps:.4g}-LDP messages, max over layers since every user reports in one layer only); each "
    "single report is {eps0:.4g}-LDP (item level), each user's message {ueps:.4g}-LDP (user level)"
)


def run_triehh(ctx: RunContext, *, noise: NoiseSource | None = None) -> dict[str, Any]:
    """Stage ``triehh``: discover words with LDP TrieHH and release ``released/oov_words.parquet``
    (column ``word``), spending the triehh share of (eps, delta) as one (eps, delta) event via
    :func:`dpngram.release.spend.spend_once` (output persisted before the spend; a retry reuses it).
    Returns a summary safe for XCom. ``noise`` is for seeded tests only."""
    config = ctx.config
    plan = privacy_plan(config)  # refuses an impossible eps0 before any data is read
    params = trie_parameters(config, plan["epsilon0"])

    def compute(wh: Engine) -> StageResult:
        source_noise = noise or NoiseSource.secure()
        known = load_known_vocabulary(config.dpne.known_vocabulary, config.lowercase)
        prepare_user_words(wh, ctx.schema, known, params)
        source = WarehouseSource(wh, ctx.schema, params.end_symbol)
        try:
            result = run_trie(source, source.n_users(), params, source_noise)
        finally:
            drop_work_tables(wh, ctx.schema)
        with ctx.release.writing(OOV_WORDS) as tmp:
            pq.write_table(pa.table({"word": pa.array(result.words, pa.string())}), tmp)
        report = {
            "method": "ldp-triehh",
            "paper": "Sun et al. 2024 (Gboard OOV discovery), Alg. 1-2; FMT21 amplification",
            "mode": "oov" if config.dpne.known_vocabulary else "all-words",
            "unit_of_privacy": "user",
            **plan,
            "users_per_layer": params.users_per_layer,
            "max_words_per_user": params.max_words,
            "max_depth": params.max_depth,
            "max_prefixes_per_layer": params.max_prefixes,
            "passes": params.passes,
            "sampling": params.sampling,
            "alphabet": params.alphabet,
            "end_symbol": params.end_symbol,
            "spurious_rate": params.spurious_rate,
            "words_discovered": len(result.words),
            "layers": [vars(layer) for layer in result.layers],
            "guarantee": GUARANTEE.format(
                eps=plan["central_epsilon"],
                delta=plan["central_delta"],
                n=params.users_per_layer,
                ueps=plan["user_ldp_epsilon"],
                eps0=plan["epsilon0"],
            ),
            "noise_mode": source_noise.mode,
        }
        return StageResult(events=plan_events(plan, STAGE), report=report)

    spent = spend_once(ctx, STAGE, [OOV_WORDS], compute, engine=True)
    return released_summary(ctx, STAGE, spent, [OOV_WORDS], method="ldp-triehh")
