"""The dpngram command line: a whole run end to end, errors as one line, the ledger, budgets."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpngram.cli import main
from dpngram.cli.flags import config_from_args
from dpngram.cli.parser import build_parser
from dpngram.config import RunConfig
from dpngram.config.run import flat_fields
from dpngram.release.context import run_id_from

ROOT = Path(__file__).resolve().parent.parent
SECRET = "zyzzyvaquux"


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> dict[str, Path]:
    from dpngram.text.sample import write_sample

    return write_sample(tmp_path_factory.mktemp("sample"), n_users=200, seed=7, public_sentences=200)


def with_garbage(users: Path, target: Path, garbage: int) -> tuple[Path, int]:
    """``users`` plus ``garbage`` malformed lines (holding SECRET); returns the file and its rows."""
    with gzip.open(users, "rt", encoding="utf-8") as src:
        lines = src.read().splitlines()
    with gzip.open(target, "wt", encoding="utf-8") as dst:
        dst.write("\n".join([*lines, *([f"{{{SECRET} not json"] * garbage)]) + "\n")
    return target, len(lines) + garbage


#: Malformed lines in the shared run's input: below the default max_quarantine_fraction (5%).
GARBAGE = 3


@pytest.fixture(scope="module")
def finished_run(sample, tmp_path_factory):
    """One `dpngram run --json` (T = 2) shared by the tests that inspect its results; its input has
    :data:`GARBAGE` malformed lines (quarantined, below the limit)."""
    base = tmp_path_factory.mktemp("run")
    users, _ = with_garbage(sample["users"], base / "users.jsonl.gz", GARBAGE)
    args = [
        "run",
        "--input",
        str(users),
        "--out",
        str(base / "out"),
        "--warehouse",
        str(base / "wh.duckdb"),
        "--dataset",
        "clitest",
        "--max-n",
        "2",
        "--epsilon",
        "2",
        "--lifetime-epsilon",
        "3",
        "--run-id",
        "first",
        "--json",
        "--quiet",
    ]
    return base, args


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def first_result(finished_run):
    base, args = finished_run
    proc = subprocess.run(
        [sys.executable, "-m", "dpngram.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    return base, proc


def test_run_end_to_end_publishes_a_release(first_result):
    base, proc = first_result
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    release = Path(summary["release"])
    assert release == (base / "out" / "clitest" / "runs" / "first").resolve()
    assert (base / "out" / "clitest" / "latest").resolve() == release
    for name in (
        "report.json",
        "report.html",
        "released/vocabulary.parquet",
        "released/kgrams.parquet",
        "validation/results.json",
        "validation/data_docs/index.html",
    ):
        assert (release / name).is_file(), name
    report = json.loads((release / "report.json").read_text())
    assert summary["epsilon_total"] == pytest.approx(report["privacy"]["total"]["epsilon"])
    assert summary["epsilon_total"] <= 2.0 * (1 + 1e-6)
    assert summary["validation_passed"] is True
    assert set(summary["ngrams_per_k"]) <= {"1", "2"}
    assert summary["ngrams_per_k"] == report["released"]["ngrams_per_k"]
    assert "Traceback" not in proc.stderr


def test_ledger_shows_the_runs_spend(first_result, capsys):
    base, proc = first_result
    assert proc.returncode == 0
    code, out, _ = run_cli(capsys, "ledger", "--dataset", "clitest", "--json")
    assert code == 0
    history = json.loads(out)
    assert {e["run_id"] for e in history["entries"]} == {"first"}
    report = json.loads((base / "out" / "clitest" / "runs" / "first" / "report.json").read_text())
    # the ledger holds what the run was charged (with several stages, the stages' charges add up:
    # more than the composed total the report also states)
    charged = report["privacy"]["ledger_charged"]["epsilon"]
    assert history["total"]["epsilon"] == pytest.approx(
        report["privacy"]["ledger_charged"]["epsilon_exact"], rel=1e-9
    )
    assert report["privacy"]["total"]["epsilon"] <= charged * (1 + 1e-9)
    code, out, _ = run_cli(capsys, "ledger", "--dataset", "clitest")
    assert code == 0 and "first" in out and "total" in out
    # it says where the ledger is: the per-user default, whatever the working directory
    assert "ledger: " in out and "dpngram/ledger.duckdb" in out


def test_quarantine_below_the_limit_runs_and_the_counts_stay_operator_only(first_result):
    """The run proceeds; exact counts go to stderr (--json) and the operator file, the published
    report says only that the check passed and where the counts are."""
    base, proc = first_result
    assert proc.returncode == 0, proc.stderr[-2000:]
    with gzip.open(base / "users.jsonl.gz", "rt") as fh:
        rows = sum(1 for _ in fh)
    assert f"quarantine: {GARBAGE} of {rows:,} rows read were quarantined" in proc.stderr
    assert "malformed_json  the line is not valid JSON" in proc.stderr and SECRET not in proc.stderr
    operator = json.loads((base / "wh.duckdb" / "operator" / "first" / "operator_report.json").read_text())
    assert operator["quarantine"] == {
        "rows_read": rows,
        "rows_quarantined": GARBAGE,
        "fraction": GARBAGE / rows,
        "max_quarantine_fraction": 0.05,
        "reasons": {"malformed_json": GARBAGE},
    }
    release = base / "out" / "clitest" / "runs" / "first"
    report = json.loads((release / "report.json").read_text())
    assert report["stages"]["ingest"]["quarantine"]["max_quarantine_fraction"] == 0.05
    assert "operator_report.json" in report["stages"]["ingest"]["quarantine"]["counts"]
    assert "Input quarantine" in (release / "report.html").read_text()
    published = "".join(p.read_text(errors="ignore") for p in release.rglob("*.json"))
    assert "malformed_json" not in published and f'"rows_read": {rows}' not in published


def test_quarantine_above_the_limit_is_refused_with_nothing_reserved(sample, tmp_path, capsys):
    from dpngram.release.ledger import open_ledger

    users, rows = with_garbage(sample["users"], tmp_path / "bad.jsonl.gz", 0)
    garbage = int(0.06 * rows) + 1  # just above 5% of the rows read once it is added
    users, rows = with_garbage(sample["users"], tmp_path / "bad.jsonl.gz", garbage)
    assert garbage / rows > 0.05
    code, out, err = run_cli(
        capsys, "run", "--input", str(users), "--out", str(tmp_path / "out"),
        "--warehouse", str(tmp_path / "wh.duckdb"), "--dataset", "bad", "--run-id", "refused", "--quiet",
    )  # fmt: skip
    assert code == 2 and out == ""
    line = next(x for x in err.splitlines() if x.startswith("dpngram: error:"))
    assert (
        f"ingest refused the input: {garbage:,} of {rows:,} rows were quarantined" in line
        and "more than max_quarantine_fraction 0.05 allows; top reasons: malformed_json" in line
        and "quarantine in " in line  # where to look
        and "run 'refused' spent nothing: its budget reservation was released" in line
    ), err
    assert f"quarantine: {garbage:,} of {rows:,} rows read were quarantined" in err  # the summary
    assert SECRET not in out + err
    with open_ledger() as ledger:
        assert ledger.run("refused")["state"] == "suspended"  # its reservation was released
        assert ledger.committed("bad").epsilon == 0 and ledger.entries("bad") == []
    assert (
        not (tmp_path / "out" / "bad" / "latest").exists()
        and not (tmp_path / "out" / "bad" / "runs" / "refused").exists()
    )


def test_ledger_unknown_dataset_is_an_error_naming_the_known_ones(first_result, capsys):
    base, proc = first_result
    assert proc.returncode == 0
    code, out, err = run_cli(capsys, "ledger", "--dataset", "clitset")
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    assert "dataset 'clitset' is not in the ledger" in err and "known datasets: " in err
    assert "clitest" in err.strip().split("known datasets: ", 1)[1].split(", ")  # and the module's others


def test_ledger_table_fits_80_columns(tmp_path, capsys, monkeypatch):
    """A long Airflow run id folds inside its column instead of widening the table past 80."""
    from dpngram.release.ledger import open_ledger

    run_id = "manual__2026-11-24T10_00_00.123456_00_00"
    with open_ledger() as ledger:
        for stage in ("dpne.k1", "dpne.k2", "lm_counts"):
            ledger.record("chats", run_id, stage, 1.3333333, 3.3e-8, [])
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(capsys, "ledger", "--dataset", "chats")
    assert code == 0
    lines = out.splitlines()
    # every line but the ledger's location, a path as long as the machine makes it
    assert max(len(line) for line in lines if not line.startswith("ledger: ")) <= 80, out
    assert sum(line.startswith("ledger: ") for line in lines) == 1, out
    first = next(i for i, line in enumerate(lines) if "dpne.k1" in line)
    col = lines[first].index("manual__")
    pieces = [lines[first][col:].split()[0]]
    for line in lines[first + 1 :]:
        if line[:col].strip():
            break
        pieces.append(line[col:].split()[0])
    assert "".join(pieces) == run_id, out  # folded onto the next line, not cut
    assert "4.0000" in out and "1 run(s)" in out


def test_second_run_over_the_lifetime_budget_is_refused_before_ingest(first_result, sample, capsys):
    base, proc = first_result
    assert proc.returncode == 0
    code, out, err = run_cli(
        capsys,
        "run",
        "--input",
        str(sample["users"]),
        "--out",
        str(base / "out"),
        "--warehouse",
        str(base / "wh.duckdb"),
        "--dataset",
        "clitest",
        "--max-n",
        "2",
        "--epsilon",
        "2",
        "--lifetime-epsilon",
        "3",
        "--run-id",
        "second",
        "--quiet",
    )
    assert code == 2
    assert err.startswith("dpngram: error: ") and "lifetime" in err and len(err.strip().splitlines()) == 1
    assert not (
        base / "out" / "clitest" / "runs" / "second.staging"
    ).exists()  # refused before anything was staged
    assert (base / "out" / "clitest" / "latest").resolve().name == "first"


def test_missing_input_is_one_line_exit_2_without_traceback(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpngram.cli",
            "run",
            "--input",
            str(tmp_path / "nope.jsonl"),
            "--out",
            str(tmp_path / "out"),
            "--warehouse",
            str(tmp_path / "wh.duckdb"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"dpngram: error: input: {tmp_path / 'nope.jsonl'} does not exist"]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "out").exists()


def test_hadoop_uri_input_needs_the_spark_engine(tmp_path):
    """hdfs:// and s3a:// inputs are read by Spark itself: refused on DuckDB with the reason,
    not checked against the local file system on Spark; local inputs must exist on both."""
    from dpngram.cli.commands import check_input
    from dpngram.config import RunConfig
    from dpngram.core.errors import ConfigError

    def config(engine: str, path: str) -> RunConfig:
        return RunConfig.build(
            input=path, out=str(tmp_path / "out"), warehouse=str(tmp_path / "wh.duckdb"), engine=engine
        )

    for uri in ("hdfs://namenode:8020/corpora/users.jsonl", "s3a://bucket/users.parquet"):
        with pytest.raises(ConfigError, match=r"^input: .* only the Spark engine reads those"):
            check_input(config("duckdb", uri))
        check_input(config("spark", uri))  # accepted: Spark opens it
    local = tmp_path / "users.jsonl"
    for engine in ("duckdb", "spark"):
        with pytest.raises(ConfigError, match=r"^input: .* does not exist$"):
            check_input(config(engine, str(local)))
        with pytest.raises(ConfigError, match=r"^input: .* does not exist$"):
            check_input(config(engine, f"file://{local}"))
    local.write_text("{}\n", encoding="utf-8")
    check_input(config("spark", f"file://{local}"))


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--epsilon", "-1", "epsilon"),
        ("--delta", "1.5", "delta"),
        ("--eta", "1", "eta"),
        ("--max-contribution", "0", "max_contribution"),
        ("--stage-budget", "dpne=0.8,bayes=0.5", "stage_budget"),
    ],
)
def test_bad_parameter_names_the_field(tmp_path, capsys, flag, value, field):
    src = tmp_path / "in.jsonl"
    src.write_text('{"user_id": "u", "text": "hi"}\n')
    code, _, err = run_cli(
        capsys,
        "run",
        "--input",
        str(src),
        "--out",
        str(tmp_path / "out"),
        "--warehouse",
        str(tmp_path / "wh.duckdb"),
        flag,
        value,
    )
    assert code == 2
    assert err.startswith(f"dpngram: error: {field}: ") and len(err.strip().splitlines()) == 1


def test_every_config_field_is_a_flag():
    parser = build_parser()
    for command in ("run", "baseline"):
        extra = ["--method", "dpsu-all"] if command == "baseline" else []
        args = parser.parse_args(
            [
                command,
                *extra,
                "--input",
                "x",
                "--out",
                "y",
                "--max-n",
                "3",
                "--no-lowercase",
                "--stage-budget",
                "dpne=0.5,bayes=0.25",
                "--pruning",
                "single",
            ]
        )
        assert {name for name, *_ in flat_fields()} <= set(vars(args)), command
        config = config_from_args(args)
        assert (config.dpne.max_n, config.lowercase, config.dpne.pruning) == (3, False, "single")
        assert config.stage_budget == {"dpne": 0.5, "bayes": 0.25}
        assert (
            config.epsilon == RunConfig.model_fields["epsilon"].default
        )  # unset flags keep RunConfig's defaults


def test_ingest_prints_the_operator_summary_but_no_raw_text(tmp_path, capsys):
    lines = [json.dumps({"user_id": f"u{i}", "text": f"Hello there number {i}. Fine day."}) for i in range(5)]
    lines += [f"{{broken json {SECRET}", json.dumps({"user_id": "", "text": f"{SECRET} again"}), ""]
    src = tmp_path / "in.jsonl.gz"
    with gzip.open(src, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    code, out, err = run_cli(
        capsys,
        "ingest",
        "--input",
        str(src),
        "--warehouse",
        str(tmp_path / "wh.duckdb"),
        "--out",
        str(tmp_path / "out"),
        "--delta",
        "1e-3",
        "--quiet",
    )
    assert code == 0, err
    assert "malformed_json" in out and "empty_user_id" in out and "rows quarantined" in out
    assert SECRET not in out + err


def test_unexpected_errors_are_one_line_and_database_messages_withheld(tmp_path, capsys, monkeypatch):
    import duckdb

    from dpngram.orchestration import plan as run_module

    src = tmp_path / "in.jsonl"
    src.write_text('{"user_id": "u", "text": "hi"}\n')

    def boom(config, **kwargs):
        raise duckdb.ConversionException(f"Could not convert string '{SECRET}' to INT32")

    monkeypatch.setattr(run_module, "run_release", boom)
    code, _, err = run_cli(
        capsys,
        "run",
        "--input",
        str(src),
        "--out",
        str(tmp_path / "out"),
        "--warehouse",
        str(tmp_path / "wh.duckdb"),
    )
    assert code == 1
    # the error is one line (the lines before it are the run's notes: no public corpus here)
    errors = [line for line in err.splitlines() if line.strip() and not line.startswith("note: ")]
    assert SECRET not in err and "--debug" in err and len(errors) == 1
    with pytest.raises(duckdb.ConversionException):
        main(["run", "--input", str(src), "--out", str(tmp_path / "out"), "--debug"])


def test_validation_failure_exits_1_with_failure_lines(tmp_path, capsys, monkeypatch):
    from dpngram.core.errors import ValidationFailed
    from dpngram.orchestration import plan as run_module

    src = tmp_path / "in.jsonl"
    src.write_text('{"user_id": "u", "text": "hi"}\n')

    def failing(config, **kwargs):
        raise ValidationFailed(
            [
                "released.kgrams.table: expect_column_values_to_be_between on column "
                "not_downward_closed (expected 0)"
            ]
        )

    monkeypatch.setattr(run_module, "run_release", failing)
    code, _, err = run_cli(
        capsys,
        "run",
        "--input",
        str(src),
        "--out",
        str(tmp_path / "out"),
        "--warehouse",
        str(tmp_path / "wh.duckdb"),
    )
    assert code == 1
    assert "not_downward_closed" in err and "not published" in err and "Traceback" not in err


def test_sample_command_writes_the_corpus(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "sample", "--out", str(tmp_path / "s"), "--users", "20", "--seed", "3")
    assert code == 0
    assert (tmp_path / "s" / "users.jsonl.gz").is_file() and (tmp_path / "s" / "public.txt.gz").is_file()
    assert "users.jsonl.gz" in out


def test_airflow_style_run_ids_work_on_the_command_line():
    assert RunConfig.build(input="x", out="y", run_id=run_id_from("manual__2026-01-01T00:00:00+00:00")).run_id


def test_progress_line_says_what_was_released() -> None:
    """A newcomer reads a count next to each stage: the line names the unit and the file."""
    from dpngram.cli.console import released_detail

    assert released_detail({"released_rows": 9251, "paths": ["/r/released/lm_counts.parquet"]}) == (
        "9,251 rows → lm_counts.parquet"
    )
    assert released_detail(
        {"released_rows": 236645, "paths": ["model/model.arpa", "model/model.binary"]}
    ) == ("236,645 n-grams → model.arpa")
    assert released_detail({"released_rows": 7}) == "7 released"


def test_a_stage_progress_line_shows_the_epsilon_the_summary_table_charges(capsys):
    """The progress line and the final "Privacy spent" table must not show two different ε for one
    stage: the line shows what the stage added to the run's composed total (``charged_epsilon``),
    not its own ε composed alone (larger; report.html shows both)."""
    from dpngram.cli.console import StageProgress

    with StageProgress(enabled=True) as progress:
        progress.on_stage("lm_counts", "start", {})
        progress.on_stage(
            "lm_counts",
            "done",
            {
                "epsilon": 1.25,
                "charged_epsilon": 0.8125,
                "released_rows": 12,
                "paths": ["r/lm_counts.parquet"],
            },
        )
        progress.on_stage("lm", "start", {})
        progress.on_stage("lm", "done", {"epsilon": 0.0, "released_rows": 3, "paths": ["m/model.arpa"]})
    err = capsys.readouterr().err
    assert "lm_counts — 12 rows → lm_counts.parquet, ε charged 0.8125" in err
    assert "1.25" not in err
    assert "lm — 3 n-grams → model.arpa" in err and "lm — 3 n-grams → model.arpa," not in err


def test_a_run_says_before_it_starts_what_will_not_run_and_why(tmp_path, capsys, monkeypatch):
    """Without --public the default split's bayes stage cannot run and the language model has no
    public part: the operator reads both before the first stage, one line each."""
    from dpngram.orchestration import plan

    def stop(config, **kwargs):
        raise RuntimeError("stopped after the notices")

    monkeypatch.setattr(plan, "run_release", stop)
    users = tmp_path / "u.jsonl"
    users.write_text('{"user_id": "a", "text": "hello there"}\n', encoding="utf-8")
    base = ["run", "--input", str(users), "--out", str(tmp_path / "o"), "--warehouse", str(tmp_path / "w.db")]
    code, _, err = run_cli(capsys, *base)
    assert code != 0 and "stopped after the notices" in err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 2
    assert notes[0].startswith("note: bayes will not run: no public corpus")
    assert notes[1].startswith("note: no public corpus: the language model's vocabulary is the DP vocabulary")
    public = tmp_path / "p.txt"
    public.write_text("hello there\n", encoding="utf-8")
    code, _, err = run_cli(capsys, *base, "--public", str(public))
    assert code != 0 and "note:" not in err  # nothing to say with a public corpus and the default split
    code, _, err = run_cli(capsys, *base, "--quiet")
    assert "note:" not in err
