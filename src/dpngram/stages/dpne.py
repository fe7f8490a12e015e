"""Steps ``dpne.k2`` .. ``dpne.k12`` and ``dpne.kgrams``: the DPNE k-gram levels, their merge, and
the DPSU baselines.

:func:`run_level` (step ``dpne.k{k}``) releases S_k with :func:`dpngram.mechanisms.dpne.release_level`
and writes ``released/kgrams/k={k}.parquet``, charging one Gaussian event σ_k through
:func:`dpngram.release.spend.spend_once`. Each level can run as its own Airflow task, in a fresh
process or warehouse: the private level tables of the levels below are rebuilt from the released
files when they are missing or stale. :func:`finalize_kgrams` (step ``dpne.kgrams``) merges the
levels into ``released/kgrams.parquet`` and records the composed DPNE spend (Thm. 2.1) in report
part ``dpne.kgrams``; it is post-processing (no noise, no spend). :func:`run_baseline`
(``dpngram baseline``, step ``dpne``) applies DPSU to n-grams directly (DPNE §3.1.2), for
comparison only, with the whole dpne share. See ``docs/dpne.md``.

Owns: the DPNE level steps, the k-gram merge, the DPSU baseline step.
Imports: dpngram.mechanisms (dpne, dpne_domain, dpsu), dpngram.release, dpngram.engines, dpngram.config,
dpngram.core; pyarrow.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from dpngram.config import RunConfig
from dpngram.config.stages import DPNE
from dpngram.core.accounting import Accountant, PrivacyEvent, dpsu_threshold, gaussian_sigma
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.select import scratch_engine
from dpngram.engines.sql import load_sql
from dpngram.mechanisms.dpne import (
    BASELINES,
    KGRAM_COLUMNS,
    file_rows,
    level_sigmas,
    release_level,
    restore_level,
)
from dpngram.mechanisms.dpne_domain import (
    check_k,
    drop_tables,
    install_vocabulary,
    level_size,
    level_stage,
    level_table,
    occurrence_table,
    table_exists,
)
from dpngram.mechanisms.dpsu import (
    VOCABULARY_STAGE,
    VOCABULARY_TABLE,
    DpsuParameters,
    SipsRound,
    dpsu_release,
    policy_fill_level,
    sips_release,
    sips_vocabulary_rounds,
    write_keys_parquet,
)
from dpngram.release.context import (
    RunContext,
    StageResult,
    part_events,
    read_parts,
    record_part,
    released_summary,
)
from dpngram.release.layout import KGRAMS, PARTS_DIR, VOCABULARY, baseline_path, level_path
from dpngram.release.spend import spend_once


def vocabulary_seeds(path: Path) -> pa.Table:
    """The released words that seed the k-gram levels (column ``token``): those with
    ``kgram_seed`` (every word of a release written before the column existed)."""
    table = pq.read_table(path)
    if "kgram_seed" in table.column_names:
        table = table.filter(table.column("kgram_seed"))
    return table.select(["token"])


def _ensure_level_state(wh: Engine, ctx: RunContext, upto: int) -> None:
    """Make sure the private level tables for levels 1..upto match the released files; rebuild
    them from those files when missing or stale (e.g. a retried task in a fresh warehouse)."""
    root = ctx.release.root
    schema = ctx.schema
    vocab = root / VOCABULARY
    if not vocab.exists() or not (root / PARTS_DIR / f"{VOCABULARY_STAGE}.json").exists():
        raise ConfigError("dpne: the vocabulary (stage dpne.k1) must be released before k-gram levels")
    for j in range(2, upto + 1):
        if not (root / level_path(j)).exists() or not (root / PARTS_DIR / f"{level_stage(j)}.json").exists():
            raise ConfigError(f"dpne: level {j} must be released before level {upto + 1}")

    seeds = vocabulary_seeds(vocab)

    def consistent(j: int) -> bool:
        size = seeds.num_rows if j == 1 else file_rows(root / level_path(j))
        return (
            table_exists(wh, schema, level_table(j))
            # level 1's positions are built where a level needs them (dpne_domain.level1_occurrences)
            and table_exists(wh, schema, occurrence_table(j) if j > 1 else "dpne_users")
            and level_size(wh, schema, j) == size
        )

    if all(table_exists(wh, schema, level_table(j)) for j in range(1, upto)) and consistent(upto):
        return
    with wh.registered(dpne_released_vocabulary=seeds):
        wh.execute(
            load_sql(
                "dpne/vocabulary_restore",
                schema=schema,
                target=VOCABULARY_TABLE,
                released="dpne_released_vocabulary",
            )
        )
    install_vocabulary(wh, schema)
    for j in range(2, upto + 1):
        restore_level(wh, schema, j, ctx.config.dpne.pruning, root / level_path(j))
        if j > 2:
            drop_tables(wh, schema, occurrence_table(j - 1))


# ----------------------------------------------------------------------------------------------
# Stage functions (called by the CLI and the Airflow DAG)
# ----------------------------------------------------------------------------------------------
def level_sigma(config: RunConfig, k: int) -> float:
    """sigma_k of level ``k`` from the run's dpne share (:func:`dpngram.mechanisms.dpne.level_sigmas`),
    with the share the levels give up for the vocabulary's new-words round when they pay for it."""
    return level_sigmas(
        config.stage_share(DPNE.name),
        config.dpne.max_n,
        config.dpne.sigma_decay,
        threshold_delta=config.dpne.threshold_delta,
        dpsu_vocabulary=config.dpne.vocabulary_method != "triehh",
        new_words_reserve=config.new_words_reserve(),
    )[k]


