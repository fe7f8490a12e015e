"""Trust under faults (issue 17): a resume cannot mix two inputs or budgets, a stage never draws
its noise twice, the ledger is charged before the draw, and a dataset's lifetime budget holds
across runs, flags, working directories and concurrent runs. Fast: fake stages on a small
warehouse, no Airflow.

The privacy ledger is a store of its own (issue 50): each test here has its own ledger file
(``own_ledger``: ``DPNGRAM_LEDGER``), since many set a lifetime budget on dataset "faults". A fault
is injected with a :class:`pytest.MonkeyPatch` context of its own, never by ``monkeypatch.undo()``
(which would also drop the test's ledger)."""

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
from dpngram.release.ledger import Ledger, open_ledger
from dpngram.release.publish import prepare
from dpngram.release.spend import spend_once

OUTPUT = "released/noisy.json"

#: each test its own ledger: most set a lifetime budget on dataset "faults" or count its charges
pytestmark = pytest.mark.usefixtures("own_ledger")


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
    """The run's charges in the privacy ledger (stage, epsilon, delta, pending/final)."""
    with ctx.ledger() as ledger:
        rows = ledger.export(ctx.config.dataset)
    return [
        {"stage": r["stage"], "epsilon": r["epsilon"], "delta": r["delta"], "status": r["status"]}
        for r in rows
        if r["run_id"] == ctx.run_id
    ]


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
    # so may the warehouse directory: each Airflow worker may have its own (the ledger is shared)
    prepare(config.with_values(warehouse=str(tmp_path / "another-worker")))


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

    with pytest.MonkeyPatch.context() as fault:
        fault.setattr(spend_module, "write_part", crash)
        with pytest.raises(OSError):
            spend_once(ctx, "dpne", [OUTPUT], stage)
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
    with ctx.ledger() as ledger:
        ledger.record(ctx.config.dataset, ctx.run_id, "dpne", ctx.config.epsilon, ctx.config.delta, [])


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
    assert main(["budget", "--dataset", "faults", "--lifetime-epsilon", "8"]) == 0
    assert "lifetime epsilon 5 -> 8" in capsys.readouterr().out
    prepare(make_config(tmp_path, epsilon=3.0, run_id="b"))  # 3 + 3 <= 8
    # lowering below what is already committed is refused
    assert main(["budget", "--dataset", "faults", "--lifetime-epsilon", "4"]) == 2
    assert "below" in capsys.readouterr().err
    assert committed() == pytest.approx((6.0, 2e-7))  # a's charge and b's reservation


def test_two_runs_prepared_before_either_spends_cannot_both_pass(tmp_path):
    """The check-then-spend race through the library API: prepare reserves the run's budget."""
    a = RunContext(prepare(make_config(tmp_path, epsilon=3.0, lifetime_epsilon=5.0, run_id="a")))
    with pytest.raises(BudgetError):
        prepare(make_config(tmp_path, epsilon=3.0, lifetime_epsilon=5.0, run_id="b"))
    _spend_whole_run(a)
    with a.ledger() as ledger:
        assert ledger.spent("faults").epsilon == pytest.approx(3.0)
        assert ledger.run("b") is None  # the refused run registered nothing


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
    with open_ledger() as ledger:
        assert ledger.committed("faults").epsilon <= 5.0 * (1 + 1e-12)
        (ran,) = [run_id for run_id, outcome in outcomes.items() if outcome == "ran"]
        assert ledger.spent("faults", ran).epsilon == pytest.approx(1.0)
        assert ledger.spent("faults") == ledger.spent("faults", ran)  # only the run that ran spent


def test_a_stage_charge_is_checked_against_the_lifetime_atomically(tmp_path):
    """Even past prepare (a reservation released by `dpngram gc`, or an old ledger), the charge
    before the draw refuses to pass the dataset's lifetime."""
    a = RunContext(prepare(make_config(tmp_path, epsilon=3.0, lifetime_epsilon=5.0, run_id="a")))
    with a.ledger() as ledger:
        ledger.close_run("a")  # no reservation any more
        ledger.record("faults", "other", "dpne", 3.0, 0.0, [])  # someone else spent 3
    stage = NoisyStage(a)
    with pytest.raises(BudgetError, match="lifetime"):
        spend_once(a, "dpne", [OUTPUT], stage)
    assert stage.calls == 1 and not (a.release.root / OUTPUT).exists()  # refused before the draw


