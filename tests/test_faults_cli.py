"""Trust under faults, round two (issue 26, item 7): the CLI's rough edges. Each failure is one
line that says what is wrong and what to do: filesystem failures name the path and the flag,
negative numbers reach validation, duplicate budget shares and a zero memory limit are refused,
an older dpngram's one-file warehouse is refused saying to import its ledger, `dpngram ingest`
prints the quarantine summary it refers to, and the ledger shows tiny ε readably.
docs/faults.md, "Rough edges". Fast: no full run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpngram.cli import main


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_input(path: Path, n: int = 3) -> Path:
    lines = [json.dumps({"user_id": f"u{i}", "text": f"hello there number {i}."}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# -- negative numbers parse, then validation refuses them by name ---------------------------------
@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [("--epsilon", "-1e-7", "epsilon"), ("--epsilon", "-1.5", "epsilon"), ("--delta", "-1E-9", "delta")],
)
def test_a_negative_number_is_refused_by_validation_not_by_argparse(tmp_path, capsys, flag, value, field):
    src = write_input(tmp_path / "in.jsonl")
    code, _, err = run_cli(
        capsys, "run", "--input", str(src), "--out", str(tmp_path / "o"),
        "--warehouse", str(tmp_path / "w.duckdb"), flag, value,
    )  # fmt: skip
    line = one_error_line(err)
    assert code == 2
    assert "expected one argument" not in err
    assert line.startswith(f"dpngram: error: {field}: ") and "greater than 0" in line


def test_a_negative_number_after_a_flag_is_kept_as_its_value_in_the_resume_command():
    from dpngram.cli.main import _join_negative_values

    assert _join_negative_values(["run", "--epsilon", "-1e-7", "-q"]) == ["run", "--epsilon=-1e-7", "-q"]
    assert _join_negative_values(["run", "-q", "--epsilon", "2"]) == ["run", "-q", "--epsilon", "2"]


# -- duplicate stage shares, zero memory ------------------------------------------------------------
@pytest.mark.parametrize(
    "budget", ["dpne=1,dpne=1", "dpne=0.5,synth=0.2,dpne=0.3", '{"dpne": 0.5, "dpne": 0.2}']
)
def test_a_stage_given_twice_in_the_budget_split_is_refused(tmp_path, capsys, budget):
    src = write_input(tmp_path / "in.jsonl")
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--input", str(src), "--out", str(tmp_path / "o"), "--stage-budget", budget])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "stage 'dpne' is given twice" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("limit", ["0GB", "0MB", "0.1MB", "512KB"])
def test_a_memory_limit_below_one_megabyte_is_refused(tmp_path, capsys, limit):
    src = write_input(tmp_path / "in.jsonl")
    code, _, err = run_cli(
        capsys, "ingest", "--input", str(src), "--out", str(tmp_path / "o"),
        "--warehouse", str(tmp_path / "w.duckdb"), "--memory-limit", limit, "-q",
    )  # fmt: skip
    assert code == 2
    assert one_error_line(err).startswith("dpngram: error: memory_limit: must be at least 1MB")
    assert not (tmp_path / "w.duckdb").exists()


# -- filesystem failures name the path, the flag and what to do -------------------------------------
def test_an_out_that_is_a_file_is_one_line_naming_the_flag_and_the_fix(tmp_path, capsys):
    src = write_input(tmp_path / "in.jsonl")
    blocker = tmp_path / "out-is-a-file"
    blocker.write_text("not a directory")
    code, _, err = run_cli(
        capsys, "run", "--input", str(src), "--out", str(blocker),
        "--warehouse", str(tmp_path / "w.duckdb"), "--delta", "1e-3", "-q",
    )  # fmt: skip
    line = one_error_line(err)
    assert code == 2  # refused before anything is reserved (release/publish.py::prepare)
    assert "unexpected" not in line
    assert f"--out {blocker}" in line and "Not a directory" in line
    assert "nothing was reserved" in line and "remove it or choose another path" in line


def test_a_warehouse_below_a_file_is_one_line_naming_the_flag_and_the_fix(tmp_path, capsys):
    src = write_input(tmp_path / "in.jsonl")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    warehouse = blocker / "w.duckdb"
    code, _, err = run_cli(
        capsys, "ingest", "--input", str(src), "--out", str(tmp_path / "o"),
        "--warehouse", str(warehouse), "-q",
    )  # fmt: skip
    line = one_error_line(err)
    assert code == 1
    assert "unexpected" not in line
    assert f"--warehouse {warehouse}" in line
    assert "choose another path" in line


def old_warehouse_file(tmp_path: Path) -> Path:
    """The one-file warehouse of an older dpngram (which also held the privacy ledger)."""
    import duckdb

    path = tmp_path / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE SCHEMA ledger")
    con.execute("CREATE TABLE ledger.privacy_spend (dataset VARCHAR, run_id VARCHAR, stage VARCHAR)")
    con.close()
    return path


def test_a_warehouse_that_is_a_file_is_refused_in_one_line_saying_to_import_its_ledger(tmp_path, capsys):
    """Warehouses are directories now (one DuckDB file per run) and the ledger is kept apart: a
    --warehouse naming an older dpngram's one-file warehouse is refused before anything is read,
    staged or reserved, saying to import its ledger; the file is left as it was."""
    src = write_input(tmp_path / "in.jsonl")
    old = old_warehouse_file(tmp_path)
    before = old.read_bytes()
    code, _, err = run_cli(
        capsys, "run", "--input", str(src), "--out", str(tmp_path / "o"), "--warehouse", str(old), "-q",
    )  # fmt: skip
    line = one_error_line(err)
    assert code == 2 and line.startswith("dpngram: error: warehouse: ")
    assert f"{old} is a file" in line and "import its ledger" in line and "pass a directory" in line
    assert not (tmp_path / "o").exists() and old.read_bytes() == before


@pytest.mark.parametrize("command", ["run", "gc"])
def test_the_refusal_of_a_warehouse_file_names_the_import_command_that_works(tmp_path, capsys, command):
    src = write_input(tmp_path / "in.jsonl")
    old = old_warehouse_file(tmp_path)
    argv = ["--warehouse", str(old)]
    if command == "run":
        argv = ["--input", str(src), "--out", str(tmp_path / "o"), *argv, "-q"]
    code, _, err = run_cli(capsys, command, *argv)
    line = one_error_line(err)
    assert code == 2 and "unexpected" not in line
    assert f"`dpngram ledger --import {old}`" in line


def test_a_full_disk_says_to_free_space(tmp_path, capsys, monkeypatch):
    import errno

    from dpngram.cli import commands

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "o" / "x.parquet"))

    monkeypatch.setattr(commands, "cmd_sample", full)
    code, _, err = run_cli(capsys, "sample", "--out", str(tmp_path / "o"))
    line = one_error_line(err)
    assert code == 1 and "unexpected" not in line
    assert "No space left on device" in line and "free space" in line


# -- `dpngram ingest` prints the quarantine summary its error refers to ----------------------------
def test_ingest_without_a_usable_record_prints_the_quarantine_summary(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('not json\n{"user_id": "u"}\n', encoding="utf-8")
    code, out, err = run_cli(
        capsys, "ingest", "--input", str(bad), "--out", str(tmp_path / "o"),
        "--warehouse", str(tmp_path / "w.duckdb"), "-q",
    )  # fmt: skip
    assert code == 2
    assert "see the quarantine summary" in err
    assert "malformed_json" in err and "missing_text" in err  # the summary it refers to
    assert "not json" not in out + err  # reasons and counts only, never a record


# -- the ledger shows tiny epsilons readably -----------------------------------------------------------
def test_format_epsilon_never_shows_a_spend_as_zero():
    from dpngram.cli.console import format_epsilon

    assert format_epsilon(1e-6) == "1.000e-06"
    assert format_epsilon(4.9e-5) == "4.900e-05"
    assert format_epsilon(5e-5) == "0.0001"
    assert format_epsilon(0.25) == "0.2500"
    assert format_epsilon(0.0) == "0.0000"


def test_the_ledger_shows_an_epsilon_below_5e_5_in_scientific_notation(tmp_path, capsys):
    from dpngram.core.accounting import PrivacyEvent
    from dpngram.release.ledger import open_ledger

    ledger_path = tmp_path / "ledger.duckdb"
    with open_ledger(str(ledger_path)) as ledger:
        ledger.record("tiny", "r1", "synth", 2e-7, 0.0, [PrivacyEvent("synth", "laplace", epsilon=2e-7)])
    code, out, _ = run_cli(capsys, "ledger", "--dataset", "tiny", "--ledger", str(ledger_path))
    assert code == 0
    assert "2.000e-07" in out
    assert "0.0000" not in out
