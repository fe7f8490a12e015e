"""Step ``bayes``: a Bayesian trigram distribution θ released with BayesianDP.

:func:`run_bayes` prepares the trigram space from the public corpus, the released vocabulary and
the released k-grams (:func:`dpngram.mechanisms.bayes.prepare_inputs`), chooses (S, ρ) from the
configuration or by tuning on public data alone (:func:`choose_hyperparameters`), calibrates the
Gaussian noise to the sensitivity bound and writes ``released/trigram_dist.parquet`` (w1, w2, w3,
prob), spending the whole bayes share through :func:`dpngram.release.spend.spend_once`.
:func:`run_bayes_baseline` releases one of the paper's Laplace baselines (§4.2) in its place, for
benchmarks. The algorithm and its privacy argument are in :mod:`dpngram.mechanisms.bayes` and
``docs/bayes.md``.

Owns: the ``bayes`` step (its inputs from the release, the hyperparameter choice, the report part).
Imports: dpngram.mechanisms.bayes, dpngram.release, dpngram.engines, dpngram.config, dpngram.core; numpy,
pyarrow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpngram.config import RunConfig
from dpngram.config.stages import BAYES
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.mechanisms.bayes import (
    BASELINE_METHODS,
    GUARANTEE_DP,
    GUARANTEE_NOT_DP,
    GUARANTEE_PURE,
    RHO_GRID,
    S_GRID,
    GaussianCalibration,
    TrigramInputs,
    TuningResult,
    bayesian_release,
    bruteforce_sensitivity_not_dp,
    calibrate,
    drop_work_tables,
    laplace_baseline_release,
    laplace_distribution,
    laplace_public_distribution,
    posterior_mean,
    prepare_inputs,
    released_trigrams,
    sensitivity_bound,
    softmax,
    space_keys,
    tune_on_public,
)
from dpngram.mechanisms.bayes_user_counts import BOS, EOS, UNK
from dpngram.release.context import RunContext, StageResult, read_parts, released_summary
from dpngram.release.identity import public_cache_dir
from dpngram.release.layout import KGRAMS, TRIGRAM_DIST, VOCABULARY
from dpngram.release.spend import spend_once

#: ``bayes_calibration`` of the paper's brute-force sensitivity (not DP; for comparison only).
NOT_DP_CALIBRATION = "brute-force-NOT-DP"


# ----------------------------------------------------------------------------------------------
# Stage functions
# ----------------------------------------------------------------------------------------------
def _stage_inputs(ctx: RunContext, wh: Engine, salt: int) -> TrigramInputs:
    config = ctx.config
    if not config.public:
        raise ConfigError("public: the bayes stage needs a public corpus (set public to a text file)")
    if not Path(config.public).is_file():
        raise ConfigError(f"public: {config.public} does not exist or is not a file")
    root = ctx.release.root
    vocab_path = root / VOCABULARY
    vocabulary = pq.read_table(vocab_path, columns=["token"]) if vocab_path.is_file() else None
    if vocabulary is None:
        raise ConfigError("bayes: released/vocabulary.parquet is missing (run the DPNE stages first)")
    return prepare_inputs(
        wh,
        ctx.schema,
        public_path=config.public,
        vocabulary=vocabulary,
        released=released_trigrams(root / KGRAMS),
        C=config.bayes.clip_count,
        W=config.bayes.max_trigrams,
        vocab_size=config.bayes.vocab_size,
        salt=salt,
        lowercase=config.lowercase,
        cache_dir=public_cache_dir(config),
        # the NOT-DP brute-force sensitivity reads the per-user table (bruteforce_sensitivity_not_dp)
        user_counts_table=config.bayes.calibration == NOT_DP_CALIBRATION,
    )


#: The stage's one name (declared in :mod:`dpngram.config.stages`).
STAGE = BAYES.name


def _write_distribution(wh: Engine, ctx: RunContext, theta: np.ndarray) -> None:
    keys = space_keys(wh, ctx.schema)
    table = keys.append_column("prob", pa.array(theta, pa.float64()))
    with ctx.release.writing(TRIGRAM_DIST) as tmp:
        pq.write_table(table, tmp)


def _check_method(ctx: RunContext, method: str) -> None:
    part = read_parts(ctx).get(STAGE)
    if part is not None and part.get("method") != method:
        raise ConfigError(
            f"bayes: this run already released a trigram distribution with method {part.get('method')!r}; "
            "run another method in its own run"
        )


def choose_hyperparameters(
    wh: Engine, ctx: RunContext, inputs: TrigramInputs, epsilon: float, delta: float
) -> TuningResult:
    """(S, ρ): fixed values from the config, or public tuning for the ones set to 'auto'."""
    config = ctx.config
    fixed_S = None if config.bayes.S == "auto" else float(config.bayes.S)
    fixed_rho = None if config.bayes.rho == "auto" else float(config.bayes.rho)
    if fixed_S is not None and fixed_rho is not None:
        return TuningResult(fixed_S, fixed_rho, "fixed (configuration)", [], 0, 0)
    tuned = tune_on_public(
        wh,
        inputs,
        epsilon=epsilon,
        delta=delta,
        C=config.bayes.clip_count,
        W=config.bayes.max_trigrams,
        log_clip=config.bayes.log_clip,
        S_grid=S_GRID if fixed_S is None else (fixed_S,),
        rho_grid=RHO_GRID if fixed_rho is None else (fixed_rho,),
    )
    return tuned


def run_bayes(ctx: RunContext, *, noise: NoiseSource | None = None) -> dict[str, Any]:
    """Stage ``bayes``: release ``released/trigram_dist.parquet`` (w1, w2, w3, prob) by BayesianDP
    (Algorithm 1) with the whole bayes share of (ε, δ), via
    :func:`dpngram.release.spend.spend_once` (noisy output persisted before the spend is
    committed; a retry reuses it). Returns a summary safe for XCom. ``noise`` is for seeded tests
    only (default: a fresh CSPRNG source)."""
    config = ctx.config
    epsilon, delta = config.stage_share(STAGE)
    _check_method(ctx, "bayesian")
    not_dp = config.bayes.calibration == NOT_DP_CALIBRATION

    def compute(wh: Engine) -> StageResult:
        source = noise or NoiseSource.secure()
        # The salt keys each user's W-trigram subset (a contribution bound: the sensitivity bound
        # holds for any salt), revealed only through the noise below: a selection salt, so running
        # out of memory while counting charges nothing (docs/faults.md, "Selection salts").
        inputs = _stage_inputs(ctx, wh, source.selection_salt())
        C, W, L = config.bayes.clip_count, config.bayes.max_trigrams, config.bayes.log_clip
        tuning = choose_hyperparameters(wh, ctx, inputs, epsilon, delta)
        S, rho = tuning.S, tuning.rho
        bound = sensitivity_bound(C=C, W=W, S=S, rho=rho, vocab_size=inputs.size, log_clip=L)
        used = bruteforce_sensitivity_not_dp(wh, inputs, S=S, rho=rho, C=C, log_clip=L) if not_dp else bound
        calibration = calibrate(epsilon, delta, used, inputs.size)
        mu = posterior_mean(inputs.total_count, inputs.users, inputs.public, S=S, rho=rho, C=C, log_clip=L)
        logits, events = bayesian_release(
            mu, calibration, source, stage=STAGE, differentially_private=not not_dp
        )
        theta = softmax(logits)
        _write_distribution(wh, ctx, theta)
        drop_work_tables(wh, ctx.schema)
        report = _bayes_report(config, inputs, tuning, bound, calibration, (epsilon, delta), source.mode)
        return StageResult(events=events, report=report)

    result = spend_once(ctx, STAGE, [TRIGRAM_DIST], compute, engine=True)
    return _summary(ctx, result)


def _bayes_report(
    config: RunConfig,
    inputs: TrigramInputs,
    tuning: TuningResult,
    bound: float,
    calibration: GaussianCalibration,
    budget: tuple[float, float],
    noise_mode: str,
) -> dict[str, Any]:
    """The stage's report part: public parameters, the hyperparameters, the calibration."""
    epsilon, delta = budget
    not_dp = config.bayes.calibration == NOT_DP_CALIBRATION
    C, W, L = config.bayes.clip_count, config.bayes.max_trigrams, config.bayes.log_clip
    return {
        "method": "bayesian",
        "paper": "Ramadan et al., N-grams Bayesian Differential Privacy, Algorithm 1",
        "vocab_size": inputs.size,
        "released_dpne_trigrams_offered": inputs.released_trigrams,
        "unk_mapping": "tokens outside released/vocabulary.parquet -> <unk>" if inputs.unk_mapped else "none",
        "markers": {"begin": BOS, "end": EOS, "unknown": UNK},
        "S": tuning.S,
        "rho": tuning.rho,
        "C": C,
        "W": W,
        "log_clip": L,
        "hyperparameters": {k: v for k, v in tuning.report().items() if k not in ("S", "rho")},
        "calibration": config.bayes.calibration,
        "sensitivity_bound": bound,
        "sensitivity_used": calibration.sensitivity if not not_dp else "brute-force (private, not reported)",
        "snapped_sensitivity": calibration.snapped_sensitivity if not not_dp else None,
        "sigma": calibration.sigma,
        "grid": calibration.grid,
        "differentially_private": not not_dp,
        "guarantee": GUARANTEE_NOT_DP if not_dp else GUARANTEE_DP.format(eps=epsilon, delta=delta),
        "noise_mode": noise_mode,
    }


