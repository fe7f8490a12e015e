"""benchmarks/lm_bench.py's ``previous_run``: which earlier result a run is compared with."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import lm_bench  # noqa: E402  (benchmarks/ is not a package)


def test_lm_bench_compares_an_option_run_with_the_default(tmp_path):
    out = tmp_path / "lm_option.json"
    assert lm_bench.previous_path(None, ["lm_public_prune=1"], out) == lm_bench.RESULTS / "lm.json"
    assert lm_bench.previous_path(None, [], out) == out
    assert lm_bench.previous_path("none", ["x=1"], out) is None
    assert lm_bench.previous_path(str(tmp_path / "a.json"), ["x=1"], out) == tmp_path / "a.json"
    default = lm_bench.RESULTS / "lm.json"
    if default.is_file():  # the committed result (absent only in a stripped checkout)
        replaced = lm_bench.previous_summary(default)
        compared = lm_bench.previous_summary(default, replaced=False)
        assert "before this run replaced it" in replaced["note"]
        assert compared["note"] == "the latest result this run is compared with (lm.json)"
        assert compared["commit"] == replaced["commit"]
