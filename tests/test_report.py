"""report.json / report.html / plots: merged parts, composed privacy, released counts, generic parts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpngram.config import RunConfig
from dpngram.core.accounting import Accountant, PrivacyEvent, compose, gaussian_sigma, privacy_summary
from dpngram.release.context import RunContext, record_part, stage_timer
from dpngram.release.identity import operator_dir
from dpngram.release.layout import REPORT_HTML
from dpngram.release.publish import prepare
from dpngram.stages.report import released_tables, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_ctx(tmp_path: Path, **overrides) -> RunContext:
    values = {
        "input": str(tmp_path / "in.jsonl"),
        "out": str(tmp_path / "out"),
        "warehouse": str(tmp_path / "wh.duckdb"),
        "epsilon": 3.0,
        "delta": 1e-6,
        "max_n": 3,
        **overrides,
    }
    return RunContext(prepare(RunConfig.build(**values)))


def _privacy(events: list[PrivacyEvent], delta: float, **extra) -> dict:
    summary = Accountant(events).summary(delta)
    return {**summary, **extra}


def populate(ctx: RunContext) -> dict:
    """Stage parts and released files as the real stages write them; returns what was written."""
    delta = ctx.config.delta
    s1, s2 = gaussian_sigma(2.0, delta / 2), 2.2
    k1 = [
        PrivacyEvent("dpne.k1", "gaussian", sigma=s1),
        PrivacyEvent("dpne.k1", "approx", delta=delta / 2, note="DPSU threshold"),
    ]
    k2 = [PrivacyEvent("dpne.k2", "gaussian", sigma=s2)]
    bayes = [PrivacyEvent("bayes", "laplace", epsilon=0.3, sensitivity=1.0)]
    record_part(ctx, "dpne.k1", {"released": 4, "privacy": _privacy(k1, delta), "seconds": 0.5})
    record_part(ctx, "dpne.k2", {"released": 3, "privacy": _privacy(k2, delta), "seconds": 0.25})
    record_part(ctx, "bayes", {"prior": "public", "privacy": _privacy(bayes, delta)})
    record_part(ctx, "mystery.stage", {"widgets": 7, "nested": {"colour": "blue<script>"}})
    vocab = ["a", "b", "c", "d"]
    kgrams = [(2, "a b"), (2, "b c"), (2, "c d"), (3, "a b c")]
    pq.write_table(pa.table({"token": vocab}), ctx.release.path("released", "vocabulary.parquet"))
    pq.write_table(
        pa.table({"k": pa.array([k for k, _ in kgrams], pa.int32()), "ngram": [g for _, g in kgrams]}),
        ctx.release.path("released", "kgrams.parquet"),
    )
    pq.write_table(
        pa.table({"k": pa.array([2, 2, 2], pa.int32()), "ngram": ["a b", "b c", "c d"]}),
        ctx.release.path("released", "kgrams", "k=2.parquet"),
    )
    return {"events": k1 + k2 + bayes, "vocab": vocab, "kgrams": kgrams}


def test_report_merges_parts_and_composes_privacy(tmp_path):
    ctx = make_ctx(tmp_path)
    written = populate(ctx)
    with stage_timer(ctx, "ingest"):
        pass
    path = write_report(ctx)
    report = json.loads(path.read_text())
    privacy = report["privacy"]
    expected_total = compose(written["events"], ctx.config.delta)["epsilon"]
    assert privacy["total"]["epsilon_exact"] == pytest.approx(expected_total, rel=1e-9)
    assert privacy["total"]["epsilon"] == float(f"{expected_total:.6g}")
    assert len(privacy["events"]) == len(written["events"])
    stage_eps = [
        compose([e for e in written["events"] if e.stage == s], ctx.config.delta)["epsilon"]
        for s in ("dpne.k1", "dpne.k2", "bayes")
    ]
    assert privacy["basic_composition"]["epsilon"] == pytest.approx(sum(stage_eps), rel=1e-9)
    assert privacy["total"]["epsilon_exact"] <= privacy["basic_composition"]["epsilon"] + 1e-9
    assert set(privacy["stages"]) == {"dpne.k1", "dpne.k2", "bayes"}
    assert privacy["within_budget"] is (expected_total <= ctx.config.epsilon * (1 + 1e-6))

    per_k = report["released"]["ngrams_per_k"]
    assert per_k == {
        "1": len(written["vocab"]),
        "2": sum(1 for k, _ in written["kgrams"] if k == 2),
        "3": sum(1 for k, _ in written["kgrams"] if k == 3),
    }
    assert report["released"]["tables"]["kgrams/k=2"]["rows"] == 3  # nested released files are counted too
    assert report["parameters"]["epsilon"] == ctx.config.epsilon
    # timings are operator-only: not in the release, in the operator report beside the warehouse
    assert "timings_seconds" not in report
    assert all("seconds" not in part for part in report["stages"].values())
    operator = json.loads((operator_dir(ctx.config) / "operator_report.json").read_text())
    assert operator["timings_seconds"].keys() == {"ingest", "dpne.k1", "dpne.k2"}
    assert report["noise"]["mode"] == "secure"
    assert report["validation"] == {"ran": False}
    assert report["stages"]["mystery.stage"]["widgets"] == 7  # unknown parts carried over
    for name in ("ngrams_per_k", "privacy_per_stage"):
        png = ctx.release.root / report["plots"][name]
        assert png.read_bytes()[:8] == PNG_MAGIC


def test_html_is_self_contained_and_renders_unknown_parts(tmp_path):
    ctx = make_ctx(tmp_path)
    populate(ctx)
    record_part(
        ctx,
        "validation",
        {
            "success": False,
            "suites": [
                {
                    "suite": "released.kgrams.table",
                    "success": False,
                    "evaluated": 5,
                    "failed": 1,
                    "failures": [
                        "expect_column_values_to_be_between on column not_downward_closed (expected 0)"
                    ],
                }
            ],
            "data_docs": "validation/data_docs/index.html",
            "results": "validation/results.json",
        },
    )
    write_report(ctx)
    page = (ctx.release.root / REPORT_HTML).read_text()
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    assert "<script" not in page  # part values are escaped, and the page loads no script
    assert "blue&lt;script&gt;" in page and "mystery.stage" in page and "widgets" in page
    assert "not_downward_closed" in page and "FAILED" in page
    assert "src='plots/ngrams_per_k.png'" in page and "src='plots/privacy_per_stage.png'" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched from elsewhere


def test_seeded_noise_is_flagged(tmp_path):
    ctx = make_ctx(tmp_path)
    record_part(ctx, "dpne.k1", {"noise_mode": "seeded-test (NOT PRIVATE)"})
    report = json.loads(write_report(ctx).read_text())
    assert report["noise"]["mode"].startswith("seeded-test")
    assert report["privacy"]["total"]["epsilon"] == 0.0  # no events: nothing spent


def test_privacy_summary_flags_overspend():
    events = [PrivacyEvent("dpne", "gaussian", sigma=1.0)]
    parts = {"dpne": {"privacy": Accountant(events).summary(1e-6)}}
    summary = privacy_summary(parts, 1e-6, epsilon_budget=0.5)
    assert summary["total"]["epsilon"] > 0.5 and summary["within_budget"] is False


def test_released_tables_of_an_empty_release(tmp_path):
    assert released_tables(tmp_path) == {}
