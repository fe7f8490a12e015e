"""Test helper: the DPNE steps of a release in this process, through the plan's public steps.

Tests that need a run's vocabulary and k-grams (and the stages after them) run the steps the plan
would run for the vocabulary, the levels 2..T and their merge, without ingest's neighbours or the
rest of a release. TrieHH is left out: a test that wants it runs its step itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpngram.core.noise import NoiseSource
from dpngram.orchestration.plan import STEP_BY_NAME, release_steps
from dpngram.release.context import RunContext


def run_dpne(
    ctx: RunContext, progress: Callable[[str], None] | None = None, *, noise: NoiseSource | None = None
) -> dict[str, Any]:
    """The vocabulary, the levels 2..T that apply, then the k-gram merge; ``progress(step_name)``
    after each. Returns the stage names, the released row counts and the released paths."""
    levels = [s for s in release_steps(ctx.config) if s.name.startswith("dpne.k") and s.name != "dpne.kgrams"]
    results = []
    for step in [*levels, STEP_BY_NAME["dpne.kgrams"]]:
        results.append(step.run(ctx, **({"noise": noise} if step.name != "dpne.kgrams" else {})))
        if progress:
            progress(step.name)
    vocabulary, kgrams = results[0], results[-1]
    return {
        "stages": [r["stage"] for r in results],
        "released_rows": {"vocabulary": vocabulary["released_rows"], "kgrams": kgrams["released_rows"]},
        "paths": vocabulary["paths"] + kgrams["paths"],
    }
