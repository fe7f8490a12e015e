"""Run orchestration: spend_once's retry rule, prepare's budget check, atomic publication."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from dpngram.config import RunConfig
from dpngram.core.accounting import Accountant, PrivacyEvent, gaussian_sigma
from dpngram.core.errors import BudgetError, ConfigError
from dpngram.orchestration import plan as run_module
from dpngram.orchestration.plan import run_release
from dpngram.release.context import (
    PUBLIC_SUMMARY_KEYS,
    RunContext,
    StageResult,
    public_summary,
    read_parts,
    read_timings,
    record_part,
    run_id_from,
    stage_timer,
)
from dpngram.release.ledger import Ledger
from dpngram.release.publish import prepare, publish_run
from dpngram.release.spend import spend_once

#: each test its own ledger: several set a lifetime budget on dataset "runtest"
pytestmark = pytest.mark.usefixtures("own_ledger")


def make_config(tmp_path: Path, **overrides) -> RunConfig:
    values = {
        "input": str(tmp_path / "in.jsonl"),
        "out": str(tmp_path / "out"),
        "warehouse": str(tmp_path / "wh.duckdb"),
        "dataset": "runtest",
        # the synthetic stages below are calibrated to the run's whole (epsilon, delta): a dpne-only
        # split, as the default was before it ran every stage
        "stage_budget": {"dpne": 1.0},
        **overrides,
    }
    return RunConfig.build(**values)


def ledger_entries(ctx: RunContext) -> list[dict]:
    with ctx.ledger() as ledger:
        return [e for e in ledger.entries(ctx.config.dataset) if e["run_id"] == ctx.run_id]


class CountingStage:
    """A fake privacy-spending stage: writes one output file, reports one Gaussian event."""

    def __init__(self, ctx: RunContext, stage: str, sigma: float, output: str = "released/out.json") -> None:
        self.ctx, self.stage, self.sigma, self.output = ctx, stage, sigma, output
        self.calls = 0

    def __call__(self, wh) -> StageResult:
        self.calls += 1
        with self.ctx.release.writing(self.output) as tmp:
            tmp.write_text(json.dumps({"draw": self.calls}))
        return StageResult(
            events=[PrivacyEvent(stage=self.stage, mechanism="gaussian", sigma=self.sigma)],
            report={"calls": self.calls},
        )


def test_outputs_and_marker_are_persisted_before_the_ledger_commit(tmp_path, monkeypatch):
    ctx = RunContext(prepare(make_config(tmp_path)))
    stage = CountingStage(ctx, "dpne", sigma=gaussian_sigma(1.0, 1e-7))
    seen = {}
    original = Ledger.record

    def spy(self, dataset, run_id, name, epsilon, delta, events):
        seen["output"] = (ctx.release.root / stage.output).exists()
        seen["marker"] = (ctx.release.root / "report.parts" / "dpne.json").exists()
        return original(self, dataset, run_id, name, epsilon, delta, events)

    monkeypatch.setattr(Ledger, "record", spy)
    spend_once(ctx, "dpne", [stage.output], stage)
    assert seen == {"output": True, "marker": True}


def test_retry_reuses_outputs_without_new_noise_or_second_charge(tmp_path):
    ctx = RunContext(prepare(make_config(tmp_path)))
    stage = CountingStage(ctx, "dpne", sigma=gaussian_sigma(2.0, 1e-7))
    first = spend_once(ctx, "dpne", [stage.output], stage)
    second = spend_once(ctx, "dpne", [stage.output], stage)
    assert stage.calls == 1  # no second noise draw
    assert first["reused"] is False and second["reused"] is True
    assert second["epsilon"] == first["epsilon"]
    assert json.loads((ctx.release.root / stage.output).read_text()) == {"draw": 1}
    entries = ledger_entries(ctx)
    assert len(entries) == 1 and entries[0]["epsilon"] == pytest.approx(first["epsilon"])


def test_crash_after_outputs_but_before_commit_is_recovered_by_the_retry(tmp_path, monkeypatch):
    ctx = RunContext(prepare(make_config(tmp_path)))
    stage = CountingStage(ctx, "dpne", sigma=gaussian_sigma(1.0, 1e-7))

    def crash(*args, **kwargs):
        raise OSError("simulated crash before the ledger commit")

    original = Ledger.record
    monkeypatch.setattr(Ledger, "record", crash)
    with pytest.raises(OSError):
        spend_once(ctx, "dpne", [stage.output], stage)
    monkeypatch.setattr(Ledger, "record", original)  # (not undo(): it would drop own_ledger too)
    assert ledger_entries(ctx) == []
    result = spend_once(ctx, "dpne", [stage.output], stage)  # the retry
    assert stage.calls == 1 and result["reused"] is True
    assert len(ledger_entries(ctx)) == 1  # charged exactly once, for the noise drawn once


def test_stage_that_does_not_write_its_outputs_is_not_charged(tmp_path):
    ctx = RunContext(prepare(make_config(tmp_path)))

    def lazy(wh):
        return StageResult(events=[PrivacyEvent(stage="dpne", mechanism="gaussian", sigma=3.0)], report={})

    with pytest.raises(RuntimeError, match="did not write"):
        spend_once(ctx, "dpne", ["released/missing.parquet"], lazy)
    assert ledger_entries(ctx) == []
    assert "dpne" not in read_parts(ctx)


def test_sub_stages_are_charged_the_increment_of_the_composition(tmp_path):
    config = make_config(tmp_path, epsilon=10.0, delta=1e-6)
    ctx = RunContext(prepare(config))
    sigmas = [2.0, 2.5, 3.0]
    for k, sigma in enumerate(sigmas, start=1):
        stage = CountingStage(ctx, f"dpne.k{k}", sigma, output=f"released/k{k}.json")
        spend_once(ctx, f"dpne.k{k}", [stage.output], stage)
    entries = ledger_entries(ctx)
    events = [PrivacyEvent(stage="dpne", mechanism="gaussian", sigma=s) for s in sigmas]
    composed = Accountant(events).total_epsilon(config.delta)
    assert sum(e["epsilon"] for e in entries) == pytest.approx(composed, rel=1e-9)
    assert composed < sum(
        Accountant([e]).total_epsilon(config.delta) for e in events
    )  # not basic composition
    assert sum(e["delta"] for e in entries) == pytest.approx(config.delta)  # the parent's delta, charged once


def test_pure_epsilon_stage_is_charged_its_epsilon_sum_and_no_delta(tmp_path):
    """A Laplace-only stage uses no delta: the ledger gets (sum of epsilons, 0)."""
    config = make_config(tmp_path, epsilon=2.0, delta=1e-6, stage_budget={"dpne": 0.5, "synth": 0.5})
    ctx = RunContext(prepare(config))
    events = [PrivacyEvent(stage="synth", mechanism="laplace", epsilon=0.4, count=2)]

    def compute(wh) -> StageResult:
        with ctx.release.writing("released/synth.json") as tmp:
            tmp.write_text("{}")
        return StageResult(events=events, report={})

    spend_once(ctx, "synth", ["released/synth.json"], compute)
    (entry,) = ledger_entries(ctx)
    assert entry["epsilon"] == pytest.approx(0.8) and entry["delta"] == 0.0


def test_overspending_stage_is_refused_before_commit(tmp_path):
    ctx = RunContext(prepare(make_config(tmp_path, epsilon=0.5)))
    stage = CountingStage(ctx, "dpne", sigma=gaussian_sigma(2.0, 1e-7))  # calibrated for eps 2 > 0.5
    with pytest.raises(RuntimeError, match="budget"):
        spend_once(ctx, "dpne", [stage.output], stage)
    assert ledger_entries(ctx) == []


# -- prepare -------------------------------------------------------------------------------------
def test_prepare_fixes_run_id_and_stages_parameters(tmp_path):
    config = prepare(make_config(tmp_path))
    assert config.run_id
    parts = read_parts(RunContext(config))
    assert parts["parameters"]["run_id"] == config.run_id
    assert parts["parameters"]["parameters"]["epsilon"] == config.epsilon


def test_prepare_refuses_a_run_over_the_lifetime_budget_before_staging(tmp_path):
    first = RunContext(prepare(make_config(tmp_path, epsilon=1.0, delta=1e-7, lifetime_epsilon=1.5)))
    stage = CountingStage(first, "dpne", sigma=gaussian_sigma(1.0, 1e-7))
    spend_once(first, "dpne", [stage.output], stage)
    second = make_config(tmp_path, epsilon=1.0, delta=1e-7, lifetime_epsilon=1.5, run_id="second")
    with pytest.raises(BudgetError, match="lifetime"):
        prepare(second)
    assert not RunContext(second).release.staging.exists()
    # A retried prepare of the first run does not count its own spend twice.
    prepare(first.config)


def test_prepare_refuses_a_published_run_id(tmp_path):
    ctx = RunContext(prepare(make_config(tmp_path, run_id="once")))
    _pass_validation_and_report(ctx)
    publish_run(ctx)
    with pytest.raises(ConfigError, match="already published"):
        prepare(ctx.config)


# -- publication ---------------------------------------------------------------------------------
def _pass_validation_and_report(ctx: RunContext) -> None:
    record_part(ctx, "validation", {"success": True})
    ctx.release.path("report.json").write_text("{}")


def test_publish_requires_validation_and_report(tmp_path):
    ctx = RunContext(prepare(make_config(tmp_path, run_id="r1")))
    with pytest.raises(RuntimeError, match="validation"):
        publish_run(ctx)
    record_part(ctx, "validation", {"success": False})
    with pytest.raises(RuntimeError, match="validation"):
        publish_run(ctx)
    record_part(ctx, "validation", {"success": True})
    with pytest.raises(RuntimeError, match="report"):
        publish_run(ctx)
    ctx.release.path("report.json").write_text("{}")
    final = publish_run(ctx)
    assert final == ctx.release.final and final.is_dir() and not ctx.release.staging.exists()
    assert (Path(ctx.config.out) / "runtest" / "latest").resolve() == final.resolve()
    assert publish_run(ctx) == final  # idempotent (a retried publish task)


@dataclass
class FakeStep:
    name: str
    run: Callable[..., dict]


def _fake_plan(fail_at: str | None):
    def plan(config, baseline=None, baseline_k=None):
        def stage(name):
            def fn(ctx, **_):
                if name == fail_at:
                    raise RuntimeError(f"stage {name} failed")
                if name == "validation":
                    record_part(ctx, "validation", {"success": True})
                if name == "report":
                    ctx.release.path("report.json").write_text(json.dumps({"run_id": ctx.run_id}))
                with ctx.release.writing("released", f"{name}.txt") as tmp:
                    tmp.write_text(name)
                return {"stage": name, "secret_count": 42, "released_rows": 1}

            return fn

        return [FakeStep(n, stage(n)) for n in ("ingest", "dpne.k1", "validation", "report")]

    return plan


def test_failed_run_leaves_latest_on_the_previous_release(tmp_path, monkeypatch):
    events = []
    monkeypatch.setattr(run_module, "release_steps", _fake_plan(None))
    ok = run_release(make_config(tmp_path, run_id="good"), on_stage=lambda *a: events.append(a[:2]))
    latest = Path(tmp_path / "out" / "runtest" / "latest")
    assert latest.resolve() == Path(ok["release"]).resolve()
    assert ("publish", "done") in events
    assert all("secret_count" not in s for s in ok["stages"].values())  # only public summary keys
    assert set(read_timings(RunContext(make_config(tmp_path, run_id="good")))) == {
        "ingest",
        "dpne.k1",
        "validation",
        "report",
    }

    for failing in ("dpne.k1", "report"):
        monkeypatch.setattr(run_module, "release_steps", _fake_plan(failing))
        bad = make_config(tmp_path, run_id=f"bad-{failing}")
        with pytest.raises(RuntimeError, match=f"stage {failing} failed"):
            run_release(bad)
        assert latest.resolve() == Path(ok["release"]).resolve()  # the previous release stays latest
        assert not RunContext(bad).release.final.exists()  # nothing half-published
        assert RunContext(bad).release.staging.is_dir()  # kept for inspection


def test_two_datasets_in_one_out_keep_separate_latests(tmp_path, monkeypatch):
    """A run of another dataset into the same OUT publishes under OUT/<its dataset>/ and leaves
    this dataset's latest where it was (issue 28, item 2)."""
    from dpngram.release.publish import release_asset_metadata

    monkeypatch.setattr(run_module, "release_steps", _fake_plan(None))
    out = tmp_path / "out"
    chats = run_release(make_config(tmp_path, dataset="chats", run_id="c1"))
    mails = run_release(make_config(tmp_path, dataset="mails", run_id="m1"))
    assert Path(chats["release"]) == out / "chats" / "runs" / "c1"
    assert Path(mails["release"]) == out / "mails" / "runs" / "m1"
    assert (out / "chats" / "latest").resolve() == out / "chats" / "runs" / "c1"
    assert (out / "mails" / "latest").resolve() == out / "mails" / "runs" / "m1"
    assert os.readlink(out / "mails" / "latest") == str(Path("runs") / "m1")  # relative: OUT can move
    assert not (out / "latest").exists() and not (out / "runs").exists()  # no shared latest any more
    # a newer run of one dataset moves its own latest only
    run_release(make_config(tmp_path, dataset="chats", run_id="c2"))
    assert (out / "chats" / "latest").resolve().name == "c2"
    assert (out / "mails" / "latest").resolve().name == "m1"
    assert release_asset_metadata(out / "mails" / "latest")["release"]["release"] == str(
        out / "mails" / "runs" / "m1"
    )


