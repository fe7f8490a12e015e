"""Step ``dpne.k1``: the vocabulary S_1, the first level of DPNE.

With ``vocabulary_method`` 'dpsu' (default), S_1 is released by DPSU
(:func:`dpngram.mechanisms.dpsu.release_vocabulary`) from the dpne share of the budget; with
'triehh', S_1 is the words released by the ``triehh`` step plus the public known vocabulary (no
spend here); with 'both', the union. The vocabulary is installed as the DPNE level-1 tables
(:func:`dpngram.mechanisms.dpne_domain.install_vocabulary`) and written to ``released/vocabulary.parquet``
through :func:`dpngram.release.spend.spend_once`.

Owns: the ``dpne.k1`` step (choosing and releasing S_1).
Imports: dpngram.mechanisms (dpsu, dpne, triehh), dpngram.release, dpngram.engines, dpngram.text,
dpngram.config, dpngram.core; pyarrow.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from dpngram.config import RunConfig
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql
from dpngram.mechanisms import triehh
from dpngram.mechanisms.dpsu import (
    VOCABULARY_STAGE,
    VOCABULARY_TABLE,
    DpsuParameters,
    PublicDomain,
    release_vocabulary,
    vocabulary_parameters,
    write_keys_parquet,
)
from dpngram.release.context import RunContext, StageResult, released_summary
from dpngram.release.layout import OOV_WORDS, VOCABULARY
from dpngram.release.spend import spend_once
from dpngram.text.public import load_known_vocabulary, public_top_words

#: The run-schema table of the vocabulary's public domain (public words; dropped after the release).
PUBLIC_WORDS_TABLE = "dpne_public_words"

#: Released words that passed the public threshold only (``kgram_seed`` false); run schema.
PUBLIC_ONLY_TABLE = "dpne_s1_public_only"

#: The words that seed the k-gram levels (S_1 minus :data:`PUBLIC_ONLY_TABLE`); run schema.
SEEDS_TABLE = "dpne_s1_seeds"

#: Columns of ``released/vocabulary.parquet``.
VOCABULARY_COLUMNS = {"token": pa.string(), "kgram_seed": pa.bool_()}


def dpsu_parameters(config: RunConfig) -> DpsuParameters:
    """The vocabulary's DPSU parameters for this run: its share of the dpne budget and T, c, Δ0."""
    dpne = config.dpne
    return vocabulary_parameters(
        config.stage_share("dpne"),
        dpne.max_n,
        dpne.sigma_decay,
        dpne.max_contribution,
        threshold_delta=dpne.threshold_delta,
        policy=dpne.policy,
        policy_cap=dpne.policy_cap,
        sips_rounds=dpne.sips_rounds,
        sips_ratio=dpne.sips_plan(1)[0],
        sips_admission=dpne.sips_plan(1)[1],
        new_words=config.new_words_per_user(),
        new_words_share=dpne.new_words_share,
        new_words_funding=dpne.new_words_funding,
    )


def uses_public_domain(config: RunConfig) -> bool:
    """Whether the vocabulary has a public domain (:meth:`RunConfig.vocabulary_public_domain`)."""
    return config.vocabulary_public_domain()


def install_public_domain(wh: Engine, ctx: RunContext, log: list[dict[str, Any]]) -> PublicDomain:
    """The public corpus's ``dpne_public_vocabulary`` most frequent words as the table
    :data:`PUBLIC_WORDS_TABLE` in the run schema (public data only)."""
    config = ctx.config
    assert config.public is not None
    words = public_top_words(config.public, config.dpne.public_vocabulary, config.lowercase)
    view = "dpne_public_words_batch"
    with wh.registered(**{view: pa.table({"item": pa.array(words, pa.string())})}):
        wh.execute(load_sql("dpsu/public_words", schema=ctx.schema, target=PUBLIC_WORDS_TABLE, words=view))
    return PublicDomain(
        table=PUBLIC_WORDS_TABLE, size=len(words), eta=config.dpne.eta, log=log, public_only=[]
    )


def install_seeds(wh: Engine, schema: str, public_only: list[pa.Array]) -> None:
    """The level-1 tables from the seeds: S_1 (``VOCABULARY_TABLE``) minus the words released by
    the public threshold only (also stored, as :data:`PUBLIC_ONLY_TABLE`, for the export)."""
    from dpngram.mechanisms.dpne_domain import install_vocabulary  # level tables derived from S_1

    words = pa.concat_arrays(public_only) if public_only else pa.array([], pa.string())
    with wh.registered(dpne_public_only_batch=pa.table({"item": words.cast(pa.string())})):
        wh.execute(
            load_sql(
                "dpne/vocabulary_seeds",
                schema=schema,
                vocabulary=VOCABULARY_TABLE,
                public_only="dpne_public_only_batch",
                public_only_table=PUBLIC_ONLY_TABLE,
                seeds=SEEDS_TABLE,
            )
        )
    install_vocabulary(wh, schema, SEEDS_TABLE)