def run_level(
    ctx: RunContext,
    k: int,
    *,
    noise: NoiseSource | None = None,
    valid_count: Literal["exact", "estimate"] = "exact",
    sampling_probability: float = 0.01,
) -> dict[str, Any]:
    """Stage ``dpne.k{k}``: release S_k to ``released/kgrams/k={k}.parquet`` (2 <= k <= 12).

    Returns ``{'skipped': True, 'k': k}`` when k > T. One Gaussian event sigma_k is charged
    whatever the output (also when S_{k-1} is empty and so S_k is): Thm. 2.1 composes all T
    levels. ``noise`` is for seeded tests only (default: a fresh CSPRNG source)."""
    check_k(k)
    config = ctx.config
    if k > config.dpne.max_n:
        return {"skipped": True, "k": k}
    sigma = level_sigma(config, k)
    stage, output = level_stage(k), level_path(k)

    def compute(wh: Engine) -> Any:
        _ensure_level_state(wh, ctx, k - 1)
        outcome = release_level(
            wh,
            ctx.schema,
            k,
            sigma=sigma,
            eta=config.dpne.eta,
            max_contribution=config.dpne.max_contribution,
            pruning=config.dpne.pruning,
            variant=config.dpne.variant,
            exact_max_valid=config.dpne.exact_max_valid,
            noise=noise or NoiseSource.secure(),
            valid_count=valid_count,
            sampling_probability=sampling_probability,
            policy=config.dpne.policy,
            policy_cap=config.dpne.policy_cap,
            sips_rounds=config.dpne.sips_rounds,
            sips_ratio=config.dpne.sips_plan(k)[0],
            sips_admission=config.dpne.sips_plan(k)[1],
        )
        _export_level(wh, ctx, k)
        report = {
            **outcome.report(),
            "max_contribution": config.dpne.max_contribution,
            "eta": config.dpne.eta,
            "pruning": config.dpne.pruning,
            "policy": config.dpne.policy,
            "sigma_decay": config.dpne.sigma_decay,
        }
        return StageResult(events=outcome.events(stage), report=report)

    result = spend_once(ctx, stage, [output], compute, engine=True)
    return released_summary(ctx, stage, result, [output], k=k)


def _export_level(wh: Engine, ctx: RunContext, k: int) -> None:
    table = wh.fetch_arrow(load_sql("dpne/level_export", schema=ctx.schema, level=level_table(k)), {"k": k})
    with ctx.release.writing(level_path(k)) as tmp:
        write_keys_parquet(table, tmp, KGRAM_COLUMNS)