@pytest.mark.parametrize("name", ["runs", "latest", "../x", ".hidden", "a/b", ""])
def test_dataset_names_must_be_safe_directory_names(tmp_path, name):
    with pytest.raises(ConfigError, match="dataset"):
        make_config(tmp_path, dataset=name)


def test_an_out_in_the_old_shared_layout_is_refused_with_what_to_move(tmp_path):
    """Releases of an older dpngram (OUT/runs, OUT/latest) are refused before anything is reserved,
    in one line naming the dataset found in their reports and the command that moves them."""
    out = tmp_path / "out"
    old = out / "runs" / "old-run"
    old.mkdir(parents=True)
    (old / "report.json").write_text(json.dumps({"run_id": "old-run", "dataset": "chats"}))
    (out / "latest").symlink_to(Path("runs") / "old-run")
    config = make_config(tmp_path, dataset="chats", run_id="new")
    with pytest.raises(ConfigError) as err:
        prepare(config)
    message = str(err.value)
    assert "\n" not in message and "old shared layout" in message and "dataset 'chats'" in message
    assert f"mv {out / 'runs'} {out / 'latest'} {out / 'chats'}/" in message
    assert not RunContext(config).release.staging.exists()
    assert ledger_entries(RunContext(config)) == []
    # doing what the message says makes the next run pass, and the old release is the dataset's
    (out / "chats").mkdir()
    for name in ("runs", "latest"):
        os.replace(out / name, out / "chats" / name)
    assert (out / "chats" / "latest").resolve() == out / "chats" / "runs" / "old-run"
    prepare(config)
    assert RunContext(config).release.staging.is_dir()


