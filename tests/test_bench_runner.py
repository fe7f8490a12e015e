"""``make bench``'s runner (benchmarks/run_all.py): every benchmark is a step, a failed or
interrupted run resumes where it stopped on the same commit and starts over on another, and the
record says what ran."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_all  # noqa: E402  (benchmarks/ is not a package)


def test_the_steps_are_the_platform_test_and_every_bench_script():
    steps = run_all.bench_steps("echo platform")
    assert steps[0].command == ["bash", "-c", "echo platform"]
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*_bench.py"))
    expected = [run_all.PLATFORM_STEP]
    for script in scripts:
        scenarios = run_all.declared_scenarios(ROOT / "benchmarks" / script)
        expected += [f"{script}:{s}" for s in scenarios] if scenarios else [script]
    assert [s.name for s in steps] == expected
    for step in steps[1:]:
        script, _, scenario = step.name.partition(":")
        # a script runs with no arguments, as `make bench` always ran them, or with one scenario
        assert step.command[1:] == [f"benchmarks/{script}", *([scenario] if scenario else [])]


def test_dpne_bench_runs_as_one_step_per_scenario_of_its_all():
    """dpne_bench's no-argument run takes hours; `make bench` runs its scenarios one step each, the
    same ones ``all`` runs, so that a stopped run resumes at the scenario."""
    import dpne_bench

    scenarios = run_all.declared_scenarios(ROOT / "benchmarks" / "dpne_bench.py")
    assert scenarios == dpne_bench.BENCH_STEPS and len(scenarios) > 1
    assert set(scenarios) <= set(dpne_bench.SCENARIOS)
    ran = []
    args = argparse.Namespace(mode="all", users=None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            dpne_bench,
            "SCENARIOS",
            {n: (lambda a, n=n: ran.append((n, a.users))) for n in dpne_bench.SCENARIOS},
        )
        dpne_bench.run_modes(args)
        all_ran, ran[:] = list(ran), []
        for name in scenarios:
            dpne_bench.run_modes(argparse.Namespace(mode=name, users=None))
    assert all_ran == ran  # the same scenarios with the same --users defaults, alone or in `all`
    assert ("synthetic", 1_000_000) in ran and ("scaling", [100_000, 300_000, 1_000_000]) in ran


def test_each_step_knows_its_own_code():
    """What re-runs a passed step: the shared code, and its script with what it imports from
    benchmarks/ and tests/ (packages whole), never another benchmark's script, nor this runner."""
    steps = {s.name: set(s.paths) for s in run_all.bench_steps("echo platform")}
    shared = {"src", "sql", "dags", "pyproject.toml", "benchmarks/_common.py"}
    assert all(shared <= paths and "benchmarks/run_all.py" not in paths for paths in steps.values())
    assert (
        "benchmarks/dpne" in steps["dpne_bench.py:sotu"] and "benchmarks/dpne" not in steps["bayes_bench.py"]
    )
    assert "benchmarks/bayes_bench.py" in steps["bayes_bench.py"]
    assert not any(p.endswith("_bench.py") for p in steps["bayes_bench.py"] - {"benchmarks/bayes_bench.py"})
    assert "tests/test_airflow_standalone.py" in steps["airflow_overhead_bench.py"]  # its Airflow launcher
    platform = steps[run_all.PLATFORM_STEP]
    assert {"tests/test_platform.py", "tests/platform_harness.py", "docker", "Makefile"} <= platform
    assert "tests/test_bench_runner.py" not in platform


