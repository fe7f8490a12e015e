"""Downstream users see the same release as before the package restructure: the same released files
and columns, the same report.json sections, CLI flags and Airflow Params
(tests/data/release_layout.json, recorded from the pre-restructure code).

Deliberate changes: report fragments and timings are named after the steps, which now have one
name everywhere (task id, stage, report part, ledger entry); :data:`RENAMED` maps the old names.
Issue 17: wall-clock timings (``report.timings/``, ``timings_seconds``) are no longer published:
they grow with the private input's size and go to the operator file outside the release."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dpngram.cli.parser import build_parser
from dpngram.config import DEFAULT_STAGE_BUDGET, RunConfig
from dpngram.orchestration.plan import run_release
from dpngram.text.sample import write_sample

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = json.loads((ROOT / "tests" / "data" / "release_layout.json").read_text(encoding="utf-8"))

#: Old report.parts/report.timings names -> the step's one name.
RENAMED = {
    "dpne.summary": "dpne.kgrams",
    "vocabulary": "dpne.k1",
    "kgrams": "dpne.kgrams",
    "validate": "validation",
    "baseline_dpsu-all": "dpne",
    **{f"dpne_level_{k}": f"dpne.k{k}" for k in range(2, 13)},
}


#: Parameters added since the recording (new options with defaults; nothing renamed):
#: flat name -> its choices (None when it takes a value).
ADDED_PARAMS: dict[str, list[str] | None] = {
    "budget_calibration": ["joint", "per-stage"],
    "dpsu_policy": ["dp-sips", "policy-gaussian", "weighted"],
    "dpsu_policy_cap": None,
    "dpsu_sips_rounds": None,
    "dpsu_sips_ratio": None,
    "dpne_threshold_delta": None,
    "lm_verdict_holdout": None,
    "input_extensions": None,  # issue 26: text-directory confinement
    "follow_external_symlinks": None,
    "synth_max_sequences": None,  # issue 26: output bounds
    "synth_max_nodes": None,
    "max_quarantine_fraction": None,  # issue 28: refuse a mostly malformed input
    "dpne_public_vocabulary": None,  # issue 24: the vocabulary's public domain
    "dpsu_sips_admission": None,  # issue 24: DP-SIPS admission by the first round
    "dpsu_sips_admission_floor": None,
    "dpsu_sips_admission_ratio": None,
    "dpsu_sips_admission_max_n": None,
    "lm_count_power": None,  # issue 25: square-root counts per user
    "dpsu_new_words": None,  # issue 52: the vocabulary's new-words round
    "dpsu_new_words_share": None,
    "dpsu_new_words_funding": ["dpne", "vocabulary"],
    "lm_public_prune": None,  # issue 52 item 4: the opt-in pruned public model
}


#: Parameters removed since the recording, deliberately: issue 25 retired the language-model routes
#: 'arpa' and 'lmplz' (no better than the public-only model, docs/lm.md) and the options only they
#: read. A configuration that still passes one is refused with that reason (tests/test_lm_stage.py).
REMOVED_PARAMS = {"lm_theta_tokens", "lm_public_weight", "lm_kgram_count", "lm_sample_sentences", "lm_memory"}


#: Choices removed since the recording, with the parameters above: flat name -> the removed ones.
REMOVED_CHOICES = {"lm_route": {"arpa", "lmplz"}}


#: Columns added to released files since the recording (nothing removed or renamed).
ADDED_COLUMNS: dict[str, list[list[str]]] = {
    "released/vocabulary.parquet": [["kgram_seed", "bool"]],  # issue 24: seeds of the k-gram levels
}


#: Issue 50: flags added to commands (not run parameters) and removed from them: the privacy ledger
#: is its own store (``--ledger URL`` wherever a command charges or reads it), no longer a schema of
#: the warehouse file (``dpngram ledger`` lost ``--warehouse``); ``dpngram ledger`` also exports the
#: charges, imports an older warehouse's ledger and forecasts against a refresh schedule.
ADDED_FLAGS = {
    "run": {"--ledger"},
    "baseline": {"--ledger"},
    "ingest": {"--ledger"},
    "ledger": {"--ledger", "--export", "--import", "--schedule"},
}
REMOVED_FLAGS = {"ledger": {"--warehouse"}}
ADDED_FLAG_CHOICES = {"ledger": {"--export": ["csv", "json"]}}

#: Issue 50: files added to every release: MANIFEST.json (each file's size and SHA-256, which a
#: consumer checks what it downloaded against).
ADDED_FILES = ["MANIFEST.json"]


#: Of those, the on/off ones (their flag also has a ``--no-`` form).
ADDED_SWITCHES = {"follow_external_symlinks", "dpsu_sips_admission"}


def _renamed(path: str) -> str:
    folder, _, name = path.rpartition("/")
    if folder in ("report.parts", "report.timings"):
        stem = name.removesuffix(".json")
        return f"{folder}/{RENAMED.get(stem, stem)}.json"
    return path


def _subparsers() -> dict[str, object]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {"<top>": parser, **action.choices}


@pytest.mark.parametrize("command", sorted(LAYOUT["cli"]))
def test_cli_flags_and_choices_are_unchanged(command: str) -> None:
    parser = _subparsers()[command]
    flags = sorted(s for a in parser._actions for s in a.option_strings)
    choices = {
        max(a.option_strings, key=len): sorted(a.choices)
        for a in parser._actions
        if a.option_strings and a.choices
    }
    recorded_flags, recorded_choices = LAYOUT["cli"][command]["flags"], LAYOUT["cli"][command]["choices"]
    if "--sigma-decay" in recorded_flags:  # a command that takes the run parameters
        added = {"--" + name.replace("_", "-"): ch for name, ch in ADDED_PARAMS.items()}
        switches = ["--no-" + name.replace("_", "-") for name in ADDED_SWITCHES]
        removed = {"--" + name.replace("_", "-") for name in REMOVED_PARAMS}
        recorded_flags = sorted({*recorded_flags, *added, *switches} - removed)
        recorded_choices = {**recorded_choices, **{f: ch for f, ch in added.items() if ch}}
        for name, gone in REMOVED_CHOICES.items():
            flag = "--" + name.replace("_", "-")
            recorded_choices[flag] = sorted(set(recorded_choices[flag]) - gone)
    recorded_flags = sorted(
        {*recorded_flags, *ADDED_FLAGS.get(command, ())} - REMOVED_FLAGS.get(command, set())
    )
    recorded_choices = {**recorded_choices, **ADDED_FLAG_CHOICES.get(command, {})}
    assert flags == recorded_flags
    assert choices == recorded_choices


def test_dag_params_are_unchanged() -> None:
    params = set(RunConfig.param_schema()) - {"run_id"}
    recorded = LAYOUT["dag"]["dpngram_release"]["param_names"]
    assert sorted(params) == sorted({*recorded, *ADDED_PARAMS} - REMOVED_PARAMS)


@pytest.mark.slow
def test_a_full_release_has_the_same_files_columns_and_report_sections(tmp_path: Path) -> None:
    """The full run of the recorded commands (every stage budgeted), here on a smaller sample:
    which files exist does not depend on the data (a level that releases nothing writes an empty
    file)."""
    expected = LAYOUT["releases"]["full"]
    sample = write_sample(tmp_path / "sample", n_users=1500, seed=7)
    config = RunConfig.build(
        input=str(sample["users"]),
        public=str(sample["public"]),
        out=str(tmp_path / "out"),
        warehouse=str(tmp_path / "wh.duckdb"),
        epsilon=4,
        delta=1e-5,
        stage_budget=dict(DEFAULT_STAGE_BUDGET),  # every stage, as a run with the defaults
        run_id="layoutcheck-full",
    )
    progress: dict[str, dict] = {}
    release = Path(run_release(config, on_stage=lambda n, e, s: progress.update({n: s}))["release"])
    files = sorted(
        p.relative_to(release).as_posix()
        for p in release.rglob("*")
        if p.is_file() and not p.relative_to(release).as_posix().startswith("validation/data_docs/")
    )
    recorded = [_renamed(f) for f in expected["files"] if not f.startswith("report.timings/")]
    assert files == sorted([*recorded, *ADDED_FILES])
    for relative, columns in expected["parquet"].items():
        schema = pq.read_schema(release / relative)
        assert [[f.name, str(f.type)] for f in schema] == columns + ADDED_COLUMNS.get(relative, []), relative
    report = json.loads((release / "report.json").read_text(encoding="utf-8"))
    assert sorted(report) == sorted(set(expected["report_keys"]) - {"timings_seconds"})
    # what each stage's progress line says it charged is the report's (and the CLI table's) number,
    # and the charges add up to the composed total
    charged = {n: s["charged_epsilon"] for n, s in progress.items() if s.get("charged_epsilon") is not None}
    stages = report["privacy"]["stages"]
    assert charged == {n: stages[n]["charged_epsilon"] for n in stages}
    total = report["privacy"]["total"]
    assert sum(charged.values()) == pytest.approx(total["epsilon_exact"], rel=1e-9)
    # issue 28, item 5: the report's per-stage charges are the ledger's entries (the run's delta
    # charged once, not a share repeated per level); epsilon rounded for people, exact beside it
    from dpngram.release.ledger import open_ledger
    from dpngram.release.publish import release_asset_metadata

    with open_ledger() as ledger:
        entries = [e for e in ledger.entries(config.dataset) if e["run_id"] == report["run_id"]]
    ledger = {e["stage"]: (e["epsilon"], e["delta"]) for e in entries}
    assert set(ledger) <= set(stages) and len(ledger) >= 4
    assert {n: (stages[n]["charged_epsilon"], stages[n]["charged_delta"]) for n in ledger} == ledger
    assert sum(s.get("charged_delta", 0.0) for s in stages.values()) == pytest.approx(config.delta, rel=1e-12)
    assert total["epsilon"] == float(f"{total['epsilon_exact']:.6g}")
    extra = release_asset_metadata(release)["ngrams"]
    assert (extra["epsilon"], extra["epsilon_exact"]) == (total["epsilon"], total["epsilon_exact"])
    assert extra["ledger_epsilon_exact"] == pytest.approx(sum(e for e, _ in ledger.values()), rel=1e-12)
    assert extra["ledger_epsilon"] == float(f"{extra['ledger_epsilon_exact']:.6g}")
    page = (release / "report.html").read_text(encoding="utf-8")
    stages_html = page[page.index("<h2>Stages</h2>") :]
    assert '{"' not in stages_html and "[{" not in stages_html  # tables, not JSON dumps
    assert stages_html.count("<table>") > len(report["stages"])  # nested details are tables too
    assert not [
        f for f in files if "seconds" in (release / f).read_text(errors="ignore") and f.endswith(".json")
    ]