# -- helpers -------------------------------------------------------------------------------------
def test_run_id_from_airflow_ids():
    rid = run_id_from("manual__2026-11-21T21:29:09.606192+00:00")
    assert rid == "manual__2026-11-21T21_29_09.606192_00_00"
    assert RunConfig.build(input="x", out="y", run_id=rid).run_id == rid
    assert run_id_from("scheduled__2026-01-01T00:00:00+00:00") != run_id_from(
        "scheduled__2026-01-02T00:00:00+00:00"
    )
    with pytest.raises(ConfigError):
        run_id_from(":::")


def test_public_summary_keeps_only_public_keys():
    summary = public_summary(
        {"stage": "dpne.k2", "released_rows": 10, "epsilon": 1.0, "n_valid": 123, "users": 7, "paths": ["a"]}
    )
    assert summary == {"stage": "dpne.k2", "released_rows": 10, "epsilon": 1.0, "paths": ["a"]}
    assert set(summary) <= set(PUBLIC_SUMMARY_KEYS)
    assert public_summary(None) == {}


def test_stage_timer_records_only_successful_stages(tmp_path):
    ctx = RunContext(prepare(make_config(tmp_path)))
    with stage_timer(ctx, "fast"):
        pass
    with pytest.raises(ValueError), stage_timer(ctx, "broken"):
        raise ValueError("boom")
    timings = read_timings(ctx)
    assert set(timings) == {"fast"} and timings["fast"] >= 0