def test_declared_scenarios_must_be_a_tuple_of_names(tmp_path):
    script = tmp_path / "x_bench.py"
    script.write_text("import os\nBENCH_STEPS = ('a', 'b')\n")
    assert run_all.declared_scenarios(script) == ("a", "b")
    script.write_text("BENCH_STEPS = ['a', 1]\n")
    with pytest.raises(ValueError, match="tuple of scenario names"):
        run_all.declared_scenarios(script)
    script.write_text("STEPS = ('a',)\n")
    assert run_all.declared_scenarios(script) == ()


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """run_all in a git repository under tmp_path with three fake steps, each with its own code
    file ``benchmarks/NAME.py`` and the shared ``src/``; the second fails until the file ``fixed``
    exists. Each step appends its name to ``ran`` when it runs. The runner's state (progress,
    logs, record) and those two files are untracked, outside the steps' code."""
    repo = tmp_path
    ran = repo / "ran"

    def step(name: str, script: str) -> run_all.Step:
        command = [sys.executable, "-c", f"open({str(ran)!r}, 'a').write({name!r} + '\\n')\n{script}"]
        return run_all.Step(name, command, ("src", f"benchmarks/{name}.py"))

    fixed = repo / "fixed"
    steps = [
        step("one", "print('one done')"),
        step("two", f"import os, sys; sys.exit(0 if os.path.exists({str(fixed)!r}) else 3)"),
        step("three", "print('three done')"),
    ]
    (repo / "src").mkdir()
    (repo / "src" / "code.py").write_text("x = 1\n")
    (repo / "benchmarks").mkdir()
    for name in ("one", "two", "three"):
        (repo / "benchmarks" / f"{name}.py").write_text(f'"""{name}"""\n\nNAME = {name!r}\n')
    _git(repo, "init", "-q")
    for key, value in (("user.email", "t@example.org"), ("user.name", "t")):
        _git(repo, "config", key, value)
    _git(repo, "add", "src", "benchmarks")
    _git(repo, "commit", "-qm", "code")
    monkeypatch.setattr(run_all, "bench_steps", lambda command: steps)
    monkeypatch.setattr(run_all, "PROGRESS", repo / "progress.json")
    monkeypatch.setattr(run_all, "LOGS", repo / "logs")
    monkeypatch.setattr(run_all, "RECORD", repo / "bench_run.json")
    monkeypatch.setattr(run_all, "RESULTS", repo)
    monkeypatch.setattr(run_all, "ROOT", repo)
    monkeypatch.setattr(run_all, "BENCH_LEDGER", repo / "ledger.duckdb")

    def runs() -> list[str]:
        names = ran.read_text().split() if ran.exists() else []
        ran.unlink(missing_ok=True)
        return names

    def record() -> dict:
        return json.loads((repo / "bench_run.json").read_text())

    def commit(path: str, text: str) -> str:
        (repo / path).write_text(text)
        _git(repo, "add", path)
        _git(repo, "commit", "-qm", f"change {path}")
        return _git(repo, "rev-parse", "HEAD")

    return run_all, runs, record, fixed, commit


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
    assert "2 of 3 steps passed already on the same code" in capsys.readouterr().out
    second = record()
    assert second["complete"] and second["invocations"] == 2
    assert [s["invocation"] for s in second["steps"]] == [1, 2, 1]
    head = _git(run_all.ROOT, "rev-parse", "HEAD")
    assert second["git_commit"] == head and {s["commit"] for s in second["steps"]} == {head}


def test_a_step_runs_again_only_when_its_own_code_changed(runner, capsys):
    """Committing results keeps every step; a change to one step's script re-runs that step; a
    change to the shared code (src/) re-runs them all; each says why."""
    run_all, runs, record, fixed, commit = runner
    fixed.touch()
    assert run_all.main([]) == 0
    assert runs() == ["one", "two", "three"]
    assert run_all.main([]) == 0  # nothing left to do on the same code
    assert runs() == []
    (run_all.ROOT / "results").mkdir()
    commit("results/out.json", "{}\n")
    assert run_all.main([]) == 0
    assert runs() == []
    first = record()["steps"][0]["commit"]
    commit("benchmarks/two.py", "NAME = 'two, fixed'\n")
    capsys.readouterr()
    assert run_all.main([]) == 0
    assert runs() == ["two"]
    out = capsys.readouterr().out
    assert f"two passed before, runs again: its code differs from {first[:10]}'s (benchmarks/two.py)" in out
    commit("src/code.py", "x = 2\n")
    assert run_all.main([]) == 0
    assert runs() == ["one", "two", "three"]


def test_docstrings_and_comments_are_not_code(runner, capsys):
    """Editing a docstring or a comment of a step's Python code, or a Markdown file beside it, keeps
    its result; editing the code
    itself, or adding an untracked module beside it, does not."""
    run_all, runs, _, fixed, commit = runner
    fixed.touch()
    assert run_all.main([]) == 0
    runs()
    commit("benchmarks/one.py", '"""one, better explained"""\n\n# the name\nNAME = "one"  # same value\n')
    commit("src/code.py", '"""the shared code"""\n\nx = 1\n')
    commit("src/README.md", "What the code does.\n")
    assert run_all.main([]) == 0
    assert runs() == []
    (run_all.ROOT / "src" / "extra.py").write_text("y = 1\n")  # untracked: may be imported
    assert run_all.main([]) == 0
    assert runs() == ["one", "two", "three"]
    (run_all.ROOT / "src" / "extra.py").unlink()
    assert run_all.main([]) == 0  # they passed beside an untracked module: not on a commit
    assert runs() == ["one", "two", "three"]
    commit("benchmarks/three.py", "NAME = 'three'\nX = 1\n")
    assert run_all.main([]) == 0
    assert runs() == ["three"]


