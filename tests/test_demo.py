"""``dpngram demo`` without Airflow: the sample set-up holds out users of the private domain and
points the DAG's ``lm_eval_text`` at them; the final output labels both evaluation texts, and
says the same thing as the model card: the card's DP verdict first, then the held-out users'
comparison as a demo-only check, with how it relates to the verdict (``demo.model_lines``).

The DAG run itself is covered by tests/test_airflow_standalone.py and ``make demo``.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dpngram import demo
from dpngram.config import RunConfig
from dpngram.lm.build import EVAL_TEXT_ROW, HELDOUT_PUBLIC_ROW
from dpngram.lm.model_card import users_needed_line, verdict_line
from dpngram.lm.open_model import HELDOUT_EVERY
from dpngram.text.public import read_public_corpus
from dpngram.text.tokenizer import tokenize_texts

USERS = 40
HELDOUT = 15


def _records(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def set_up(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], dict[str, Path]]:
    paths = demo.demo_paths(tmp_path_factory.mktemp("repo"))
    return paths, demo.ensure_sample(paths, USERS, heldout_users=HELDOUT)


def test_heldout_users_are_disjoint_from_the_input(set_up: tuple[dict[str, Path], dict[str, Path]]) -> None:
    paths, sample = set_up
    assert all(p.is_file() and p.parent == paths["sample"] for p in sample.values())
    assert len({sample["users"], sample["heldout_users"], sample["heldout_text"], sample["public"]}) == 4
    ingested = {r["user_id"] for r in _records(sample["users"])}
    heldout_records = _records(sample["heldout_users"])
    heldout = {r["user_id"] for r in heldout_records}
    assert len(ingested) == USERS and len(heldout) == HELDOUT
    assert not ingested & heldout
    # the evaluation text is exactly the held-out users' documents, one a line, tokenised alike
    lines = sample["heldout_text"].read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(heldout_records)
    expected = [s for doc in tokenize_texts([r["text"] for r in heldout_records]) for s in doc]
    assert list(read_public_corpus(sample["heldout_text"])) == expected
    # and none of it is an ingested document
    assert not {r["text"] for r in heldout_records} & {r["text"] for r in _records(sample["users"])}


def test_the_dag_conf_evaluates_on_the_heldout_users(set_up: tuple[dict[str, Path], dict[str, Path]]) -> None:
    paths, sample = set_up
    conf = demo.demo_conf(paths, sample, max_n=4, epsilon=2.0)
    assert conf["input"] == str(sample["users"]) and conf["public"] == str(sample["public"])
    assert conf["lm_eval_text"] == str(sample["heldout_text"])
    assert conf["max_n"] == 4 and conf["epsilon"] == 2.0
    # the pipeline accepts it as the model's evaluation text
    config = RunConfig.build(**conf)
    assert config.lm.eval_text == str(sample["heldout_text"]) and config.input != config.lm.eval_text
    assert "lm_counts" in config.stage_budget  # the mixture route, whose λ is chosen for the private domain


def test_sample_is_reused_and_rewritten_when_the_heldout_count_changes(tmp_path: Path) -> None:
    paths = demo.demo_paths(tmp_path)
    first = demo.ensure_sample(paths, 20, heldout_users=5)
    stamps = {k: p.stat().st_mtime_ns for k, p in first.items()}
    assert demo.ensure_sample(paths, 20, heldout_users=5) == first
    assert {k: p.stat().st_mtime_ns for k, p in first.items()} == stamps  # nothing rewritten
    ingested = _records(first["users"])
    second = demo.ensure_sample(paths, 20, heldout_users=8)
    assert len({r["user_id"] for r in _records(second["heldout_users"])}) == 8
    assert _records(second["users"]) == ingested  # the input stays the same users and text
    with pytest.raises(ValueError):
        demo.ensure_sample(paths, 20, heldout_users=0)


def _metrics(ppl: float, top3: float) -> dict[str, Any]:
    return {"open_vocab_perplexity": ppl, "top3_accuracy": top3, "top1_accuracy": top3 / 2}


def _release(tmp_path: Path, comparison: dict[str, Any]) -> Path:
    release = tmp_path / "release"
    release.mkdir()
    report = {
        "released": {"ngrams_per_k": {"2": 10, "3": 4}},
        "privacy": {"total": {"epsilon": 4.0}, "delta": 1e-7},
        "model": {"comparison": comparison},
    }
    # sorted keys, as the pipeline writes report.json (release.layout.write_json_atomic)
    (release / "report.json").write_text(json.dumps(report, sort_keys=True), encoding="utf-8")
    return release


def _printed(release: Path, label: str = demo.HELDOUT_USERS_LABEL) -> str:
    console = Console(width=200, record=True, highlight=False, soft_wrap=True)
    demo._print_outputs(console, release, label)
    return console.export_text()


def test_output_shows_both_evaluation_texts(tmp_path: Path) -> None:
    public_row = f"{HELDOUT_PUBLIC_ROW} (1 in {HELDOUT_EVERY}; neither model trained on them)"
    comparison = {  # the order step lm writes them in
        public_row: {"released model": _metrics(115.8, 0.301), "public-only model": _metrics(110.8, 0.312)},
        EVAL_TEXT_ROW: {"released model": _metrics(81.4, 0.352), "public-only model": _metrics(120.2, 0.287)},
    }
    out = _printed(_release(tmp_path, comparison))
    lines = out.splitlines()
    users = lines.index(f"    {demo.HELDOUT_USERS_LABEL}:")
    public = lines.index(f"    {demo.PUBLIC_TEXT_LABEL}:")
    assert users < public  # the private domain, the model's purpose, comes first

    def rows(start: int) -> dict[str, tuple[float, str]]:  # in the order printed
        found = {}
        for line in lines[start + 1 : start + 4]:
            m = re.match(
                r"\s+(released model|public-only model)\s+open-vocabulary perplexity\s+([\d.]+), "
                r"top-3 next word ([\d.]+%)$",
                line,
            )
            if m:
                found[m.group(1)] = (float(m.group(2)), m.group(3))
        return found

    assert rows(users) == {"released model": (81.4, "35.2%"), "public-only model": (120.2, "28.7%")}
    assert rows(public) == {"released model": (115.8, "30.1%"), "public-only model": (110.8, "31.2%")}
    assert list(rows(users)) == list(rows(public)) == ["released model", "public-only model"]
    verdicts = [line.strip() for line in lines if "÷" in line]
    assert verdicts == [
        f"released ÷ public-only perplexity {81.4 / 120.2:.2f} (released model better here)",
        f"released ÷ public-only perplexity {115.8 / 110.8:.2f} (public-only model better here)",
    ]
    assert EVAL_TEXT_ROW not in out and "trained on them" not in out  # short labels only


def test_output_without_eval_text_shows_the_public_rows_only(tmp_path: Path) -> None:
    public_row = f"{HELDOUT_PUBLIC_ROW} (1 in {HELDOUT_EVERY}; neither model trained on them)"
    comparison = {
        public_row: {"released model": _metrics(90.0, 0.3), "public-only model": _metrics(95.0, 0.3)}
    }
    out = _printed(_release(tmp_path, comparison))
    assert demo.PUBLIC_TEXT_LABEL in out and demo.HELDOUT_USERS_LABEL not in out
    assert out.count("open-vocabulary perplexity") == 2


@pytest.mark.parametrize(
    ("released", "public", "verdict"),
    [
        (100.0, 101.5, "about even: within 2%"),
        (100.0, 98.5, "about even: within 2%"),
        (95.0, 100.0, "released model better"),
    ],
)
def test_small_perplexity_differences_read_as_even(
    tmp_path: Path, released: float, public: float, verdict: str
) -> None:
    comparison = {
        EVAL_TEXT_ROW: {"released model": _metrics(released, 0.3), "public-only model": _metrics(public, 0.3)}
    }
    out = _printed(_release(tmp_path, comparison))
    assert f"released ÷ public-only perplexity {released / public:.2f} ({verdict} here)" in out


def _verdict(said: str, released: float = 88.0, public: float = 92.0) -> dict[str, Any]:
    """report.json's ``model.private_domain``: a DP verdict saying ``said``."""
    return {
        "released_perplexity": released,
        "public_only_perplexity": public,
        "interval": {"level": 0.95, "released_perplexity": [67.0, 117.0], "log_ratio": [-0.25, 0.16]},
        "log_ratio": math.log(released / public),
        "verdict": said,
        "epsilon": 2.38,
        "loss_clip_nats": 12.0,
    }


