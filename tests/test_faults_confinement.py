"""Trust under faults, round two (issue 26, item 5): a text-directory input is confined to its
directory. A symbolic link out of it is never read unless `follow_external_symlinks` allows it
(and the report and the run's notes then say so); symlinked subdirectories are not descended;
only the declared extensions (`input_extensions`, default .txt) are read. Everything else is
quarantined unread, with a reason the operator sees. docs/faults.md, "Input confinement"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dpngram.config import RunConfig
from dpngram.engines.duckdb import Warehouse
from dpngram.engines.ingest import ingest_file
from dpngram.release.context import RunContext, read_parts
from dpngram.release.publish import prepare
from dpngram.stages.ingest import run_ingest

CANARY = "passwd-canary-4417"  # text that lives OUTSIDE the input directory


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """An input directory with a good file, links in and out, a non-.txt file and a linked
    directory; a secret file and a secret directory beside it."""
    outside = tmp_path / "etc"
    (outside / "secret-dir").mkdir(parents=True)
    secret = outside / "passwd"
    secret.write_text(f"root:x:0:0:{CANARY}:/root:/bin/sh\n", encoding="utf-8")
    (outside / "secret-dir" / "inner.txt").write_text(f"inner {CANARY}\n", encoding="utf-8")
    root = tmp_path / "docs"
    (root / "team").mkdir(parents=True)
    (root / "alice.txt").write_text("Hello there. Fine day.", encoding="utf-8")
    (root / "team" / "bob.txt").write_text("Bob writes here.", encoding="utf-8")
    (root / "link.txt").symlink_to(secret)  # the reported attack: ingested as user 'link'
    (root / "relative.txt").symlink_to(Path("..") / "etc" / "passwd")
    (root / "alias.txt").symlink_to(root / "team" / "bob.txt")  # a link inside: allowed
    (root / "dangling.txt").symlink_to(root / "nowhere.txt")
    (root / "notes.csv").write_text(f"user,text\nu,{CANARY} valid utf-8\n", encoding="utf-8")
    (root / "linked-dir").symlink_to(outside / "secret-dir", target_is_directory=True)
    return {"root": root, "secret": secret}


def ingest(root: Path, **kw: Any) -> tuple[list[tuple], list[tuple]]:
    config = RunConfig.build(input=str(root), out=str(root.parent / "out"), **kw)
    with Warehouse(":memory:") as wh:
        wh.con.execute("CREATE SCHEMA s")
        ingest_file(wh, "s", config)
        quarantine = wh.con.execute("SELECT source, reason, raw FROM s.quarantine ORDER BY source").fetchall()
        raw = wh.con.execute("SELECT user_id, text FROM s.raw_text ORDER BY user_id").fetchall()
    return quarantine, raw


def test_a_symlink_out_of_the_directory_is_quarantined_unread(layout):
    quarantine, raw = ingest(layout["root"])
    reasons = {source: reason for source, reason, _ in quarantine}
    assert reasons["link.txt"] == "symlink_outside_input"
    assert reasons["relative.txt"] == "symlink_outside_input"
    users = [user for user, _ in raw]
    assert "link" not in users and "relative" not in users
    assert all(CANARY not in text for _, text in raw)
    assert all(CANARY not in r for _, _, r in quarantine)  # not read at all, not even into quarantine


def test_a_symlink_inside_the_directory_is_read(layout):
    _, raw = ingest(layout["root"])
    assert dict(raw)["alias"] == "Bob writes here."
    assert sorted(user for user, _ in raw) == ["alias", "alice", "team/bob"]


def test_other_extensions_are_quarantined_unread_with_a_reason(layout):
    quarantine, raw = ingest(layout["root"])
    rows = {source: (reason, r) for source, reason, r in quarantine}
    assert rows["notes.csv"] == ("unsupported_extension", "")  # valid UTF-8, still not read
    assert "notes" not in [user for user, _ in raw]


def test_a_symlinked_directory_is_not_descended(layout):
    quarantine, raw = ingest(layout["root"], follow_external_symlinks=True)
    assert ("linked-dir", "symlinked_directory", "") in quarantine
    assert not any(user.startswith("linked-dir") for user, _ in raw)


def test_a_dangling_link_is_quarantined(layout):
    quarantine, _ = ingest(layout["root"])
    assert ("dangling.txt", "not_a_regular_file", "") in quarantine


def test_the_flag_allows_links_out_of_the_directory(layout):
    quarantine, raw = ingest(layout["root"], follow_external_symlinks=True)
    assert CANARY in dict(raw)["link"]
    assert "symlink_outside_input" not in {reason for _, reason, _ in quarantine}


def test_declared_extensions_are_read(layout):
    quarantine, raw = ingest(layout["root"], input_extensions=".txt,.csv")
    assert "notes" in dict(raw)
    assert "unsupported_extension" not in {reason for _, reason, _ in quarantine}


def test_extensions_are_validated():
    from dpngram.core.errors import ConfigError

    for bad in ("txt", ".gz", ",", ".t xt"):
        with pytest.raises(ConfigError, match="input_extensions"):
            RunConfig.build(input="x", out="o", input_extensions=bad)
    assert RunConfig.build(input="x", out="o", input_extensions=" .TXT, .md ").text_extensions() == (
        ".txt",
        ".md",
    )


def test_the_report_and_the_run_notes_say_when_links_out_are_followed(layout, tmp_path):
    from dpngram.config.budget_plan import run_notices

    def part(**kw: Any) -> dict[str, Any]:
        config = RunConfig.build(
            input=str(layout["root"]),
            out=str(tmp_path / "out"),
            warehouse=str(tmp_path / "wh" / "w.duckdb"),
            delta=1e-3,
            max_quarantine_fraction=1,  # most of this directory is quarantined on purpose
            **kw,
        )
        ctx = RunContext(prepare(config))
        run_ingest(ctx)
        return read_parts(ctx)["ingest"]["text_directory"]

    assert part()["external_symlinks"].startswith("not followed")
    followed = part(run_id="followed", follow_external_symlinks=True)
    assert followed["external_symlinks"].startswith("followed")
    assert followed["extensions"] == [".txt"]
    config = RunConfig.build(input="x", out="o", follow_external_symlinks=True)
    assert any("follow_external_symlinks is on" in n for n in run_notices(config))
    assert not any("follow_external_symlinks" in n for n in run_notices(config.with_values(
        follow_external_symlinks=False
    )))  # fmt: skip


def test_the_cli_ingest_shows_the_reason_to_the_operator(layout, tmp_path, capsys):
    from dpngram.cli import main

    code = main(
        [
            "ingest",
            "--input",
            str(layout["root"]),
            "--out",
            str(tmp_path / "o"),
            "--warehouse",
            str(tmp_path / "w.duckdb"),
            "--delta",
            "1e-3",
            "-q",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "symlink_outside_input" in out and "--follow-external-symlinks" in out
    assert "unsupported_extension" in out and "symlinked_directory" in out
    assert CANARY not in out
