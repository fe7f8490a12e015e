"""Step ``lm``: a KenLM language model built only from the run's released DP outputs.

:func:`run_lm` (after ``validation``, before ``report``) builds ``model/model.arpa`` with
:mod:`dpngram.lm.build` (the open-vocabulary mixture of the public model and the model of the noisy
counts of step ``lm_counts``), compiles ``model/model.binary`` (``build_binary`` in its own
process), checks the tables it wrote with the GX suite ``model.arpa`` and the file's SHA-256
against the bytes written (:func:`dpngram.validation.validate_model`), compares the model with the
public-only model on held-out public sentences neither was trained on (the scores step
``lm_counts`` stored in its report part; else scored here in a thread, beside the build, the check
and the compilation) and on ``lm_eval_text`` when given, and writes
``model/MODEL_CARD.md`` and report part ``lm``. Post-processing only: no privacy spend, no access
to the run's private schema. The step runs only with an ``lm_counts`` share
(:func:`dpngram.config.budget_plan.lm_skip_reason`).

Owns: the ``lm`` step (build, checks, comparison, model card, report part).
Imports: dpngram.validation, dpngram.lm, dpngram.release, dpngram.config, dpngram.core.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from dpngram.config import RunConfig
from dpngram.core.errors import ArpaError, ConfigError
from dpngram.lm.build import (
    MIXTURE_ROUTE,
    STAGE,
    BinaryBuild,
    ReleasedInputs,
    build_route_mixture,
    compare_on_eval_text,
    heldout_public_metrics,
    heldout_public_part,
    heldout_public_row,
    load_public,
)
from dpngram.lm.kenlm_bin import KENLM_MAX_ORDER
from dpngram.release.context import RunContext, read_parts
from dpngram.release.layout import MODEL_ARPA, MODEL_BINARY, MODEL_CARD

log = logging.getLogger(__name__)


def run_lm(ctx: RunContext) -> dict[str, Any]:
    """Step ``lm`` (after ``validation``, before ``report``): build the model from released files only,
    compile it, check it (GX suite ``model.arpa``), compare it with the public-only model on public /
    user-supplied text, write the model card and report part ``lm``. Returns a public summary (paths,
    counts)."""
    from dpngram.lm.model_card import render_model_card
    from dpngram.release.context import record_part

    config: RunConfig = ctx.config
    if config.lm.order > KENLM_MAX_ORDER:
        raise ConfigError(
            f"lm_order: at most {KENLM_MAX_ORDER} (KenLM's compiled limit; got {config.lm.order})"
        )
    started = time.perf_counter()
    counts_part = read_parts(ctx).get("lm_counts")
    info, check, comparison = _build_check_compare(ctx, counts_part)
    part = _lm_part(config, info, check=check, comparison=comparison)
    part["seconds"] = round(time.perf_counter() - started, 3)
    # The DP verdict released by lm_counts scores exactly the mixture built here.
    part["private_domain"] = counts_part.get("private_domain")
    record_part(ctx, STAGE, part)
    with ctx.release.writing(MODEL_CARD) as tmp:
        tmp.write_text(render_model_card(ctx.config, ctx.run_id, read_parts(ctx), part), encoding="utf-8")
    if not check.get("success"):
        raise ArpaError("model.arpa failed its validation suite (see report part 'lm')")
    log.info("lm: order %d, counts %s", config.lm.order, part["counts"])
    return {
        "stage": STAGE,
        "method": MIXTURE_ROUTE,
        "paths": [MODEL_ARPA, MODEL_BINARY, MODEL_CARD],
        "released_rows": sum(info["counts"].values()),
        "epsilon": 0.0,
    }


def _build_check_compare(
    ctx: RunContext, counts_part: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(build info, check, comparison): ``model/model.arpa`` built from the released files and
    compiled to ``model/model.binary``, the tables written checked, and the model compared with the
    public-only model on the held-out public sentences and ``lm_eval_text``. On any failure the
    compilation and the worker's jobs are stopped and no binary is left."""
    from dpngram.validation import validate_model

    config, release = ctx.config, ctx.release
    inputs = ReleasedInputs(release.root)
    arpa = release.path(MODEL_ARPA)
    binary = release.path(MODEL_BINARY)
    compiling: BinaryBuild | None = None
    jobs: dict[str, Future[Any]] = {}
    # Step lm_counts scored M (which it built for the verdict and stored in the public-model
    # cache) and P on the held-out public sentences; else a worker thread loads P and scores it
    # while M is read or built, written and checked here, then scores M. build_binary compiles the
    # file in its own process meanwhile, and this thread checks the tables written (and the file's
    # bytes against them). KenLM's parse of the file is its own check.
    scored = counts_part.get("heldout_public") if counts_part is not None else None
    with ThreadPoolExecutor(1, thread_name_prefix="lm-heldout") as pool:
        try:
            # (without the part, build_route_mixture says what is missing)
            if counts_part is not None and scored is None:
                jobs["public"] = pool.submit(lambda: load_public(inputs, config, counts_part)[1])
                jobs["public scored"] = pool.submit(
                    lambda: heldout_public_metrics(jobs["public"].result(), config)
                )
            loaded = jobs["public"].result if jobs else None
            info = build_route_mixture(counts_part, inputs, config, arpa, public=loaded)
            model, written = info.pop("model"), info.pop("written")
            compiling = BinaryBuild(arpa, binary)
            if scored is None:
                jobs["released scored"] = pool.submit(heldout_public_metrics, model, config)
            check = validate_model(ctx, written=written)
            if scored is None:
                scored = heldout_public_part(jobs["released scored"].result(), jobs["public scored"].result())
            held_out = heldout_public_row(scored)
            del model, written
            compiling.wait()
            comparison = held_out | compare_on_eval_text(binary, inputs, config)
        except BaseException:
            if compiling is not None:
                compiling.cancel()
            for job in jobs.values():
                job.cancel()
            raise
    return info, check, comparison


def _lm_part(
    config: RunConfig, info: dict[str, Any], *, check: dict[str, Any], comparison: dict[str, Any]
) -> dict[str, Any]:
    """Report part ``lm``: how the model was built, its counts and sources, its checks and the
    comparison with the public-only model."""
    return {
        "route": MIXTURE_ROUTE,
        "route_selection": "the run released noisy counts (stage lm_counts)",
        "order": config.lm.order,
        "counts": {str(n): c for n, c in info["counts"].items()},
        "vocabulary_size": int(info["counts"].get(1, 0)),
        "smoothing": info["smoothing"],
        "sources": info["sources"],
        "paths": {"arpa": MODEL_ARPA, "binary": MODEL_BINARY, "card": MODEL_CARD},
        "validation": check,
        "comparison": comparison,
        "mix_weight": info.get("mix_weight"),
        "vocabulary": info.get("vocabulary"),
        "privacy_spend": "none: post-processing of released DP outputs only",
    }
