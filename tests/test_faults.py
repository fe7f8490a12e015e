"""Trust under faults (issue 17): a resume cannot mix two inputs or budgets, a stage never draws
its noise twice, the ledger is charged before the draw, and a dataset's lifetime budget holds
across runs, flags and concurrent runs. Fast: fake stages on a small warehouse, no Airflow."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from dpngram.config import RunConfig
from dpngram.core.accounting import PrivacyEvent
from dpngram.core.errors import BudgetError, ResumeError
from dpngram.core.noise import NoiseSource
from dpngram.release import spend as spend_module
from dpngram.release.context import RunContext, StageResult, read_parts
from dpngram.release.ledger import Ledger
from dpngram.release.publish import prepare
from dpngram.release.spend import spend_once

OUTPUT = "released/noisy.json"


def write_input(path: Path, text: str = '{"user_id": "u1", "text": "hello there"}\n') -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def make_config(tmp_path: Path, **overrides) -> RunConfig:
    values = {
        "input": str(tmp_path / "in.jsonl"),
        "out": str(tmp_path / "out"),
        "warehouse": str(tmp_path / "wh.duckdb"),
        "dataset": "faults",
        **overrides,
    }
    if not Path(values["input"]).exists():
        write_input(Path(values["input"]))
    return RunConfig.build(**values)


def entries(ctx: RunContext) -> list[dict]:
    with ctx.warehouse() as wh:
        con = wh.con
        rows = con.execute(
            "SELECT stage, epsilon, delta, status FROM ledger.privacy_spend WHERE run_id = ?", [ctx.run_id]
        ).fetchall()
    return [{"stage": r[0], "epsilon": r[1], "delta": r[2], "status": r[3]} for r in rows]


class NoisyStage:
    """A fake stage that draws real noise (a discrete Laplace) and writes it: a Laplace event of
    epsilon 1 (the run's epsilon is 4, so it fits its share)."""

    def __init__(self, ctx: RunContext, stage: str = "dpne") -> None:
        self.ctx, self.stage, self.calls = ctx, stage, 0

    def __call__(self, wh) -> StageResult:
        self.calls += 1
        draw = int(NoiseSource.secure().discrete_laplace(1.0, 1)[0])
        with self.ctx.release.writing(OUTPUT) as tmp:
            tmp.write_text(json.dumps({"draw": draw, "call": self.calls}))
        return StageResult([PrivacyEvent(self.stage, "laplace", epsilon=1.0)], {"calls": self.calls})


# -- 1. a run's identity -----------------------------------------------------------------------
def test_resume_with_another_input_file_is_refused_naming_it(tmp_path):
    first = make_config(tmp_path, run_id="r1")
    prepare(first)
    other = write_input(tmp_path / "other.jsonl", '{"user_id": "u2", "text": "something else"}\n')
    with pytest.raises(ResumeError) as err:
        prepare(first.with_values(input=str(other)))
    message = str(err.value)
    assert "\n" not in message and "input" in message and "--run-id" in message
    assert "something" not in message  # names what changed, never the content


def test_resume_after_the_input_changed_in_place_is_refused(tmp_path):
    config = make_config(tmp_path, run_id="r1")
    prepare(config)
    write_input(Path(config.input), '{"user_id": "u1", "text": "hello these"}\n')  # same size
    with pytest.raises(ResumeError, match=r"input content"):
        prepare(config)
    write_input(Path(config.input), '{"user_id": "u1", "text": "hello there, longer"}\n')
    with pytest.raises(ResumeError, match=r"input size"):
        prepare(config)


def test_resume_with_another_epsilon_is_refused_by_name(tmp_path):
    config = make_config(tmp_path, run_id="r1")
    prepare(config)
    with pytest.raises(ResumeError, match=r"epsilon 4\.0 -> 2\.0"):
        prepare(config.with_values(epsilon=2.0))


def test_resume_with_the_same_input_and_parameters_is_accepted(tmp_path):
    config = make_config(tmp_path, run_id="r1")
    prepare(config)
    prepare(config)
    prepare(config.with_values(memory_limit="1GB", threads=1))  # resources may change


def test_a_large_input_is_fingerprinted_by_its_ends_and_mtime(tmp_path, monkeypatch):
    from dpngram.release import identity

    monkeypatch.setattr(identity, "FULL_HASH_BYTES", 0)
    monkeypatch.setattr(identity, "BLOCK_BYTES", 8)
    config = make_config(tmp_path, run_id="r1")
    prepare(config)
    path = Path(config.input)
    text = path.read_text()
    path.write_text(text[:20] + text[20:25].upper() + text[25:])  # a change in the middle
    with pytest.raises(ResumeError, match="modification time"):
        prepare(config)


# -- 2. spend once, never redraw ------------------------------------------------------------------
def test_the_ledger_is_charged_before_the_draw_and_finalized_after(tmp_path, monkeypatch):
    ctx = RunContext(prepare(make_config(tmp_path)))
    stage = NoisyStage(ctx)
    seen = []
    original = Ledger.charge_pending

    def spy(self, *args, **kwargs):
        seen.append((ctx.release.root / OUTPUT).exists())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "charge_pending", spy)
    spend_once(ctx, "dpne", [OUTPUT], stage)
    assert seen == [False]  # charged before the noisy output existed
    (entry,) = entries(ctx)
    assert entry["status"] == "final" and entry["epsilon"] == pytest.approx(1.0)