def finalize_kgrams(ctx: RunContext) -> dict[str, Any]:
    """Merge the level files into ``released/kgrams.parquet`` (k = 2..T; columns k, ngram; sorted
    by k then n-gram). Post-processing only: no noise, no spend. Also records the composed DPNE
    spend (Thm. 2.1) in its report part ``dpne.kgrams``."""
    config = ctx.config
    root = ctx.release.root
    paths = [root / level_path(k) for k in range(2, config.dpne.max_n + 1)]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise ConfigError(f"dpne: levels not released yet: {missing} (run every level before finalize)")
    with scratch_engine(config.engine.memory_limit, config.engine.threads) as wh:
        if paths:
            table = wh.fetch_arrow(load_sql("dpne/merge_levels"), {"paths": [str(p) for p in paths]})
        else:
            table = pa.schema([pa.field(n, t) for n, t in KGRAM_COLUMNS.items()]).empty_table()
    with ctx.release.writing(KGRAMS) as tmp:
        write_keys_parquet(table, tmp, KGRAM_COLUMNS)
    parts = read_parts(ctx)
    events = [
        e for name, part in parts.items() if name.split(".", 1)[0] == DPNE.name for e in part_events(part)
    ]
    _, delta = config.stage_share(DPNE.name)
    counts = {"1": parts.get(VOCABULARY_STAGE, {}).get("released")}
    counts.update({str(k): file_rows(p) for k, p in zip(range(2, config.dpne.max_n + 1), paths, strict=True)})
    record_part(
        ctx,
        "dpne.kgrams",
        {
            "released_per_level": counts,
            "released_kgrams": table.num_rows,
            "composed_epsilon": Accountant(events).total_epsilon(delta) if events else 0.0,
            "composed_delta": delta,
        },
    )
    out = root / KGRAMS
    return {"stage": "dpne.kgrams", "released_rows": table.num_rows, "epsilon": 0.0, "paths": [str(out)]}


# ----------------------------------------------------------------------------------------------
# DPSU baselines (DPNE §3.1.2), for comparison only
# ----------------------------------------------------------------------------------------------
def run_baseline(
    ctx: RunContext, method: str, k: int | None = None, *, noise: NoiseSource | None = None
) -> dict[str, Any]:
    """DPSU applied to n-grams directly (§3.1.2), writing ``released/baseline_<method>.parquet``
    (columns k, ngram) and spending the whole dpne share under stage ``dpne``: ``dpsu-all``,
    ``dpsu-even`` or ``dpsu-single`` (:func:`_baseline_plan` says what each runs). A baseline
    spends the whole dpne budget, so it must be the run's only dpne stage."""
    _check_baseline_request(ctx, method, k)
    plan = _baseline_plan(ctx, method, k)
    output = baseline_path(method)

    def compute(wh: Engine) -> Any:
        source_noise = noise or NoiseSource.secure()
        events: list[PrivacyEvent] = []
        released: list[pa.Table] = []
        per_length: list[dict[str, Any]] = []
        for lo, hi, sigma, delta_t, contribution in plan:
            rows, run, rounds = _baseline_run(
                wh,
                ctx.schema,
                lo,
                hi,
                sigma=sigma,
                delta_t=delta_t,
                contribution=contribution,
                noise=source_noise,
                policy=ctx.config.dpne.policy,
                policy_cap=ctx.config.dpne.policy_cap,
                sips_rounds=ctx.config.dpne.sips_rounds,
                sips_ratio=ctx.config.dpne.sips_ratio,
            )
            released.append(rows)
            events += DpsuParameters(sigma, run["rho"], contribution, delta_t, rounds=rounds).events(
                DPNE.name
            )
            per_length.append(run)
        table = pa.concat_tables(released)
        table = table.sort_by([("k", "ascending"), ("ngram", "ascending")])
        with ctx.release.writing(output) as tmp:
            write_keys_parquet(table, tmp, KGRAM_COLUMNS)
        return StageResult(events=events, report={"method": method, "k": k, "runs": per_length})

    result = spend_once(ctx, DPNE.name, [output], compute, engine=True)
    return released_summary(ctx, DPNE.name, result, [output], method=method)