# -- 4, 5, 7, 8: the CLI, leftovers, what the release says ----------------------------------------
def test_global_flags_before_the_subcommand_are_honoured():
    from dpngram.cli.parser import build_parser

    parser = build_parser()
    base = ["run", "--input", "x.jsonl", "--out", "o"]
    assert parser.parse_args(["--debug", "--verbose", *base]).debug is True
    assert parser.parse_args(["--debug", *base]).verbose is False
    assert parser.parse_args([*base, "--debug"]).debug is True
    assert parser.parse_args(base).debug is False


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """One `dpngram run` on a small sample with two malformed records; its console output."""
    import contextlib
    import gzip
    import io

    from dpngram.cli import main
    from dpngram.text.sample import write_sample

    base = tmp_path_factory.mktemp("clirun")
    files = write_sample(base / "sample", n_users=300, seed=11, public_sentences=100)
    users = base / "users.jsonl.gz"
    with gzip.open(files["users"], "rt") as src, gzip.open(users, "wt") as dst:
        dst.writelines(src)
        dst.write('{"user_id": "x"}\nnot json at all\n')
    out, err = io.StringIO(), io.StringIO()
    argv = ["run", "--input", str(users), "--out", str(base / "out"), "--warehouse", str(base / "wh")]
    # a module fixture runs before a test's own ledger is set: it names one of its own
    argv += ["--ledger", str(base / "ledger.duckdb"), "--max-n", "2", "--quiet", "--run-id", "clirun"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return {"base": base, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def test_run_prints_the_quarantine_summary_by_reason(cli_run):
    assert cli_run["code"] == 0, cli_run["stderr"]
    assert "rows read were quarantined" in cli_run["stdout"] and "by reason" in cli_run["stdout"]
    assert "malformed_json" in cli_run["stdout"] and "missing_text" in cli_run["stdout"]


def test_the_release_holds_no_timings_or_machine_paths_and_says_what_is_noisy(cli_run):
    base = cli_run["base"]
    release = base / "out" / "default" / "runs" / "clirun"
    assert not (release / "report.timings").exists()
    report = json.loads((release / "report.json").read_text())
    assert "timings_seconds" not in report
    for path in release.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".html", ".md"):
            text = path.read_text(errors="ignore")
            assert str(base) not in text, path  # no absolute path of this machine
            assert '"seconds"' not in text, path
    assert report["released"]["tables"]["vocabulary"]["content"] == "keys only"
    assert report["privacy"]["differentially_private"] is True
    # operator-only files: in the warehouse directory, WAREHOUSE/operator/RUN_ID
    operator = json.loads((base / "wh" / "operator" / "clirun" / "operator_report.json").read_text())
    assert {"ingest", "dpne.k1", "dpne.k2"} <= set(operator["timings_seconds"])
    assert operator["paths"]["input"].endswith("users.jsonl.gz")
    assert not (base / "wh" / "runs" / "clirun.duckdb").exists()  # published: private tables gone


def test_the_release_manifest_lists_every_published_file_with_its_size_and_hash(cli_run):
    import hashlib

    assert cli_run["code"] == 0, cli_run["stderr"]
    release = cli_run["base"] / "out" / "default" / "runs" / "clirun"
    files = json.loads((release / "MANIFEST.json").read_text())["files"]
    published = {
        p.relative_to(release).as_posix()
        for p in release.rglob("*")
        if p.is_file() and p.name != "MANIFEST.json"
    }
    assert set(files) == published
    for rel, meta in files.items():
        data = (release / rel).read_bytes()
        assert meta["size"] == len(data) and meta["sha256"] == hashlib.sha256(data).hexdigest(), rel


def test_noisy_columns_are_declared_and_non_dp_settings_flagged(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dpngram.stages.report import write_report

    ctx = RunContext(prepare(make_config(tmp_path, bayes_calibration="brute-force-NOT-DP")))
    pq.write_table(
        pa.table({"w1": ["a"], "w2": ["b"], "w3": ["c"], "prob": [1.0]}),
        ctx.release.path("released", "trigram_dist.parquet"),
    )
    report = json.loads(write_report(ctx).read_text())
    table = report["released"]["tables"]["trigram_dist"]
    assert table["content"] == "keys and DP-noisy values" and set(table["noisy_columns"]) == {"prob"}
    assert report["privacy"]["differentially_private"] is False
    assert report["privacy"]["non_dp_settings"] == ["bayes_calibration=brute-force-NOT-DP"]
    assert "NOT differentially private" in report["privacy"]["total"]["warning"]
    assert "NOT differentially private" in (ctx.release.root / "report.html").read_text()


def test_an_input_with_no_usable_record_shows_the_quarantine_and_fails(tmp_path, capsys):
    from dpngram.cli import main

    bad = write_input(tmp_path / "bad.jsonl", 'not json\n{"user_id": "u"}\n')
    code = main(
        [
            "run",
            "--input",
            str(bad),
            "--out",
            str(tmp_path / "o"),
            "--warehouse",
            str(tmp_path / "w.duckdb"),
            "-q",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "no usable record" in err and "malformed_json" in err and "missing_text" in err


class Holder:
    """Another process that holds a DuckDB file open (read-write: DuckDB then refuses every other
    process), until :meth:`stop`."""

    def __init__(self, path: Path) -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import duckdb, time; c = duckdb.connect({str(path)!r}); print('ready', flush=True); "
                "time.sleep(60)",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "ready"
        self.pid = self.proc.pid

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


def test_every_command_on_a_locked_ledger_fails_in_one_line_and_reserves_nothing(
    tmp_path, own_ledger, monkeypatch, capsys
):
    """Another process holds the embedded ledger file: every command that needs the ledger waits
    (BUSY_SECONDS, shortened here), then fails with one line naming the file and the holder's PID
    (exit 1, as a busy warehouse), having reserved and staged nothing."""
    from dpngram.cli import main
    from dpngram.release import ledger_store

    monkeypatch.setattr(ledger_store, "BUSY_SECONDS", 1.0)
    with open_ledger() as ledger:
        ledger.set_lifetime("faults", 20.0, None)  # an existing ledger, with a dataset
    data = write_input(tmp_path / "in.jsonl")
    out = tmp_path / "o"
    release = ["--input", str(data), "--out", str(out), "--warehouse", str(tmp_path / "wh")]
    release += ["--dataset", "faults", "--run-id", "locked", "-q"]
    holder = Holder(own_ledger)
    try:
        for argv in (
            ["ledger", "--dataset", "faults"],
            ["budget", "--dataset", "faults", "--lifetime-epsilon", "9"],
            ["run", *release],
            ["ingest", *release],
            ["gc", "--older-than", "0", "--delete"],
        ):
            code = main(argv)
            captured = capsys.readouterr()
            assert code == 1, (argv, captured.err)
            err = captured.err
            assert err.count("\n") == 1, err
            assert f"ledger {own_ledger} stayed busy" in err and f"held by process {holder.pid}" in err, err
            assert len(err) <= 110 + len(str(own_ledger))  # one short line besides the path
            assert "unexpected" not in err and "Traceback" not in err
    finally:
        holder.stop()
    with open_ledger() as ledger:
        assert ledger.run("locked") is None and ledger.lifetime("faults") == (20.0, None)
    assert committed() == (0.0, 0.0)
    assert not list(out.rglob("*.staging"))  # nothing was staged


def test_gc_lists_and_deletes_the_staging_of_failed_runs(tmp_path, capsys):
    """gc lists the runs the ledger has not closed and the staging directories under --out it does
    not know; --delete releases the reservation, deletes the run's private tables (its file in
    WAREHOUSE/runs) and removes both staging directories."""
    from dpngram.cli import main

    ctx = RunContext(prepare(make_config(tmp_path, epsilon=3.0, lifetime_epsilon=5.0, run_id="failed")))
    with_private_table(ctx)
    assert ctx.release.staging.is_dir() and ctx.config.run_warehouse.is_file()
    ghost = Path(ctx.config.out) / "faults" / "runs" / "ghost.staging"  # staged with another ledger
    (ghost / "released").mkdir(parents=True)
    (ghost / "released" / "x.json").write_text("{}")
    args = ["gc", "--out", ctx.config.out, "--warehouse", ctx.config.warehouse, "--older-than", "0"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "would release: run failed" in out and "reserves epsilon 3" in out
    assert "run ghost" in out and "not in the ledger" in out
    assert ctx.release.staging.is_dir() and ghost.is_dir() and committed() == pytest.approx((3.0, 1e-7))
    assert main([*args, "--delete"]) == 0
    assert "deleted 2 unpublished runs" in capsys.readouterr().out
    assert not ctx.release.staging.exists() and not ghost.exists()
    assert not ctx.config.run_warehouse.exists()  # its private tables are gone
    assert committed() == (0.0, 0.0)  # its reservation is released; it can no longer be resumed
    with pytest.raises(ResumeError, match="closed"):
        prepare(ctx.config)


def test_no_temporary_file_is_published(tmp_path):
    from dpngram.release.context import record_part
    from dpngram.release.publish import publish_run

    ctx = RunContext(prepare(make_config(tmp_path)))
    record_part(ctx, "validation", {"success": True})
    ctx.release.path("report.json").write_text("{}")
    leftovers = [
        ctx.release.path("report.parts", ".dpne.k1.json.x1y2z3.tmp"),  # write_json_atomic, killed
        ctx.release.path("report.timings", "ingest.jsonab12cd.tmp"),  # the old naming, 0 bytes
        ctx.release.path("released", ".vocabulary.parquet.partial"),  # Release.writing, killed
        ctx.release.path("plots", ".ngrams_per_k.png.partial.png"),
    ]
    for path in leftovers:
        path.write_bytes(b"")
    final = publish_run(ctx)
    names = [p.name for p in final.rglob("*") if p.is_file()]
    assert not [n for n in names if n.endswith((".tmp", ".partial")) or ".partial." in n], names
    listed = json.loads((final / "MANIFEST.json").read_text())["files"]
    assert sorted(Path(rel).name for rel in listed) == sorted(n for n in names if n != "MANIFEST.json")


# -- 6. the memory limit is the process's budget ------------------------------------------------
def test_duckdb_gets_only_its_share_of_the_process_memory_limit(tmp_path):
    """memory_limit bounds the whole process: DuckDB obeys its own limit, so it must be given
    less than the budget, leaving the documented reserve to Python (docs/engines.md, Memory)."""
    from dpngram.engines.duckdb import PYTHON_RESERVE_FRACTION, Warehouse, memory_bytes

    with Warehouse(tmp_path / "w.duckdb", memory_limit="2GB") as wh:
        setting = wh.scalar("SELECT current_setting('memory_limit')")  # e.g. '1.3 GiB'
    value, unit = setting.split()
    duckdb_bytes = float(value) * {"MiB": 1024**2, "GiB": 1024**3}[unit]
    budget = memory_bytes("2GB")
    # DuckDB prints one decimal: allow 0.05 GiB of display rounding
    assert duckdb_bytes == pytest.approx(budget * (1 - PYTHON_RESERVE_FRACTION), abs=0.05 * 1024**3)
    assert duckdb_bytes < budget


# -- 9. out of memory before the first noise draw (issue "Scale" 4) --------------------------------
# A stage is charged at its first real noise draw. The DPSU/DPNE subset and visiting-order salts
# are selection salts (NoiseSource.selection_salt: the privacy proof holds for any salt), so an
# engine failure in the heavy SQL they key charges nothing and the run resumes with more memory.
# docs/faults.md, "Selection salts".
@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    from dpngram.text.sample import write_sample

    return write_sample(tmp_path_factory.mktemp("oom") / "sample", n_users=300, seed=5, public_sentences=100)


def ingested(tmp_path: Path, corpus: dict[str, Path], **values) -> RunContext:
    """A prepared run (id 'oom') on the small corpus, ingested, with DPNE up to bigrams."""
    from dpngram.stages.ingest import run_ingest

    settings = {
        "input": str(corpus["users"]),
        "out": str(tmp_path / "out"),
        "warehouse": str(tmp_path / "wh.duckdb"),
        "dataset": "faults",
        "run_id": "oom",
        "stage_budget": {"dpne": 1.0},
        "max_n": 2,
        **values,
    }
    ctx = RunContext(prepare(RunConfig.build(**settings)))
    run_ingest(ctx)
    return ctx


class WatchedSql:
    """Names the mechanisms' SQL statements (``sql/NAME.sql``) as DuckDB runs them, records the
    ones that raise, and makes the statements named in ``fail`` raise ``error`` (an injected
    engine failure)."""

    def __init__(self, monkeypatch, fail=(), error: type[Exception] | None = None) -> None:
        import duckdb

        from dpngram.engines.duckdb import Warehouse
        from dpngram.mechanisms import dpne, dpne_domain, dpsu, dpsu_policy

        self.names: dict[str, str] = {}
        self.failed: list[tuple[str, str]] = []
        self.fail, self.error = set(fail), error or duckdb.OutOfMemoryException
        for module in (dpsu, dpsu_policy, dpne, dpne_domain):
            original = module.load_sql

            def naming(name, _original=original, **identifiers):
                text = _original(name, **identifiers)
                self.names[text] = name
                return text

            monkeypatch.setattr(module, "load_sql", naming)
        execute = Warehouse.execute

        def watched(wh, sql, params=None):
            name = self.names.get(sql, "?")
            try:
                if name in self.fail:
                    raise self.error("Out of Memory Error: injected (9.9 MiB/1.0 MiB used)")
                return execute(wh, sql, params)
            except Exception as err:
                self.failed.append((name, type(err).__name__))
                raise

        monkeypatch.setattr(Warehouse, "execute", watched)


def ledger_rows(ctx: RunContext) -> list[tuple[str, str]]:
    return sorted((e["stage"], e["status"]) for e in entries(ctx))


@pytest.mark.parametrize(
    ("policy", "statement"), [("weighted", "dpsu/histogram"), ("policy-gaussian", "dpsu/policy_items")]
)
def test_out_of_memory_in_the_vocabulary_sql_charges_nothing_and_resumes(
    tmp_path, small_corpus, policy, statement
):
    """The heavy DPSU statement runs after the secret salts are drawn and before any noise: an
    out-of-memory error there leaves no ledger entry, and the same run id resumes (more memory)
    and is charged exactly once."""
    import duckdb

    from dpngram.core.errors import ResourceExhausted
    from dpngram.stages.vocabulary import run_vocabulary

    ctx = ingested(tmp_path, small_corpus, dpsu_policy=policy)
    with pytest.MonkeyPatch.context() as fault:
        sql = WatchedSql(fault, fail={statement})
        with pytest.raises(ResourceExhausted) as err:
            run_vocabulary(ctx)
    assert sql.failed == [(statement, "OutOfMemoryException")]
    assert err.value.charged is False and isinstance(err.value.__cause__, duckdb.OutOfMemoryException)
    message = str(err.value)
    assert "\n" not in message and "nothing was charged" in message and "dpne.k1" in message
    assert "MiB" not in message and "injected" not in message  # the engine's message is withheld
    assert ledger_rows(ctx) == []  # no pending charge: the salts are not draws

    resumed = RunContext(prepare(ctx.config.with_values(memory_limit="2GB")))  # same run id
    assert run_vocabulary(resumed)["reused"] is False
    assert ledger_rows(resumed) == [("dpne.k1", "final")]
    assert run_vocabulary(resumed)["reused"] is True
    assert ledger_rows(resumed) == [("dpne.k1", "final")]


#: The statements of the vocabulary that read every user's items: the item codes, the per-user list
#: table and its histograms (DP-SIPS, the default; plain or coded), the shared histogram and the
#: policy Gaussian's input.
VOCABULARY_HEAVY_SQL = (
    "dpsu/user_item_lists",
    "dpsu/histogram_lists",
    "dpsu/histogram_lists_remaining",
    "dpsu/item_codes",
    "dpsu/item_codes_tokens",
    "dpsu/user_kept_lists",
    "dpsu/user_kept_lists_coded",
    "dpsu/user_kept_lists_coded_tokens",
    "dpsu/histogram_kept",
    "dpsu/histogram_kept_coded",
    "dpsu/histogram_kept_admitted",
    "dpsu/histogram_kept_admitted_coded",
    "dpsu/histogram",
    "dpsu/policy_items",
)


def test_a_real_out_of_memory_in_the_dpsu_sql_resumes_with_a_larger_memory_limit(tmp_path, small_corpus):
    """No injection: DuckDB itself runs out of memory in the DPSU statement at a 4 MB limit (the
    128 MiB floor Warehouse puts under DuckDB's share is lifted for that attempt; one thread so
    the memory use is the same on every machine); the resume at 1 GB completes."""
    from dpngram.core.errors import ResourceExhausted
    from dpngram.engines import duckdb as duckdb_engine
    from dpngram.stages.vocabulary import run_vocabulary

    ctx = ingested(tmp_path, small_corpus, threads=1)
    tiny = RunContext(ctx.config.with_values(memory_limit="4MB"))
    with pytest.MonkeyPatch.context() as fault:
        sql = WatchedSql(fault)
        fault.setattr(duckdb_engine, "duckdb_memory_limit", lambda limit: limit)
        with pytest.raises(ResourceExhausted) as err:
            run_vocabulary(tiny)
    assert err.value.resource == "memory" and err.value.charged is False
    assert sql.failed[-1][1] == "OutOfMemoryException"
    # the heavy statement: the vocabulary's per-user lists (DP-SIPS, the default) or a histogram
    assert sql.failed[-1][0] in VOCABULARY_HEAVY_SQL
    assert ledger_rows(ctx) == []

    resumed = RunContext(prepare(ctx.config.with_values(memory_limit="1GB")))
    assert run_vocabulary(resumed)["reused"] is False
    assert ledger_rows(resumed) == [("dpne.k1", "final")]


def test_out_of_memory_in_a_dpne_level_histogram_charges_nothing_and_resumes(tmp_path, small_corpus):
    """Level k=2 builds its histogram with the same DPSU SQL after its selection salts: an
    out-of-memory error there leaves level 2 uncharged (the vocabulary keeps its final charge),
    and the resume releases the level and charges it once."""
    from dpngram.core.errors import ResourceExhausted
    from dpngram.stages.dpne import run_level
    from dpngram.stages.vocabulary import run_vocabulary

    ctx = ingested(tmp_path, small_corpus)
    run_vocabulary(ctx)
    # the first heavy statement of the level: its per-user kept lists (DP-SIPS with admission, the
    # default), the shared histogram (plain rounds) or the policy Gaussian's input
    heavy = {"dpsu/user_kept_lists", "dpsu/user_item_lists", "dpsu/histogram", "dpsu/policy_items"}
    with pytest.MonkeyPatch.context() as fault:
        sql = WatchedSql(fault, fail=heavy)
        with pytest.raises(ResourceExhausted) as err:
            run_level(ctx, 2)
    assert [name for name, _ in sql.failed] in (
        ["dpsu/user_kept_lists"],
        ["dpsu/user_item_lists"],
        ["dpsu/histogram"],
        ["dpsu/policy_items"],
    )
    assert err.value.charged is False and err.value.stage == "dpne.k2"
    assert ledger_rows(ctx) == [("dpne.k1", "final")]

    resumed = RunContext(prepare(ctx.config.with_values(memory_limit="2GB")))
    assert run_level(resumed, 2)["reused"] is False
    assert ledger_rows(resumed) == [("dpne.k1", "final"), ("dpne.k2", "final")]


def test_out_of_memory_after_the_first_noise_draw_keeps_the_charge_and_is_not_resumed(tmp_path, small_corpus):
    """The level-1 tables (the user numbering first) are built after the threshold's noise was
    drawn: a failure there keeps the pending charge (an upper bound) and the resume is refused,
    never drawn again."""
    from dpngram.core.errors import ResourceExhausted
    from dpngram.stages.vocabulary import run_vocabulary

    ctx = ingested(tmp_path, small_corpus)
    with pytest.MonkeyPatch.context() as fault:
        WatchedSql(fault, fail={"numbering/sentences"})
        with pytest.raises(ResourceExhausted) as err:
            run_vocabulary(ctx)
    assert err.value.charged is True
    assert "keeps its charge" in str(err.value) and "new run id" in str(err.value)
    assert ledger_rows(ctx) == [("dpne.k1", "pending")]

    resumed = RunContext(prepare(ctx.config.with_values(memory_limit="2GB")))
    with pytest.raises(ResumeError, match="drew its noise before a crash"):
        run_vocabulary(resumed)
    assert ledger_rows(resumed) == [("dpne.k1", "pending")]


def triehh_run(tmp_path: Path, corpus: dict[str, Path], run_id: str) -> RunContext:
    return ingested(
        tmp_path,
        corpus,
        run_id=run_id,
        vocabulary_method="triehh",
        stage_budget={"dpne": 0.5, "triehh": 0.5},
        epsilon=20.0,
        triehh_users_per_layer=30,
        triehh_max_depth=8,
    )


def test_triehh_is_charged_before_its_user_sampling(tmp_path, small_corpus):
    """TrieHH's privacy rests on its random user groups (amplification by shuffling): drawing them
    is a real draw. A failure in the layer SQL after the groups were drawn keeps the charge and
    the resume is refused, while a failure before the draw (preparing the users' words) charges
    nothing."""
    import duckdb

    from dpngram.core.errors import ResourceExhausted
    from dpngram.mechanisms.triehh import WarehouseSource
    from dpngram.stages import triehh as triehh_stage

    ctx = triehh_run(tmp_path / "before", small_corpus, "before")

    def out_of_memory(*args, **kwargs):
        raise duckdb.OutOfMemoryException("Out of Memory Error: injected")

    with pytest.MonkeyPatch.context() as fault:
        fault.setattr(triehh_stage, "prepare_user_words", out_of_memory)
        with pytest.raises(ResourceExhausted) as err:
            triehh_stage.run_triehh(ctx)
    assert err.value.charged is False and ledger_rows(ctx) == []

    ctx = triehh_run(tmp_path / "after", small_corpus, "after")
    drawn = []
    sample = NoiseSource.sample_without_replacement

    def recording(self, population, k):
        before = ledger_rows(ctx)
        groups = sample(self, population, k)
        drawn.append((before, ledger_rows(ctx)))  # the ledger just before and after the draw
        return groups

    with pytest.MonkeyPatch.context() as fault:
        fault.setattr(NoiseSource, "sample_without_replacement", recording)
        fault.setattr(WarehouseSource, "__call__", out_of_memory)
        with pytest.raises(ResourceExhausted) as err:
            triehh_stage.run_triehh(ctx)
    assert err.value.charged is True
    assert drawn == [([], [("triehh", "pending")])]  # the group draw itself took the charge
    with pytest.raises(ResumeError, match="drew its noise before a crash"):
        triehh_stage.run_triehh(RunContext(prepare(ctx.config)))
    assert ledger_rows(ctx) == [("triehh", "pending")]


def test_the_cli_says_nothing_was_charged_and_prints_the_resume_command(tmp_path, small_corpus, capsys):
    """One line: the stage, that nothing was charged, and the command to resume: the same --run-id
    with twice the memory limit. That command resumes the same run (its fingerprint matches)."""
    import shlex

    from dpngram.cli import main
    from dpngram.cli.flags import config_from_args
    from dpngram.cli.parser import build_parser
    from dpngram.stages.vocabulary import run_vocabulary

    argv = ["run", "--input", str(small_corpus["users"]), "--out", str(tmp_path / "out")]
    argv += ["--warehouse", str(tmp_path / "wh"), "--dataset", "faults", "--max-n", "2"]
    argv += ["--quiet", "--run-id", "cli-oom", "--memory-limit", "3GB"]
    with pytest.MonkeyPatch.context() as fault:
        WatchedSql(fault, fail=set(VOCABULARY_HEAVY_SQL))
        assert main(argv) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dpngram: error:")]
    assert len(errors) == 1, errors
    (line,) = errors
    assert "stage dpne.k1 ran out of memory before drawing any noise: nothing was charged" in line
    assert "MiB" not in line and "injected" not in line
    command = shlex.split(line.split("with more memory: ", 1)[1])
    assert command[0] == "dpngram" and command.count("--run-id") == 1
    assert command[command.index("--run-id") + 1] == "cli-oom"
    assert command[command.index("--memory-limit") + 1] == "6GB" and command.count("--memory-limit") == 1
    assert committed() == (0.0, 0.0)  # nothing drawn: the run's reservation was released

    config = config_from_args(build_parser().parse_args(command[1:]))
    ctx = RunContext(prepare(config))  # the resume is accepted: same run, same fingerprint
    assert ctx.run_id == "cli-oom" and ledger_rows(ctx) == []
    run_vocabulary(ctx)
    assert ledger_rows(ctx) == [("dpne.k1", "final")]


def test_a_selection_salt_is_not_a_draw_but_a_salt_is():
    fired: list[str] = []
    source = NoiseSource.secure()
    from dpngram.core.noise import before_first_draw

    with before_first_draw(lambda: fired.append("charged")):
        source.selection_salt()
        assert fired == []
        source.salt()
        assert fired == ["charged"]


#: Every call of NoiseSource.selection_salt in the package, by (module, enclosing top-level
#: function), each reviewed against the rule in its docstring: the privacy proof holds for any
#: value of the salt, and the selection reaches the release only through a later noise draw.
SELECTION_SALT_CALLERS = {
    ("mechanisms/dpsu_policy.py", "secret_histogram"): "DPSU/DPNE per-user subset + policy visiting order",
    ("mechanisms/dpsu.py", "sips_rounds_release"): "DP-SIPS's one per-user subset salt for all rounds "
    "with admission, drawn before round 1's SQL",
    ("mechanisms/dpsu.py", "_build_round_histogram"): "DP-SIPS round's per-user subset (each round, "
    "unless the shared salt above is given)",
    ("mechanisms/dpsu_new_words.py", "release_new_words"): "per-user tie order of the vocabulary's "
    "new-words round, which runs after the vocabulary's first draw (the stage is charged already)",
    ("stages/bayes.py", "run_bayes"): "per-user W-trigram subset (contribution bound)",
    ("stages/bayes.py", "run_bayes_baseline"): "per-user W-trigram subset (contribution bound)",
    ("stages/lm_counts.py", "run_lm_counts"): "selection/counting partition of the users by id",
}


def test_every_selection_salt_call_site_is_reviewed():
    """A new selection_salt() call defers the stage's charge past its salt: it must be reviewed
    (docs/faults.md, "Selection salts") and listed above, or use salt()."""
    import ast

    import dpngram

    root = Path(dpngram.__file__).parent
    found = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for top in tree.body:
            for node in ast.walk(top):
                if isinstance(node, ast.Attribute) and node.attr == "selection_salt":
                    if not isinstance(top, ast.FunctionDef) and not isinstance(top, ast.ClassDef):
                        raise AssertionError(f"{path}: selection_salt outside a function")
                    found.add((path.relative_to(root).as_posix(), top.name))
    found.discard(("core/noise.py", "NoiseSource"))  # its definition
    assert found == set(SELECTION_SALT_CALLERS)


# -- 10. round two (issue 26): one run identity, no stranded budget, an atomic publish ------------
def committed(dataset: str = "faults", ledger: str | Path | None = None) -> tuple[float, float]:
    """What counts against ``dataset``'s lifetime in the ledger (default: this test's own)."""
    with open_ledger(None if ledger is None else str(ledger)) as opened:
        used = opened.committed(dataset)
    return used.epsilon, used.delta


def test_a_resume_with_another_ledger_is_refused_before_it_reserves(tmp_path, own_ledger, monkeypatch):
    """The staging directory carries the privacy ledger's identity: a resume of the same run id and
    OUT with another input and another ledger (which has never heard of the run) is refused with
    one line, reserves nothing there, and no stage reuses the first input's staged outputs."""
    first = make_config(tmp_path, run_id="r1")
    ctx = RunContext(prepare(first))
    stage = NoisyStage(ctx)
    spend_once(ctx, "dpne", [OUTPUT], stage)  # a stage of input A is staged

    other_ledger = tmp_path / "elsewhere" / "ledger.duckdb"
    monkeypatch.setenv("DPNGRAM_LEDGER", str(other_ledger))
    other = write_input(tmp_path / "b.jsonl", '{"user_id": "u9", "text": "quite different"}\n')
    second = first.with_values(input=str(other))
    with pytest.raises(ResumeError) as err:
        prepare(second)
    message = str(err.value)
    assert "\n" not in message and "--run-id" in message
    assert f"was started with another privacy ledger than {other_ledger}" in message
    assert "different" not in message
    with open_ledger() as ledger:  # nothing registered or reserved in the other ledger
        assert ledger.run("r1") is None
    assert committed() == (0.0, 0.0)
    # a stage run against the other ledger (an Airflow task, no prepare) refuses to reuse
    with pytest.raises(ResumeError, match="privacy ledger"):
        spend_once(RunContext(second), "dpne", [OUTPUT], NoisyStage(RunContext(second)))
    assert stage.calls == 1 and entries(ctx) == []

    monkeypatch.setenv("DPNGRAM_LEDGER", str(own_ledger))  # the original ledger still resumes it
    assert spend_once(RunContext(prepare(first)), "dpne", [OUTPUT], stage)["reused"] is True
    assert stage.calls == 1 and [e["status"] for e in entries(ctx)] == ["final"]


def cat_corpus(path: Path, animal: str = "cat") -> Path:
    path.write_text(
        "".join(
            json.dumps({"user_id": f"u{i}", "text": f"the {animal} sat on the mat"}) + "\n" for i in range(60)
        )
    )
    return path


def test_a_resume_whose_staging_belongs_to_another_ledger_is_refused_in_one_line(
    tmp_path, own_ledger, capsys
):
    """The issue's reproduction through the CLI: a run (input A) is killed after its DP stages; the
    same command with another input and `--ledger` naming another ledger is refused in one line,
    before anything is reserved in either ledger, and publishes nothing."""
    from dpngram.cli import main
    from dpngram.stages import validate

    corpus = cat_corpus(tmp_path / "a.jsonl")
    out = tmp_path / "out"
    base = ["run", "--out", str(out), "--warehouse", str(tmp_path / "wh"), "--run-id", "mix", "-q"]
    base += ["--max-n", "2", "--stage-budget", "dpne=1"]

    def killed(ctx, **kwargs):
        raise KeyboardInterrupt  # a kill after the DP stages, before validation

    with pytest.MonkeyPatch.context() as fault:
        fault.setattr(validate, "validate_run", killed)
        assert main([*base, "--input", str(corpus)]) == 130
    staged = out / "default" / "runs" / "mix.staging" / "released" / "vocabulary.parquet"
    assert staged.is_file()
    before = (committed("default"), staged.read_bytes())
    assert before[0][0] == pytest.approx(4.0)

    other_ledger = tmp_path / "other.duckdb"
    other = cat_corpus(tmp_path / "b.jsonl", "dog")
    capsys.readouterr()
    assert main([*base, "--input", str(other), "--ledger", str(other_ledger)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run 'mix'" in err
    assert f"was started with another privacy ledger than {other_ledger}" in err
    assert not (out / "default" / "runs" / "mix").exists() and not (out / "default" / "latest").exists()
    with open_ledger(str(other_ledger)) as ledger:
        assert ledger.run("mix") is None
    assert committed("default", other_ledger) == (0.0, 0.0)
    assert (committed("default"), staged.read_bytes()) == before  # the first ledger: untouched


def test_a_run_from_another_folder_without_a_ledger_flag_sees_the_lifetime_spend(
    tmp_path, small_corpus, monkeypatch, capsys
):
    """Issue 50's acceptance test: with no ledger named anywhere, every run uses the per-user
    ledger ($XDG_DATA_HOME/dpngram/ledger.duckdb), never one relative to the working directory. A
    run from folder A sets the dataset's lifetime budget, leaving room for one run, and spends it;
    a run from folder B, with no flag but its input and output, is refused at its pre-check by that
    same lifetime, in one line, with nothing staged or reserved."""
    from dpngram.cli import main
    from dpngram.release.ledger_store import default_ledger_path

    home = tmp_path / "home" / ".local" / "share"  # this user's data directory
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.delenv("DPNGRAM_LEDGER")  # no ledger named: the per-user default
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    run = ["run", "--input", str(small_corpus["users"]), "--out", "out", "--max-n", "2", "-q"]

    monkeypatch.chdir(tmp_path / "a")
    assert main([*run, "--lifetime-epsilon", "6"]) == 0, capsys.readouterr().err
    assert (tmp_path / "a" / "out" / "default" / "latest").is_symlink()
    monkeypatch.chdir(tmp_path / "b")
    capsys.readouterr()
    assert main(run) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dataset 'default' has spent epsilon=" in err
    assert "of its lifetime 6;" in err and "dpngram budget --dataset default" in err
    assert not list((tmp_path / "b").rglob("*.staging"))  # refused before anything was staged

    assert default_ledger_path() == home / "dpngram" / "ledger.duckdb" and default_ledger_path().is_file()
    for folder in ("a", "b"):  # neither a ledger nor a warehouse in the working directories
        assert not list((tmp_path / folder).rglob("*.duckdb")), folder
    with open_ledger() as ledger:
        assert len(ledger.runs_of("default")) == 1  # the refused run registered nothing
        assert ledger.lifetime("default") == (6.0, None)
        assert 3.0 < ledger.committed("default").epsilon <= 4.0 + 1e-9


def few_users(tmp_path: Path, users: int = 3) -> Path:
    path = tmp_path / "few.jsonl"
    path.write_text("".join(json.dumps({"user_id": f"u{i}", "text": "a b c d"}) + "\n" for i in range(users)))
    return path


def test_a_refused_delta_releases_the_reservation_and_names_the_run(tmp_path, capsys):
    """delta >= 1/users is refused after ingest, i.e. after prepare reserved the run's budget: the
    run drew no noise, so the reservation is released (committed delta stays 0, not 0.5)."""
    from dpngram.cli import main

    argv = ["run", "--input", str(few_users(tmp_path)), "--out", str(tmp_path / "out")]
    argv += ["--warehouse", str(tmp_path / "wh"), "--run-id", "tiny", "-q", "--delta", "0.5"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "delta" in err and "run 'tiny' spent nothing" in err
    assert committed("default") == (0.0, 0.0)
    with open_ledger() as ledger:
        assert ledger.run("tiny")["state"] == "suspended"
    # the run is suspended, not closed: a fixed resume would reserve again (here: still refused)
    assert main([*argv[:-2], "--delta", "0.5"]) == 2
    assert committed("default") == (0.0, 0.0)


def test_an_out_that_is_a_file_reserves_nothing(tmp_path, capsys):
    from dpngram.cli import main

    out = tmp_path / "out"
    out.write_text("not a directory")
    argv = [
        "run",
        "--input",
        str(few_users(tmp_path)),
        "--out",
        str(out),
        "--warehouse",
        str(tmp_path / "wh"),
    ]
    assert main([*argv, "--run-id", "blocked", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out: cannot create the staging directory" in err
    assert committed("default") == (0.0, 0.0)
    with open_ledger() as ledger:
        assert ledger.run("blocked") is None


def test_a_failure_after_prepare_releases_the_reservation_when_nothing_was_drawn(
    tmp_path, monkeypatch, own_ledger
):
    """Any failure of `run` before the first noise draw (a read-only OUT for the operator file,
    the joint calibration refusing, ...) leaves nothing reserved; after a draw it names the run and
    the gc command that releases it (the ledger knows the run's warehouse: no --warehouse)."""
    from dpngram.core.errors import BudgetError
    from dpngram.orchestration.plan import run_release
    from dpngram.stages import ingest

    def refuse(ctx, **kwargs):
        raise BudgetError("joint calibration did not converge (internal error)")

    monkeypatch.setattr(ingest, "run_ingest", refuse)
    config = make_config(tmp_path, run_id="cal", lifetime_epsilon=5.0)
    with pytest.raises(BudgetError) as err:
        run_release(config)
    assert "run 'cal' spent nothing" in " ".join(err.value.__notes__)
    assert committed() == (0.0, 0.0)

    def draw_then_fail(ctx, **kwargs):
        spend_once(ctx, "dpne", [OUTPUT], NoisyStage(ctx))
        raise OSError("simulated failure after a draw")

    monkeypatch.setattr(ingest, "run_ingest", draw_then_fail)
    config = make_config(tmp_path, run_id="drawn")
    with pytest.raises(OSError) as err:
        run_release(config)
    note = " ".join(err.value.__notes__)
    # the gc command names this test's ledger (not the per-user default), so that it finds the run
    assert "--run-id drawn" in note and f"`dpngram gc --ledger {own_ledger} --run-id drawn --delete`" in note
    assert committed() == pytest.approx((4.0, 1e-7))  # the reservation stays


def test_a_busy_run_warehouse_mid_run_names_the_run_and_gc_releases_it(
    tmp_path, small_corpus, monkeypatch, capsys, own_ledger
):
    """Another process holds the run's own warehouse file (WAREHOUSE/runs/RUN_ID.duckdb) when a
    stage after the first charge opens it: the run fails in one line naming the file, its holder,
    the run id and the gc command; having drawn noise it keeps its reservation. gc (told no
    warehouse: the ledger knows the run's) lists it, and --delete releases the reservation (the
    charges stay) and deletes the run's private tables."""
    from dpngram.cli import main
    from dpngram.stages import dpne

    warehouse = tmp_path / "wh"
    run_file = warehouse / "runs" / "busy.duckdb"
    holders: list[Holder] = []
    original = dpne.run_level

    def taken(ctx, **kwargs):  # level 2, after the vocabulary was charged
        holders.append(Holder(run_file))
        return original(ctx, **kwargs)

    monkeypatch.setattr(dpne, "run_level", taken)
    argv = ["run", "--input", str(small_corpus["users"]), "--out", str(tmp_path / "out")]
    argv += ["--warehouse", str(warehouse), "--dataset", "faults", "--max-n", "2", "--run-id", "busy", "-q"]
    try:
        assert main(argv) == 1
    finally:
        for holder in holders:
            holder.stop()
    err = capsys.readouterr().err
    assert len(holders) == 1 and err.count("\n") == 1, err
    assert f"warehouse {run_file} is in use by process {holders[0].pid}" in err
    assert "--run-id busy" in err and f"`dpngram gc --ledger {own_ledger} --run-id busy --delete`" in err
    with open_ledger() as ledger:
        charged = ledger.spent("faults", "busy")
        assert [(e["stage"], e["status"]) for e in ledger.export("faults")] == [("dpne.k1", "final")]
    assert 0 < charged.epsilon < 4.0
    assert committed()[0] == pytest.approx(4.0)  # still reserved

    gc = ["gc", "--run-id", "busy"]
    assert main(gc) == 0
    out = capsys.readouterr().out
    assert "would release: run busy" in out and "reserves epsilon 4" in out
    assert committed()[0] == pytest.approx(4.0) and run_file.is_file()  # listing changes nothing
    assert main([*gc, "--delete"]) == 0
    assert committed() == pytest.approx((charged.epsilon, charged.delta))  # the charges stay
    assert not run_file.exists()  # its private tables are gone


def test_gc_finds_an_open_reservation_whose_out_is_gone(tmp_path, capsys):
    import shutil

    from dpngram.cli import main

    ctx = RunContext(prepare(make_config(tmp_path, run_id="lost")))
    shutil.rmtree(ctx.config.out)
    gc = ["gc", "--warehouse", ctx.config.warehouse, "--older-than", "0"]
    assert main(gc) == 0
    out = capsys.readouterr().out
    assert "would release: run lost" in out and "gone" in out
    assert committed() == pytest.approx((4.0, 1e-7))
    assert main([*gc, "--delete"]) == 0
    assert committed() == (0.0, 0.0)


# A kill between the publish rename and the `latest` swap: the release is complete but hidden.
def staged_for_publish(tmp_path: Path, run_id: str) -> RunContext:
    from dpngram.release.context import record_part

    ctx = RunContext(prepare(make_config(tmp_path, run_id=run_id)))
    record_part(ctx, "validation", {"success": True})
    ctx.release.path("report.json").write_text("{}")
    return ctx


def publish_killed_before_latest(ctx: RunContext) -> None:
    from dpngram.release.layout import Release
    from dpngram.release.publish import publish_run

    def killed(self):
        raise KeyboardInterrupt("simulated kill after the rename, before the latest swap")

    with pytest.MonkeyPatch.context() as fault:
        fault.setattr(Release, "point_latest", killed)
        with pytest.raises(KeyboardInterrupt):
            publish_run(ctx)
    assert ctx.release.published  # renamed: complete, but hidden


def latest(ctx: RunContext) -> Path | None:
    link = Path(ctx.config.out) / ctx.config.dataset / "latest"
    return link.resolve() if link.is_symlink() else None


def test_a_rerun_completes_an_interrupted_publish(tmp_path):
    from dpngram.orchestration.plan import run_release
    from dpngram.release.publish import AlreadyPublished

    ctx = staged_for_publish(tmp_path, "hidden")
    publish_killed_before_latest(ctx)
    assert latest(ctx) is None and committed()[0] == pytest.approx(4.0)
    result = run_release(ctx.config)  # the re-run (same run id) completes the publish
    assert Path(result["release"]) == ctx.release.final and latest(ctx) == ctx.release.final
    assert committed() == (0.0, 0.0)  # closed: it counts by its charges (none)
    assert not (ctx.release.final / ".run-identity.json").exists()
    with pytest.raises(AlreadyPublished, match="already published"):
        prepare(ctx.config)  # now it is simply published


def test_gc_and_the_next_run_complete_an_interrupted_publish_latest_stays_newest(tmp_path, capsys):
    import os

    from dpngram.cli import main
    from dpngram.release.publish import publish_run

    older = staged_for_publish(tmp_path, "older")
    publish_killed_before_latest(older)
    # the next run into the same OUT completes it at its prepare
    newer = staged_for_publish(tmp_path, "newer")
    assert latest(older) == older.release.final
    publish_run(newer)
    assert latest(newer) == newer.release.final

    # a hidden release completed after a newer one was published does not take `latest` back
    oldest = staged_for_publish(tmp_path, "oldest")
    publish_killed_before_latest(oldest)
    stamp = older.release.final.stat().st_mtime_ns - 10**9  # published before `newer`
    os.utime(oldest.release.final, ns=(stamp, stamp))
    assert main(["gc", "--warehouse", oldest.config.warehouse]) == 0
    assert "completed the interrupted publish" in capsys.readouterr().out
    assert latest(newer) == newer.release.final
    assert committed() == (0.0, 0.0)


def run_files(ctx: RunContext) -> list[str]:
    """The run's private files in its warehouse directory: its DuckDB file
    (WAREHOUSE/runs/RUN_ID.duckdb) and what DuckDB keeps beside it (WAL, spill directory)."""
    runs = Path(ctx.config.warehouse) / "runs"
    return sorted(p.name for p in runs.glob(f"{ctx.run_id}.duckdb*"))


def run_tables(ctx: RunContext) -> list[str]:
    """The tables in the run's private DuckDB schema, in its own file (read-only: opening it to
    write would create the schema)."""
    from dpngram.engines.sql import run_schema_name

    assert ctx.config.run_warehouse.is_file(), run_files(ctx)
    with ctx.warehouse(read_only=True) as wh:
        rows = wh.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ?",
            [run_schema_name(ctx.run_id)],
        ).fetchall()
    return sorted(r[0] for r in rows)


def with_private_table(ctx: RunContext) -> None:
    """A private working table in the run's schema, as ingest leaves one."""
    with ctx.warehouse() as wh:
        schema = wh.run_schema(ctx.run_id)
        wh.con.execute(f"CREATE TABLE {schema}.sentences AS SELECT 'u1' AS user_id, ['a', 'b'] AS tokens")


def test_publishing_deletes_the_runs_private_tables(tmp_path):
    """A published run is never resumed, so its private tables go at publish (a weekly refresh
    would otherwise keep every run's raw text and working tables in the warehouse): its own DuckDB
    file is deleted, also when an interrupted publish is completed later; other runs' files stay,
    and so do the ledger's charges."""
    from dpngram.orchestration.plan import run_release
    from dpngram.release.publish import publish_run

    ctx = staged_for_publish(tmp_path, "published")
    hidden = staged_for_publish(tmp_path, "hidden")
    for run in (ctx, hidden):
        with_private_table(run)
    with ctx.ledger() as ledger:
        ledger.record("faults", "published", "dpne", 1.5, 0.0, [])
    assert run_tables(ctx) == ["sentences"] and "published.duckdb" in run_files(ctx)
    publish_run(ctx)
    assert run_files(ctx) == [] and latest(ctx) == ctx.release.final
    assert run_tables(hidden) == ["sentences"]  # another run's tables are not touched
    with ctx.ledger() as ledger:
        assert ledger.run("published")["state"] == "closed"
        assert ledger.spent("faults", "published").epsilon == pytest.approx(1.5)  # the charge stays

    publish_killed_before_latest(hidden)
    assert run_tables(hidden) == ["sentences"]  # killed before the delete: kept until completed
    run_release(hidden.config)  # the re-run completes the publish
    assert run_files(hidden) == []


def run_schema_exists(ctx: RunContext) -> bool:
    from dpngram.engines.sql import run_schema_name

    with ctx.warehouse(read_only=True) as wh:
        found = wh.con.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?",
            [run_schema_name(ctx.run_id)],
        ).fetchone()
    return bool(found and found[0])


def test_commands_on_a_published_run_do_not_create_its_warehouse_file_again(tmp_path, capsys):
    """The commands that meet a published run (a re-run with its id, a retried publish task, the
    CLI's quarantine summary of the run) must not leave a new private file of it behind in the
    warehouse: nothing would delete it but gc, which lists it as a leftover of a closed run."""
    from dpngram.cli import main
    from dpngram.cli.console import print_run_quarantine
    from dpngram.release.publish import AlreadyPublished, publish_run

    ctx = staged_for_publish(tmp_path, "published")
    with_private_table(ctx)
    publish_run(ctx)
    assert run_files(ctx) == []
    with pytest.raises(AlreadyPublished):
        prepare(ctx.config)
    assert publish_run(ctx) == ctx.release.final  # a retried publish task: completes nothing
    rerun = ["run", "--input", ctx.config.input, "--out", ctx.config.out, "--warehouse", ctx.config.warehouse]
    assert main([*rerun, "--dataset", "faults", "--run-id", "published", "-q"]) == 2
    assert "is already published" in capsys.readouterr().err
    print_run_quarantine(ctx.config, stderr=True)
    assert run_files(ctx) == []
    assert main(["gc", "--warehouse", ctx.config.warehouse]) == 0
    assert "private tables" not in capsys.readouterr().out
    unpublished = staged_for_publish(tmp_path, "staged")
    with unpublished.warehouse(), unpublished.engine():  # an unpublished run gets its file and schema
        pass
    assert run_schema_exists(unpublished) and "staged.duckdb" in run_files(unpublished)


def test_gc_deletes_the_private_tables_a_closed_run_left_in_the_warehouse(tmp_path, capsys):
    """A closed run's private file still in this machine's warehouse directory (a worker that ran
    one of its tasks, a delete that failed): gc lists it and --delete deletes it; an unpublished
    run's tables are left to the unpublished-run rules."""
    from dpngram.cli import main
    from dpngram.release.publish import publish_run

    old = staged_for_publish(tmp_path, "published-long-ago")
    publish_run(old)
    with_private_table(old)  # as a worker's copy, or a failed delete, left them
    pending = RunContext(prepare(make_config(tmp_path, run_id="still-open")))
    with_private_table(pending)
    gc = ["gc", "--warehouse", old.config.warehouse]
    assert main(gc) == 0
    out = capsys.readouterr().out
    assert "would delete: the private tables of run published-long-ago, closed in the ledger" in out
    assert "--delete" in out
    assert "still-open" not in out  # untouched for 24 h: not listed yet
    assert run_tables(old) == ["sentences"]
    assert main([*gc, "--delete"]) == 0
    assert "deleting: the private tables of run published-long-ago" in capsys.readouterr().out
    assert run_files(old) == [] and run_tables(pending) == ["sentences"]
    assert main(gc) == 0
    assert "private tables" not in capsys.readouterr().out


def test_gc_delete_removes_a_failed_spark_runs_table_directory(tmp_path, capsys):
    """A failed run on the Spark engine keeps its private Parquet tables in the warehouse directory
    (spark_warehouse's default, WAREHOUSE/spark); gc --delete removes them with the run, reading
    the engine from the run's fingerprint in the ledger."""
    from dpngram.cli import main
    from dpngram.engines.spark import default_root
    from dpngram.engines.sql import run_schema_name

    config = make_config(tmp_path, run_id="failed-on-spark", engine="spark")
    prepare(config)
    tables = Path(default_root(config.warehouse)) / run_schema_name("failed-on-spark") / "sentences"
    assert Path(config.warehouse) in tables.parents
    tables.mkdir(parents=True)
    (tables / "part-0.parquet").write_bytes(b"private")
    gc = ["gc", "--warehouse", config.warehouse, "--older-than", "0"]
    assert main([*gc, "--delete"]) == 0
    assert "deleted 1 unpublished run" in capsys.readouterr().out
    assert not tables.parent.exists() and Path(default_root(config.warehouse)).is_dir()


def test_publishing_a_spark_run_removes_its_local_table_directory(tmp_path):
    """With the Spark engine the private tables are Parquet directories under spark_warehouse:
    the run's directory is removed at publish (a local path; other runs' are kept)."""
    from dpngram.engines.sql import run_schema_name
    from dpngram.release.context import record_part
    from dpngram.release.publish import publish_run

    spark_root = tmp_path / "spark-tables"
    config = make_config(tmp_path, run_id="sparkrun", engine="spark", spark_warehouse=str(spark_root))
    ctx = RunContext(prepare(config))
    record_part(ctx, "validation", {"success": True})
    ctx.release.path("report.json").write_text("{}")
    mine = spark_root / run_schema_name("sparkrun") / "sentences"
    other = spark_root / run_schema_name("another") / "sentences"
    for table in (mine, other):
        table.mkdir(parents=True)
        (table / "part-0.parquet").write_bytes(b"private")
    publish_run(ctx)
    assert not mine.parent.exists() and other.is_dir()


def test_a_real_kill_at_the_publish_rename_is_completed_by_the_rerun(tmp_path):
    """A process killed (os._exit) right after the rename, before the `latest` swap."""
    import subprocess
    import sys
    import textwrap

    ctx = staged_for_publish(tmp_path, "killed")
    script = textwrap.dedent(
        f"""
        import json
        import os
        from dpngram.config import RunConfig
        from dpngram.release.context import RunContext
        from dpngram.release.layout import Release
        from dpngram.release.publish import publish_run

        def kill(self):
            os._exit(9)

        Release.point_latest = kill
        publish_run(RunContext(RunConfig.build(**json.loads({ctx.config.to_json()!r}))))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr[-2000:]
    assert ctx.release.published and latest(ctx) is None
    from dpngram.orchestration.plan import run_release

    run_release(ctx.config)
    assert latest(ctx) == ctx.release.final and committed() == (0.0, 0.0)
