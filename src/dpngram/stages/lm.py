"""Step ``lm``: a KenLM language model built only from the run's released DP outputs.

:func:`run_lm` (after ``validation``, before ``report``) chooses the route (the open-vocabulary
mixture when the run released noisy counts; otherwise the configured route, or with evaluation
text the route with the lower perplexity), builds ``model/model.arpa`` with
:mod:`dpngram.lm.build`, compiles ``model/model.binary``, checks the ARPA file with the GX suite
``model.arpa`` (:func:`dpngram.validation.validate_model`), evaluates it on public or user-supplied
text, and writes ``model/MODEL_CARD.md`` and report part ``lm``. Post-processing only: no privacy
spend, no access to the run's private schema.

Owns: the ``lm`` step (route choice, checks, evaluation, model card, report part).
Imports: dpngram.validation, dpngram.lm, dpngram.release, dpngram.config, dpngram.core.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from dpngram.config import RunConfig
from dpngram.core.errors import ArpaError, ConfigError
from dpngram.lm.build import (
    DEFAULT_ROUTE,
    MIXTURE_ROUTE,
    ROUTES,
    STAGE,
    ReleasedInputs,
    build_route,
    build_route_mixture,
    compare_with_public,
    compile_binary,
    route_seed,
)
from dpngram.lm.kenlm_bin import KENLM_MAX_ORDER
from dpngram.release.context import RunContext, read_parts
from dpngram.release.layout import MODEL_ARPA, MODEL_BINARY, MODEL_CARD

log = logging.getLogger(__name__)


def run_lm(ctx: RunContext) -> dict[str, Any]:
    """Step ``lm`` (after ``validation``, before ``report``): build the model from released files only,
    compile it, check it (GX suite ``model.arpa``), evaluate it on public / user-supplied text,
    write the model card and report part ``lm``. Returns a public summary (paths, counts)."""
    from dpngram.lm.model_card import render_model_card
    from dpngram.release.context import record_part

    config: RunConfig = ctx.config
    if config.lm.order > KENLM_MAX_ORDER:
        raise ConfigError(
            f"lm_order: at most {KENLM_MAX_ORDER} (KenLM's compiled limit; got {config.lm.order})"
        )
    started = time.perf_counter()
    release = ctx.release
    inputs = ReleasedInputs(release.root)
    arpa = release.path(MODEL_ARPA)
    binary = release.path(MODEL_BINARY)
    seed = route_seed(ctx.run_id)
    eval_text = config.lm.eval_text or config.public
    eval_kind = "user-supplied" if config.lm.eval_text else ("public corpus" if config.public else None)

    route, candidates = _choose_route(config, inputs, arpa, seed)
    info = _build_model(ctx, route, candidates, inputs, arpa, binary, seed)

    from dpngram.validation import validate_model

    check = validate_model(ctx, MODEL_ARPA)
    comparison, metrics = _compare_or_evaluate(ctx, info, inputs, binary, eval_text)
    build_seconds = round(time.perf_counter() - started, 3)
    # The DP verdict released by lm_counts scores exactly the mixture this route builds.
    counts_part = read_parts(ctx).get("lm_counts") or {}
    private_domain = counts_part.get("private_domain") if route == MIXTURE_ROUTE else None
    part = _lm_part(
        config,
        route,
        candidates,
        info,
        check=check,
        metrics={"text": eval_kind, **metrics} if metrics else None,
        comparison=comparison,
        seconds=build_seconds,
    )
    part["private_domain"] = private_domain
    record_part(ctx, STAGE, part)
    with ctx.release.writing(MODEL_CARD) as tmp:
        tmp.write_text(render_model_card(ctx.config, ctx.run_id, read_parts(ctx), part), encoding="utf-8")
    if not check.get("success"):
        raise ArpaError("model.arpa failed its validation suite (see report part 'lm')")
    log.info("lm: route %s, order %d, counts %s", route, config.lm.order, part["counts"])
    return {
        "stage": STAGE,
        "method": route,
        "paths": [MODEL_ARPA, MODEL_BINARY, MODEL_CARD],
        "released_rows": sum(info["counts"].values()),
        "epsilon": 0.0,
    }


def _choose_route(
    config: RunConfig, inputs: ReleasedInputs, arpa: Path, seed: int
) -> tuple[str, dict[str, dict[str, Any]]]:
    """The route to build, and the candidates built to choose it (only for 'auto' with evaluation
    text and no released noisy counts; otherwise empty)."""
    candidates: dict[str, dict[str, Any]] = {}
    mixture = config.lm.route == MIXTURE_ROUTE or (
        config.lm.route == "auto" and "lm_counts" in config.stage_budget
    )
    if mixture:
        route = MIXTURE_ROUTE
    elif config.lm.route in ROUTES:
        route = config.lm.route
    elif config.lm.eval_text:  # auto with evaluation text: build both, keep the better one
        candidates = _build_candidates(config, inputs, arpa, seed)
        usable = {r: c for r, c in candidates.items() if "perplexity" in c}
        if not usable:
            raise ConfigError("lm_route: neither route can be built from this run's released files")
        route = min(usable, key=lambda r: usable[r]["perplexity"])
    else:
        route = DEFAULT_ROUTE
    return route, candidates


def _build_candidates(
    config: RunConfig, inputs: ReleasedInputs, arpa: Path, seed: int
) -> dict[str, dict[str, Any]]:
    """Build, compile and evaluate every route next to ``arpa`` (``candidate_<route>.arpa``): per
    route its perplexity on the evaluation text and build info, or the error that stopped it."""
    from dpngram.lm.evaluate import evaluate_file

    candidates: dict[str, dict[str, Any]] = {}
    for r in ROUTES:
        trial = arpa.with_name(f"candidate_{r}.arpa")
        try:
            info = build_route(r, inputs, config, trial, seed)
        except ConfigError as err:
            candidates[r] = {"error": str(err)}
            continue
        compile_binary(trial, trial.with_suffix(".binary"))
        metrics = evaluate_file(trial.with_suffix(".binary"), config.lm.eval_text, config.lowercase)
        candidates[r] = {"perplexity": metrics["perplexity"], "info": info}
    return candidates


def _build_model(
    ctx: RunContext,
    route: str,
    candidates: dict[str, dict[str, Any]],
    inputs: ReleasedInputs,
    arpa: Path,
    binary: Path,
    seed: int,
) -> dict[str, Any]:
    """Write ``arpa`` for ``route`` (reusing its candidate if one was built), remove the candidate
    files and compile ``binary``. Returns the build info."""
    config: RunConfig = ctx.config
    if route == MIXTURE_ROUTE:
        info = build_route_mixture(read_parts(ctx).get("lm_counts"), inputs, config, arpa)
    elif route in candidates and "info" in candidates[route]:
        info = candidates[route]["info"]
        os.replace(arpa.with_name(f"candidate_{route}.arpa"), arpa)
    else:
        info = build_route(route, inputs, config, arpa, seed)
    for r in ROUTES:
        for suffix in (".arpa", ".binary"):
            arpa.with_name(f"candidate_{r}{suffix}").unlink(missing_ok=True)
    compile_binary(arpa, binary)
    return info


def _compare_or_evaluate(
    ctx: RunContext, info: dict[str, Any], inputs: ReleasedInputs, binary: Path, eval_text: str | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(comparison with the public-only model, metrics on the evaluation text): the comparison when
    the build returned a public model (popped from ``info``), else the metrics if there is text."""
    from dpngram.lm.evaluate import evaluate_file

    config: RunConfig = ctx.config
    public_model = info.pop("public_model", None)
    comparison = (
        compare_with_public(read_parts(ctx)["lm_counts"], inputs, binary, public_model, config)
        if public_model is not None
        else None
    )
    if comparison is not None:
        metrics = None  # the comparison table replaces the single in-sample number
    else:
        metrics = evaluate_file(binary, eval_text, config.lowercase) if eval_text else None
    return comparison, metrics