def _model(verdict: dict[str, Any] | None, released: float, public: float) -> dict[str, Any]:
    public_row = f"{HELDOUT_PUBLIC_ROW} (1 in {HELDOUT_EVERY}; neither model trained on them)"
    return {
        "private_domain": verdict,
        "comparison": {
            public_row: {"released model": _metrics(121.4, 0.36), "public-only model": _metrics(126.7, 0.36)},
            EVAL_TEXT_ROW: {
                "released model": _metrics(released, 0.35),
                "public-only model": _metrics(public, 0.33),
            },
        },
    }


def _text(lines: list[str]) -> str:
    """The lines as one text (the demo wraps its sentences at demo.WIDTH)."""
    return " ".join(line.strip() for line in lines)


def _check_note(lines: list[str]) -> str:
    """The sentences under the held-out users' rows, up to the public text's label."""
    start = lines.index(f"    {demo.HELDOUT_USERS_LABEL}:")
    end = lines.index(f"    {demo.PUBLIC_TEXT_LABEL}:")
    return _text([line for line in lines[start + 1 : end] if "÷" not in line and "perplexity " not in line])


def test_where_the_verdict_cannot_tell_the_comparison_is_a_demo_only_check() -> None:
    verdict = _verdict("cannot tell")
    lines = demo.model_lines(_model(verdict, 126.2, 141.5), demo.HELDOUT_USERS_LABEL)
    assert all(len(line) <= demo.WIDTH for line in lines[1:])
    users = lines.index(f"    {demo.HELDOUT_USERS_LABEL}:")
    head = _text(lines[1:users])  # the card's verdict, word for word, before any comparison
    card = verdict_line(verdict).removeprefix("**Verdict:** ")
    needed = users_needed_line(verdict)
    assert needed is not None and "as many users as this dataset" in needed
    assert head == f"DP verdict (as in the model card): {card} {needed}"
    assert "demo-only check on synthetic held-out users" in lines[users]
    note = _check_note(lines)
    assert note == f"The DP verdict cannot tell at this dataset's size; this check can. {demo.ONLY_IN_A_DEMO}"
    assert "(released model better here)" in lines[users + 3]  # the check's own reading stays