def test_a_crash_after_drawing_leaves_an_over_charge_never_an_under_charge(tmp_path):
    ctx = RunContext(prepare(make_config(tmp_path)))

    def crash_after_drawing(wh):
        NoiseSource.secure().discrete_laplace(1.0, 3)
        raise OSError("simulated crash after the draw")

    with pytest.raises(OSError):
        spend_once(ctx, "dpne", [OUTPUT], crash_after_drawing)
    (entry,) = entries(ctx)
    # pending at the run's whole remaining budget: at least any charge the stage could finalize
    assert entry["status"] == "pending" and entry["epsilon"] == pytest.approx(ctx.config.epsilon)
    assert entry["delta"] == pytest.approx(ctx.config.delta)


def test_a_crash_before_drawing_charges_nothing_and_the_retry_runs(tmp_path):
    ctx = RunContext(prepare(make_config(tmp_path)))

    def crash_in_sql(wh):
        raise OSError("simulated crash before any draw")

    with pytest.raises(OSError):
        spend_once(ctx, "dpne", [OUTPUT], crash_in_sql)
    assert entries(ctx) == []
    stage = NoisyStage(ctx)
    assert spend_once(ctx, "dpne", [OUTPUT], stage)["reused"] is False and stage.calls == 1


def test_a_crash_between_the_noisy_output_and_its_marker_is_not_redrawn(tmp_path, monkeypatch):
    ctx = RunContext(prepare(make_config(tmp_path)))
    stage = NoisyStage(ctx)

    def crash(*args, **kwargs):
        raise OSError("simulated kill before the marker")

    monkeypatch.setattr(spend_module, "write_part", crash)
    with pytest.raises(OSError):
        spend_once(ctx, "dpne", [OUTPUT], stage)
    monkeypatch.undo()
    persisted = (ctx.release.root / OUTPUT).read_text()
    with pytest.raises(ResumeError) as err:
        spend_once(ctx, "dpne", [OUTPUT], stage)  # the retry
    assert stage.calls == 1  # the noise was not drawn again
    assert (ctx.release.root / OUTPUT).read_text() == persisted
    assert "\n" not in str(err.value) and "new --run-id" in str(err.value)
    (entry,) = entries(ctx)
    assert entry["status"] == "pending" and entry["epsilon"] >= 1.0  # over-charged, not refunded


def test_an_output_lost_after_the_stage_finished_is_not_redrawn(tmp_path):
    ctx = RunContext(prepare(make_config(tmp_path)))
    stage = NoisyStage(ctx)
    spend_once(ctx, "dpne", [OUTPUT], stage)
    (ctx.release.root / OUTPUT).unlink()
    with pytest.raises(ResumeError):
        spend_once(ctx, "dpne", [OUTPUT], stage)
    assert stage.calls == 1
    assert [e["status"] for e in entries(ctx)] == ["final"]


def test_a_complete_stage_is_reused_and_charged_once(tmp_path):
    ctx = RunContext(prepare(make_config(tmp_path)))
    stage = NoisyStage(ctx)
    spend_once(ctx, "dpne", [OUTPUT], stage)
    assert spend_once(ctx, "dpne", [OUTPUT], stage)["reused"] is True
    assert stage.calls == 1 and len(entries(ctx)) == 1
    assert read_parts(ctx)["dpne"]["privacy"]["charged_epsilon"] == pytest.approx(1.0)


# -- 3. lifetime budgets belong to the dataset -----------------------------------------------------
def _spend_whole_run(ctx: RunContext) -> None:
    """Charge the run's whole epsilon (as a real run with stage_budget dpne=1 does)."""
    with ctx.warehouse() as wh:
        Ledger(wh.con).record(
            ctx.config.dataset, ctx.run_id, "dpne", ctx.config.epsilon, ctx.config.delta, []
        )