def _lm_part(
    config: RunConfig,
    route: str,
    candidates: dict[str, dict[str, Any]],
    info: dict[str, Any],
    *,
    check: dict[str, Any],
    metrics: dict[str, Any] | None,
    comparison: dict[str, Any] | None,
    seconds: float,
) -> dict[str, Any]:
    """Report part ``lm``: the route and why, the model's counts and sources, its checks and metrics."""
    return {
        "route": route,
        "route_selection": (
            "configured"
            if config.lm.route in (*ROUTES, MIXTURE_ROUTE)
            else "auto: the run released noisy counts (stage lm_counts)"
            if route == MIXTURE_ROUTE
            else "auto: lowest perplexity on the evaluation text"
            if candidates
            else f"auto: default route '{DEFAULT_ROUTE}' (benchmarks/lm_bench.py)"
        ),
        "candidates": {r: {k: v for k, v in c.items() if k != "info"} for r, c in candidates.items()},
        "order": config.lm.order,
        "counts": {str(n): c for n, c in info["counts"].items()},
        "vocabulary_size": int(info["counts"].get(1, 0)),
        "smoothing": info["smoothing"],
        "sources": info["sources"],
        "paths": {"arpa": MODEL_ARPA, "binary": MODEL_BINARY, "card": MODEL_CARD},
        "validation": check,
        "metrics": metrics,
        "comparison": comparison,
        "mix_weight": info.get("mix_weight"),
        "vocabulary": info.get("vocabulary"),
        "seconds": seconds,
        "privacy_spend": "none: post-processing of released DP outputs only",
    }