@pytest.mark.parametrize(
    ("said", "released", "public", "note"),
    [
        ("released model better", 126.2, 141.5, "Agrees with the DP verdict (released model better)."),
        ("public-only model better", 141.5, 126.2, "Agrees with the DP verdict (public-only model better)."),
        (
            "public-only model better",
            126.2,
            141.5,
            "Disagrees with the DP verdict (public-only model better):",
        ),
        ("released model better", 100.0, 101.0, "Disagrees with the DP verdict (released model better):"),
    ],
)
def test_where_the_verdict_tells_the_demo_says_whether_the_check_agrees(
    said: str, released: float, public: float, note: str
) -> None:
    verdict = _verdict(said)
    lines = demo.model_lines(_model(verdict, released, public), demo.HELDOUT_USERS_LABEL)
    head = _text(lines[1 : lines.index(f"    {demo.HELDOUT_USERS_LABEL}:")])
    assert head == "DP verdict (as in the model card): " + verdict_line(verdict).removeprefix("**Verdict:** ")
    assert "as many users" not in head  # a verdict that tells needs no more users
    text = _check_note(lines)
    assert text.startswith(note) and text.endswith(demo.ONLY_IN_A_DEMO)
    assert "cannot tell" not in text


def test_without_a_verdict_the_demo_prints_the_cards_none_and_the_check() -> None:
    lines = demo.model_lines(_model(None, 126.2, 141.5), demo.HELDOUT_USERS_LABEL)
    assert _text(lines[1 : lines.index(f"    {demo.HELDOUT_USERS_LABEL}:")]).startswith(
        "DP verdict (as in the model card): none: this run released no private-domain verdict"
    )
    assert _check_note(lines) == demo.ONLY_IN_A_DEMO


def test_a_verdict_without_comparisons_is_still_shown_and_no_model_shows_nothing() -> None:
    lines = demo.model_lines({"private_domain": _verdict("cannot tell"), "comparison": {}}, "x")
    assert len(lines) > 1 and "the data cannot tell" in _text(lines)
    assert demo.model_lines({}, demo.HELDOUT_USERS_LABEL) == []