def test_a_later_run_without_the_flag_is_held_to_the_stored_lifetime(tmp_path):
    first = RunContext(prepare(make_config(tmp_path, epsilon=3.0, lifetime_epsilon=5.0, run_id="a")))
    _spend_whole_run(first)
    with pytest.raises(BudgetError, match=r"lifetime 5"):
        prepare(make_config(tmp_path, epsilon=3.0, run_id="b"))  # no --lifetime-epsilon
    prepare(make_config(tmp_path, epsilon=2.0, run_id="c"))  # fits: 3 + 2 <= 5


def test_a_run_cannot_change_the_stored_lifetime_only_the_budget_command_can(tmp_path, capsys):
    from dpngram.cli import main

    first = RunContext(prepare(make_config(tmp_path, epsilon=3.0, lifetime_epsilon=5.0, run_id="a")))
    _spend_whole_run(first)
    with pytest.raises(BudgetError, match=r"dpngram budget --dataset faults --lifetime-epsilon"):
        prepare(make_config(tmp_path, epsilon=3.0, lifetime_epsilon=8.0, run_id="b"))
    warehouse = str(tmp_path / "wh.duckdb")
    assert main(["budget", "--dataset", "faults", "--warehouse", warehouse, "--lifetime-epsilon", "8"]) == 0
    assert "8" in capsys.readouterr().out
    prepare(make_config(tmp_path, epsilon=3.0, run_id="b"))  # 3 + 3 <= 8
    # lowering below what is already committed is refused
    assert main(["budget", "--dataset", "faults", "--warehouse", warehouse, "--lifetime-epsilon", "4"]) == 2
    assert "below" in capsys.readouterr().err


def test_two_runs_prepared_before_either_spends_cannot_both_pass(tmp_path):
    """The check-then-spend race through the library API: prepare reserves the run's budget."""
    a = RunContext(prepare(make_config(tmp_path, epsilon=3.0, lifetime_epsilon=5.0, run_id="a")))
    with pytest.raises(BudgetError):
        prepare(make_config(tmp_path, epsilon=3.0, lifetime_epsilon=5.0, run_id="b"))
    _spend_whole_run(a)
    with a.warehouse() as wh:
        assert Ledger(wh.con).spent("faults").epsilon <= 5.0


def test_concurrent_runs_cannot_both_pass_the_lifetime_check(tmp_path):
    """Two threads prepare (check + reserve) at once; then each spends its whole run: exactly one
    may run, and the ledger never exceeds the lifetime."""
    make_config(tmp_path)  # writes the input
    barrier = threading.Barrier(4)
    outcomes: dict[str, str] = {}

    def attempt(run_id: str) -> None:
        config = make_config(tmp_path, epsilon=3.0, lifetime_epsilon=5.0, run_id=run_id)
        barrier.wait()
        try:
            ctx = RunContext(prepare(config))
            stage = NoisyStage(ctx)
            spend_once(ctx, "dpne", [OUTPUT], stage)
            _ = stage
            outcomes[run_id] = "ran"
        except BudgetError:
            outcomes[run_id] = "refused"

    threads = [threading.Thread(target=attempt, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(outcomes.values()) == ["ran", "refused", "refused", "refused"]
    ctx = RunContext(make_config(tmp_path, run_id="t0"))
    with ctx.warehouse() as wh:
        ledger = Ledger(wh.con)
        assert ledger.committed("faults").epsilon <= 5.0 * (1 + 1e-12)


def test_a_stage_charge_is_checked_against_the_lifetime_atomically(tmp_path):
    """Even past prepare (a reservation released by `dpngram gc`, or an old ledger), the charge
    before the draw refuses to pass the dataset's lifetime."""
    a = RunContext(prepare(make_config(tmp_path, epsilon=3.0, lifetime_epsilon=5.0, run_id="a")))
    with a.warehouse() as wh:
        ledger = Ledger(wh.con)
        ledger.close_run("a")  # no reservation any more
        ledger.record("faults", "other", "dpne", 3.0, 0.0, [])  # someone else spent 3
    stage = NoisyStage(a)
    with pytest.raises(BudgetError, match="lifetime"):
        spend_once(a, "dpne", [OUTPUT], stage)
    assert stage.calls == 1 and not (a.release.root / OUTPUT).exists()  # refused before the draw