def _vocabulary_report(
    params: DpsuParameters,
    method: str,
    released: int | None,
    public: PublicDomain | None,
    public_log: list[dict[str, Any]],
    new_words: int | None = None,
) -> dict[str, Any]:
    """The ``dpne.k1`` report part: the public DPSU parameters (none for a TrieHH-only S_1), the
    DP-SIPS rounds and the public domain's rounds."""
    dpsu = method != "triehh"
    report = {
        "k": 1,
        "released": released,
        "sigma": params.sigma if dpsu else None,
        "rho": params.threshold if dpsu else None,
        "max_contribution": params.max_contribution,
        "variant": method,
        "policy": params.policy if dpsu else None,
        "policy_cap": params.cap if dpsu else None,
        "threshold_delta": params.threshold_delta if dpsu else 0.0,
    }
    if dpsu and params.rounds:
        report["sips_rounds"] = [
            {"sigma": r.sigma, "rho": r.threshold, "threshold_delta": r.threshold_delta}
            for r in params.rounds
        ]
    if dpsu and params.new_words is not None:
        report["new_words"] = params.new_words.report(new_words)
    if public is not None:
        report["public_domain"] = {
            "words": public.size,
            "eta": public.eta,
            "rounds": public_log,
            "released_public_only": sum(len(a) for a in public.public_only or []),
        }
    return report


def run_vocabulary(ctx: RunContext, *, noise: NoiseSource | None = None) -> dict[str, Any]:
    """Stage ``dpne.k1``: release the vocabulary S_1 (DPSU) to ``released/vocabulary.parquet``.

    Spends sigma_1 (Gaussian) + (0, delta_dpne/2) (threshold) of the dpne budget, via
    :func:`dpngram.release.spend.spend_once` (noisy output persisted before the spend is
    committed; a retry reuses it). Returns a summary safe for XCom: released row count, epsilon, output path.
    ``noise`` is for seeded tests only (default: a fresh CSPRNG source)."""
    params = dpsu_parameters(ctx.config)

    def compute(wh: Engine) -> StageResult:
        method = ctx.config.dpne.vocabulary_method  # dpsu | triehh | both
        public_log: list[dict[str, Any]] = []
        release_log: dict[str, Any] = {}
        public = install_public_domain(wh, ctx, public_log) if uses_public_domain(ctx.config) else None
        if method != "triehh":
            try:
                released = release_vocabulary(
                    wh, ctx.schema, params, noise or NoiseSource.secure(), public, release_log
                )
            finally:
                if public is not None:
                    wh.drop(ctx.schema, public.table)
        if method != "dpsu":  # S_1 also takes the TrieHH words (released by stage triehh) + known words
            words = triehh.discovered_words(ctx.release.path(OOV_WORDS)).column("word").to_pylist()
            words += load_known_vocabulary(ctx.config.dpne.known_vocabulary, ctx.config.lowercase)
            triehh.merge_into_vocabulary(wh, ctx.schema, VOCABULARY_TABLE, words, replace=method == "triehh")
            released = None
        install_seeds(wh, ctx.schema, (public.public_only or []) if public is not None else [])
        table = wh.fetch_arrow(
            load_sql(
                "dpne/vocabulary_export",
                schema=ctx.schema,
                vocabulary=VOCABULARY_TABLE,
                public_only=PUBLIC_ONLY_TABLE,
            )
        )
        wh.drop(ctx.schema, PUBLIC_ONLY_TABLE, SEEDS_TABLE)
        with ctx.release.writing(VOCABULARY) as tmp:
            write_keys_parquet(table, tmp, VOCABULARY_COLUMNS)
        report = _vocabulary_report(
            params, method, released, public, public_log, release_log.get("new_words")
        )
        events = params.events(VOCABULARY_STAGE)
        if method == "triehh":  # no DPSU spend: a zero event keeps the stage's marker format
            events = triehh.merged_vocabulary_events(VOCABULARY_STAGE)
        return StageResult(events=events, report=report)

    result = spend_once(ctx, VOCABULARY_STAGE, [VOCABULARY], compute, engine=True)
    return released_summary(ctx, VOCABULARY_STAGE, result, [VOCABULARY])