def test_restart_and_only(runner):
    run_all, runs, _, fixed, _ = runner
    fixed.touch()
    assert run_all.main([]) == 0
    runs()
    assert run_all.main(["--restart"]) == 0
    assert runs() == ["one", "two", "three"]
    assert run_all.main(["--only", "three"]) == 0
    assert runs() == ["three"]


def test_uncommitted_code_never_counts_as_passed(runner, capsys):
    run_all, runs, _, fixed, _ = runner
    fixed.touch()
    assert run_all.main([]) == 0
    runs()
    (run_all.ROOT / "benchmarks" / "three.py").write_text("NAME = 'three, edited'\n")
    head = _git(run_all.ROOT, "rev-parse", "HEAD")[:10]
    assert run_all.main(["--list"]) == 0
    assert f"(runs again: its code differs from {head}'s (benchmarks/three.py))" in capsys.readouterr().out
    assert run_all.main([]) == 0
    assert runs() == ["three"]
    assert "three passed before, runs again: its code differs" in capsys.readouterr().out
    # it passed with uncommitted code: that pass is not kept, even once the code is as before
    assert run_all.main([]) == 0
    assert runs() == ["three"]
    assert "runs again: it ran with uncommitted changes to its code" in capsys.readouterr().out


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


def test_the_steps_charge_the_benchmarks_own_ledger(runner, monkeypatch):
    """Whatever ledger the caller's environment names, a step's runs charge make bench's own."""
    run_all, _, _, _, _ = runner
    monkeypatch.setenv("DPNGRAM_LEDGER", "postgresql://somewhere/real")
    seen = run_all.ROOT / "seen"
    step = run_all.Step(
        "env",
        [sys.executable, "-c", f"import os; open({str(seen)!r}, 'w').write(os.environ['DPNGRAM_LEDGER'])"],
    )
    code, _ = run_all.run_step(step, run_all.ROOT / "env.log")
    assert code == 0 and seen.read_text() == str(run_all.ROOT / "ledger.duckdb")


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


def test_a_record_from_another_machine_resumes_the_run(runner, capsys):
    """A new machine has no local progress; --resume-from the committed record goes on from it."""
    run_all, runs, record, fixed, _ = runner
    assert run_all.main([]) == 1
    runs()
    copied = run_all.ROOT / "committed_bench_run.json"
    copied.write_text(json.dumps(record()))
    run_all.PROGRESS.unlink()  # the next session's machine
    fixed.touch()
    assert run_all.main(["--resume-from", str(copied)]) == 0
    assert runs() == ["two"]
    assert "2 of 3 steps passed already on the same code" in capsys.readouterr().out
    assert record()["complete"] and record()["invocations"] == 2
    assert run_all.main(["--resume-from", str(run_all.ROOT / "missing.json")]) == 0
    assert runs() == ["one", "two", "three"]
    assert "missing.json does not exist" in capsys.readouterr().out


def test_bayes_bench_ingests_into_a_run_the_pre_check_accepts(tmp_path):
    """bayes_bench builds a run only to ingest into; a split the pre-check refuses (as its old
    ``{"bayes": 1.0}`` became on 2026-12-07) stopped `make bench`'s step before any row."""
    import bayes_bench

    from dpngram.config.budget_plan import dpne_share_problem

    args = bayes_bench.parse_args([])
    assert dpne_share_problem(bayes_bench.bench_config(args, str(tmp_path))) is None


def test_bayes_bench_computes_every_methods_row_on_a_small_corpus(tmp_path, monkeypatch):
    """Every method of bayes_bench's rows runs against the product's current mechanisms, the
    NOT-DP brute force included (it reads a per-user table that the run builds only when asked;
    make bench's bayes step failed on its absence). A generated corpus stands in for SOTU."""
    import bayes_bench

    from dpngram.text.sample import write_sample

    monkeypatch.setenv("DPNGRAM_LEDGER", str(tmp_path / "ledger.duckdb"))
    files = write_sample(tmp_path / "sample", n_users=150, seed=3, vocab_size=200, public_sentences=800)
    args = bayes_bench.parse_args(
        ["--private", str(files["users"]), "--public", str(files["public"]), "--vocab", "300", "--reps", "1"]
    )
    run = bayes_bench.run_epsilons(args, [2.0], 0.0)
    (row,) = run["rows"]
    assert row["bruteforce_sensitivity_NOT_DP"] > 0
    for method in bayes_bench.METHODS:
        assert len(row[method]["runs"]) == 1 and row[method]["mean"] >= 0.0, method