def run_bayes_baseline(ctx: RunContext, method: str, *, noise: NoiseSource | None = None) -> dict[str, Any]:
    """§4.2 baselines in place of BayesianDP (for benchmarks): ``laplace`` (Laplace on the bounded
    counts, threshold at 0, normalise) or ``laplace-public`` (the same noisy counts smoothed with
    the public distribution). Pure ε-DP with the bayes share's ε (a Laplace event); writes
    ``released/trigram_dist.parquet`` under stage ``bayes``, so it must be the run's only bayes
    release."""
    if method not in BASELINE_METHODS:
        raise ConfigError(f"method: must be one of {list(BASELINE_METHODS)} (got {method!r})")
    config = ctx.config
    epsilon, _ = config.stage_share(STAGE)
    _check_method(ctx, method)

    def compute(wh: Engine) -> StageResult:
        source = noise or NoiseSource.secure()
        inputs = _stage_inputs(ctx, wh, source.selection_salt())  # as in run_bayes
        C, W = config.bayes.clip_count, config.bayes.max_trigrams
        noisy, scale, events = laplace_baseline_release(
            inputs.total_count, epsilon=epsilon, C=C, W=W, noise=source, method=method, stage=STAGE
        )
        theta = (
            laplace_distribution(noisy)
            if method == "laplace"
            else laplace_public_distribution(noisy, inputs.public, scale)
        )
        _write_distribution(wh, ctx, theta)
        drop_work_tables(wh, ctx.schema)
        report = {
            "method": method,
            "paper": "Ramadan et al. §4.2 baseline",
            "vocab_size": inputs.size,
            "C": C,
            "W": W,
            "laplace_scale": scale,
            "sensitivity_l1": W * C,
            "differentially_private": True,
            "guarantee": GUARANTEE_PURE.format(eps=epsilon),
            "noise_mode": source.mode,
        }
        return StageResult(events=events, report=report)

    result = spend_once(ctx, STAGE, [TRIGRAM_DIST], compute, engine=True)
    return _summary(ctx, result)


def _summary(ctx: RunContext, result: dict[str, Any]) -> dict[str, Any]:
    return released_summary(ctx, STAGE, result, [TRIGRAM_DIST])