def _check_baseline_request(ctx: RunContext, method: str, k: int | None) -> None:
    """Refuse an unknown method, a length ``k`` that does not fit the method, or a run whose dpne
    budget is already spent (by the levels or by another baseline)."""
    if method not in BASELINES:
        raise ConfigError(f"method: must be one of {list(BASELINES)} (got {method!r})")
    config = ctx.config
    if method == "dpsu-single":
        if not isinstance(k, int) or not 1 <= k <= config.dpne.max_n:
            raise ConfigError(f"k: dpsu-single needs a length 1..{config.dpne.max_n} (got {k!r})")
    elif k is not None:
        raise ConfigError(f"k: only dpsu-single takes a length (got {k!r} for {method})")
    parts = read_parts(ctx)
    other = [n for n in parts if n.split(".", 1)[0] == DPNE.name and n != DPNE.name]
    if other or (DPNE.name in parts and parts[DPNE.name].get("method") != method):
        raise ConfigError(
            "run_baseline: the dpne budget of this run is already spent; run a baseline in its own run"
        )


def _baseline_plan(
    ctx: RunContext, method: str, k: int | None
) -> list[tuple[int | None, int | None, float, float, int]]:
    """The DPSU runs of a baseline, from the whole dpne share: (shortest length, longest length,
    sigma, threshold delta, per-user contribution) each (``k`` is a length for dpsu-single).

    * ``dpsu-all``: one DPSU over all n-grams of lengths 1..T, contribution T Delta_0, sigma* from
      eq. (1) at delta/2, threshold at delta/2.
    * ``dpsu-even``: one DPSU per length with Delta_0 and sigma = sigma* sqrt(T) (T Gaussians
      compose exactly to sigma*, Prop. 2.3 — the paper's "eps/sqrt(T) by advanced composition"
      is the same idea with a looser bound), each threshold at delta/(2T).
    * ``dpsu-single``: all of the budget on the single length ``k``, Delta_0."""
    config = ctx.config
    epsilon, delta = config.stage_share(DPNE.name)
    theta = config.dpne.threshold_delta  # the thresholds' fraction of delta, as for DPNE
    sigma_star = gaussian_sigma(epsilon, (1.0 - theta) * delta)
    T, delta0 = config.dpne.max_n, config.dpne.max_contribution
    if method == "dpsu-all":
        plan = [(1, T, sigma_star, theta * delta, T * delta0)]
    elif method == "dpsu-even":
        plan = [(n, n, sigma_star * math.sqrt(T), theta * delta / T, delta0) for n in range(1, T + 1)]
    else:
        plan = [(k, k, sigma_star, theta * delta, delta0)]
    return plan


def _baseline_run(
    wh: Engine,
    schema: str,
    lo: int,
    hi: int,
    *,
    sigma: float,
    delta_t: float,
    contribution: int,
    noise: NoiseSource,
    policy: str = "weighted",
    policy_cap: float = 2.0,
    sips_rounds: int = 1,
    sips_ratio: float = 1.0,
) -> tuple[pa.Table, dict[str, Any], tuple[SipsRound, ...]]:
    """One DPSU over the n-grams of lengths lo..hi: the released rows (k, ngram), the run's
    report entry and its DP-SIPS rounds (none for one DPSU); its work tables are dropped."""
    source = "dpsu_baseline_source"
    wh.execute(load_sql("dpsu/ngram_source", schema=schema, target=source), {"min_n": lo, "max_n": hi})
    rho = dpsu_threshold(sigma, delta_t, contribution)
    target = "dpsu_baseline_released"
    rounds: tuple[SipsRound, ...] = ()
    if policy == "dp-sips":
        rounds = sips_vocabulary_rounds(sigma, delta_t, contribution, sips_rounds, sips_ratio)
        count = sips_release(
            wh, schema, source, target, rounds=rounds, max_contribution=contribution, noise=noise
        )
    else:
        count = dpsu_release(
            wh,
            schema,
            source,
            target,
            sigma=sigma,
            threshold=rho,
            max_contribution=contribution,
            noise=noise,
            cap=policy_fill_level(policy, rho, sigma, policy_cap),
        )
    rows = wh.fetch_arrow(load_sql("dpsu/baseline_export", schema=schema, released=target))
    run = {
        "lengths": [lo, hi],
        "sigma": sigma,
        "rho": rho,
        "max_contribution": contribution,
        "released": count,
    }
    if rounds:
        run["sips_rounds"] = [
            {"sigma": r.sigma, "rho": r.threshold, "threshold_delta": r.threshold_delta} for r in rounds
        ]
    drop_tables(wh, schema, source, target)
    return rows, run, rounds