def test_a_missing_public_corpus_is_refused_before_anything_is_spent(tmp_path):
    """With a stage that reads the public corpus, a wrong path is a refusal at the pre-check (the
    DAG's privacy_precheck), not a failure after the vocabulary and k-grams have spent budget."""
    missing = str(tmp_path / "no-such-public.txt.gz")
    with pytest.raises(ConfigError, match="^public: .* does not exist"):
        prepare(make_config(tmp_path, public=missing, stage_budget={"dpne": 0.5, "bayes": 0.5}))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.staging"))
    # a run that reads no public text is not refused for it
    assert prepare(make_config(tmp_path, public=missing, stage_budget={"dpne": 1.0})).run_id


@pytest.mark.parametrize(
    ("split", "extra", "needs"),
    [
        ({"bayes": 1.0}, {}, "the DPSU vocabulary"),
        ({"lm_counts": 0.6, "synth": 0.4}, {}, "the DPSU vocabulary"),
        ({"triehh": 0.5, "synth": 0.5}, {"vocabulary_method": "triehh"}, "the k-gram levels 2..5"),
    ],
)
def test_a_split_without_a_dpne_share_is_refused_before_anything_is_spent(tmp_path, split, extra, needs):
    """Every run releases the vocabulary (and the k-gram levels) from the dpne share: a split without
    one used to be accepted and then stop at the vocabulary, after ingest. Now the pre-check refuses
    it with a split that would run, and reserves nothing."""
    config = make_config(tmp_path, stage_budget=split, **extra)
    with pytest.raises(ConfigError, match="^stage_budget: .* has no 'dpne' share") as refused:
        prepare(config)
    message = str(refused.value)
    assert needs in message
    example = json.loads(message.rsplit("for example ", 1)[1])
    assert example["dpne"] > 0 and set(example) == {"dpne", *split}
    assert sum(example.values()) <= 1 + 1e-9
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.staging"))
    assert prepare(make_config(tmp_path, stage_budget=example, **extra)).run_id  # the example runs


def test_input_problem_is_decided_from_the_path_alone(tmp_path):
    """What ``privacy_precheck`` refuses before reserving anything (issue 28, item 3)."""
    from dpngram.release.publish import input_problem

    def config(path: str, **kw):
        return RunConfig.build(input=path, out=str(tmp_path / "out"), **kw)

    missing = tmp_path / "nowhere.jsonl.gz"
    assert input_problem(config(str(missing))) == f"input: {missing} does not exist"
    present = tmp_path / "in.jsonl"
    present.write_text("")
    assert input_problem(config(str(present))) is None
    assert input_problem(config(f"file://{present}")) is None
    assert "only the Spark engine" in input_problem(config("hdfs://nn/in.parquet"))
    assert input_problem(config("hdfs://nn/in.parquet", engine="spark")) is None
