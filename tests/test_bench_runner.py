"""``make bench``'s runner (benchmarks/run_all.py): every benchmark is a step, a failed or
interrupted run resumes where it stopped on the same commit and starts over on another, and the
record says what ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_all  # noqa: E402  (benchmarks/ is not a package)


def test_the_steps_are_the_platform_test_and_every_bench_script():
    steps = run_all.bench_steps("echo platform")
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*_bench.py"))
    assert [s.name for s in steps] == [run_all.PLATFORM_STEP, *scripts]
    # each script runs with no arguments, as `make bench` always ran them
    assert all(s.command[1:] == [f"benchmarks/{s.name}"] for s in steps[1:])
    assert steps[0].command == ["bash", "-c", "echo platform"]


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """run_all with its state under tmp_path and three fake steps; the second fails until the file
    ``fixed`` exists. Each step appends its name to ``ran`` when it runs."""
    ran = tmp_path / "ran"

    def step(name: str, script: str) -> run_all.Step:
        return run_all.Step(
            name, [sys.executable, "-c", f"open({str(ran)!r}, 'a').write({name!r} + '\\n')\n{script}"]
        )

    fixed = tmp_path / "fixed"
    steps = [
        step("one", "print('one done')"),
        step("two", f"import os, sys; sys.exit(0 if os.path.exists({str(fixed)!r}) else 3)"),
        step("three", "print('three done')"),
    ]
    monkeypatch.setattr(run_all, "bench_steps", lambda command: steps)
    monkeypatch.setattr(run_all, "PROGRESS", tmp_path / "progress.json")
    monkeypatch.setattr(run_all, "LOGS", tmp_path / "logs")
    monkeypatch.setattr(run_all, "RECORD", tmp_path / "bench_run.json")
    monkeypatch.setattr(run_all, "RESULTS", tmp_path)
    monkeypatch.setattr(run_all, "ROOT", tmp_path)
    head = {"commit": "a" * 40}
    monkeypatch.setattr(run_all, "code_identity", lambda: (head["commit"], False))

    def runs() -> list[str]:
        names = ran.read_text().split() if ran.exists() else []
        ran.unlink(missing_ok=True)
        return names

    def record() -> dict:
        return json.loads((tmp_path / "bench_run.json").read_text())

    return run_all, runs, record, fixed, head


def test_a_failed_step_is_reported_and_only_it_runs_again(runner, capsys):
    run_all, runs, record, fixed, _ = runner
    assert run_all.main([]) == 1
    assert runs() == ["one", "two", "three"]  # a failure does not stop the steps after it
    assert "failed benchmarks: two" in capsys.readouterr().err
    first = record()
    assert [s["status"] for s in first["steps"]] == ["passed", "failed (3)", "passed"]
    assert not first["complete"]
    assert (run_all.LOGS / "one.log").read_text().splitlines()[-1] == "one done"

    fixed.touch()
    assert run_all.main([]) == 0
    assert runs() == ["two"]
    assert "resuming at aaaaaaaaaa: 2 of 3 steps passed already" in capsys.readouterr().out
    second = record()
    assert second["complete"] and second["invocations"] == 2
    assert [s["invocation"] for s in second["steps"]] == [1, 2, 1]
    assert second["git_commit"] == "a" * 40


def test_another_commit_or_restart_starts_over(runner, capsys):
    run_all, runs, record, fixed, head = runner
    fixed.touch()
    assert run_all.main([]) == 0
    runs()
    assert run_all.main([]) == 0  # nothing left to do on the same commit
    assert runs() == []
    head["commit"] = "b" * 40
    assert run_all.main([]) == 0
    assert runs() == ["one", "two", "three"]
    assert "the progress was recorded on aaaaaaaaaa, HEAD is bbbbbbbbbb" in capsys.readouterr().out
    assert record()["invocations"] == 1
    assert run_all.main(["--restart"]) == 0
    assert runs() == ["one", "two", "three"]
    assert run_all.main(["--only", "three"]) == 0
    assert runs() == ["three"]


def test_uncommitted_code_never_resumes(runner, monkeypatch, capsys):
    run_all, runs, _, fixed, _ = runner
    fixed.touch()
    assert run_all.main([]) == 0
    runs()
    monkeypatch.setattr(run_all, "code_identity", lambda: ("a" * 40, True))
    assert run_all.main([]) == 0
    assert runs() == ["one", "two", "three"]
    assert "uncommitted changes" in capsys.readouterr().out


def _stopped_at_two_then_resumed(runner, monkeypatch, stopping, real) -> None:
    """With ``stopping`` as the step runner the run stops in step two (recorded as interrupted);
    the next run, with the ``real`` one, starts with step two."""
    run_all, runs, record, _, _ = runner
    monkeypatch.setattr(run_all, "run_step", stopping)
    assert run_all.main([]) == 130
    assert runs() == ["one"]
    assert [s["status"] for s in record()["steps"]] == ["passed", "interrupted", "not run"]
    monkeypatch.setattr(run_all, "run_step", real)
    assert run_all.main([]) == 0
    assert runs() == ["two", "three"]


def test_an_interrupted_step_is_where_the_next_run_starts(runner, monkeypatch):
    run_all, runs, record, fixed, _ = runner
    fixed.touch()
    real = run_all.run_step

    def interrupt_two(step, log):
        if step.name == "two":
            raise KeyboardInterrupt
        return real(step, log)

    _stopped_at_two_then_resumed(runner, monkeypatch, interrupt_two, real)


def test_list_runs_nothing(runner, capsys):
    run_all, runs, _, _, _ = runner
    assert run_all.main(["--list"]) == 0
    assert runs() == []
    out = capsys.readouterr().out
    assert all(name in out for name in ("one", "two", "three"))


def test_an_unknown_step_is_refused_with_the_names(runner, capsys):
    run_all, _, _, _, _ = runner
    with pytest.raises(SystemExit):
        run_all.main(["--only", "four"])
    assert "no step named four; the steps: one, three, two" in capsys.readouterr().err


def test_a_step_stopped_by_a_signal_is_interrupted_not_failed(runner, monkeypatch):
    """A background ``make bench`` may ignore SIGINT itself, so a stop reaches only the step: the
    step's death by SIGINT or SIGTERM counts as an interruption, and the next run starts with it."""
    run_all, runs, record, fixed, _ = runner
    fixed.touch()
    real = run_all.run_step

    def killed(step, log):
        if step.name == "two":
            stopped = run_all.Step(
                "two", [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
            )
            return real(stopped, log)
        return real(step, log)

    _stopped_at_two_then_resumed(runner, monkeypatch, killed, real)


def test_the_time_left_counts_only_steps_the_last_run_timed():
    steps = [run_all.Step(n, ["true"]) for n in ("a", "b", "c")]
    assert run_all._time_left(steps, {}) == ""
    every = {"a": 60.0, "b": 3000.0, "c": 600.0}
    assert run_all._time_left(steps, every) == "; about 61 min left by the last recorded run"
    some = {"a": 50.0, "b": 30.0}
    assert run_all._time_left(steps, some) == "; 2 of the 3 steps left took 80 s in the last recorded run"


def test_stopping_the_run_stops_the_steps_whole_process_group(runner, monkeypatch, tmp_path):
    """A step's own children (the platform test's servers, a benchmark's pipeline processes) go
    with it when the run is stopped: SIGINT to the step's group, SIGKILL after the grace period."""
    import os
    import signal
    import threading
    import time

    run_all, runs, record, fixed, _ = runner
    fixed.touch()
    monkeypatch.setattr(run_all, "STOP_GRACE", 5)
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(300)\n"
    )
    real = run_all.run_step

    def long_two(step, log):
        if step.name == "two":
            return real(run_all.Step("two", [sys.executable, "-c", script]), log)
        return real(step, log)

    monkeypatch.setattr(run_all, "run_step", long_two)

    def stop_when_started() -> None:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # the runner's handler turns it into a stop

    threading.Thread(target=stop_when_started, daemon=True).start()
    assert run_all.main([]) == 130
    assert [s["status"] for s in record()["steps"]] == ["passed", "interrupted", "not run"]
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the step's child outlived the stop")