def test_a_benchmark_started_directly_charges_the_benchmarks_ledger_not_the_callers(monkeypatch, tmp_path):
    """Run without make bench, a benchmark used to charge whatever ledger the caller had (a real
    one included). Importing _common from a benchmark's or study's process now points the ledger at
    the benchmarks' own file; any other importer (these tests) keeps its own."""
    import _common

    mine = tmp_path / "mine.duckdb"
    monkeypatch.setenv("DPNGRAM_LEDGER", str(mine))
    elsewhere = tmp_path / "tool.py"
    elsewhere.write_text("")
    assert not _common.charge_bench_ledger(str(elsewhere))
    assert not _common.charge_bench_ledger("")
    assert os.environ["DPNGRAM_LEDGER"] == str(mine)
    bench = ROOT / "benchmarks"
    for script in (bench / "noise_bench.py", bench / "studies" / "token_ids_study.py"):
        monkeypatch.setenv("DPNGRAM_LEDGER", str(mine))
        assert _common.charge_bench_ledger(str(script))
        assert os.environ["DPNGRAM_LEDGER"] == str(_common.BENCH_LEDGER)
    assert run_all.BENCH_LEDGER == _common.BENCH_LEDGER


def test_a_benchmark_process_hands_the_benchmarks_ledger_to_the_runs_it_starts(tmp_path):
    """End to end: a process whose main script is a benchmark (here noise_bench.py's path, as
    ``sys.argv[0]``) imports _common and hands the benchmarks' ledger to the processes it starts,
    though the caller set another."""
    bench = ROOT / "benchmarks"
    code = (
        f"import subprocess, sys; sys.argv[0] = {str(bench / 'noise_bench.py')!r}; "
        f"sys.path.insert(0, {str(bench)!r}); import _common; "
        "child = 'import os; print(os.environ.get(' + repr('DPNGRAM_LEDGER') + '))'; "
        "subprocess.run([sys.executable, '-c', child], check=True)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DPNGRAM_LEDGER": str(tmp_path / "mine.duckdb")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == str(bench / ".data" / "ledger.duckdb")


def test_scale_bench_names_its_failed_runs_so_that_its_step_fails():
    """scale_bench used to exit 0 when a measured run or its floor failed, so make bench recorded
    the step as passed with an error row in scale.json. It now names each such run (and exits
    non-zero with them, after writing the rows)."""
    import scale_bench

    ok = {
        "users": 1000,
        "split": "dpne=1",
        "code": "this checkout",
        "exit_code": 0,
        "floor": {"total_seconds": 2.0},
    }
    crashed = {**ok, "users": 3000, "exit_code": 137, "error": ["Killed"]}
    no_floor = {**ok, "users": 2000, "floor": {"error": "trace\nduckdb.OutOfMemoryException: 4GB"}}
    assert scale_bench.failed_runs([ok]) == []
    failed = scale_bench.failed_runs([ok, crashed, no_floor])
    assert len(failed) == 2
    assert failed[0].startswith("3,000 users, dpne=1, this checkout: exit 137") and "Killed" in failed[0]
    assert failed[1].startswith("2,000 users, dpne=1, this checkout: floor") and "OutOfMemory" in failed[1]


def test_scale_bench_finds_a_baselines_stage_timings_in_either_warehouse_layout(tmp_path):
    """A baseline run gets WORK/wh/warehouse.duckdb: a file before 2026-12-06 (operator files beside
    it), a directory since (operator files inside). Its stage seconds were lost in the second case."""
    import scale_bench

    inside = tmp_path / "new" / "wh" / "warehouse.duckdb" / "operator" / "r1" / "timings"
    beside = tmp_path / "old" / "wh" / "operator" / "r1" / "timings"
    for folder in (inside, beside):
        folder.mkdir(parents=True)
    assert scale_bench.timings_dir(tmp_path / "new" / "wh" / "warehouse.duckdb", "r1") == inside
    assert scale_bench.timings_dir(tmp_path / "old" / "wh" / "warehouse.duckdb", "r1") == beside
    assert scale_bench.timings_dir(tmp_path / "old" / "wh", "r1") == beside
