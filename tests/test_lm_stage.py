"""Language-model stage (lm/build.py) end to end on the tiny sample corpus: route A with the
run's private schema DROPPED (it reads released files only), route B (lmplz on θ samples), the
binary loads and scores with kenlm, the GX suite on the ARPA passes, the model card and report
part exist, and the stage sits between validate and report in the release plan."""

from __future__ import annotations

import json

import pytest
from conftest import run_through_dpne

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError
from dpngram.lm import build
from dpngram.lm.arpa import read_arpa
from dpngram.orchestration.plan import release_steps
from dpngram.release import layout
from dpngram.release.context import RunContext, read_parts
from dpngram.stages import bayes as bayes_stage
from dpngram.stages import lm as lm_stage
from dpngram.text.sample import write_sample


@pytest.fixture(scope="module")
def released_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lm-stage")
    files = write_sample(tmp / "sample", n_users=300, seed=5, vocab_size=300, public_sentences=3000)
    ctx = run_through_dpne(
        tmp,
        files,
        epsilon=8.0,
        delta=1e-4,
        max_n=3,
        stage_budget={"dpne": 0.5, "bayes": 0.5},
        memory_limit="1GB",
        bayes_vocab_size=4000,
        lm_sample_sentences=3000,
    )
    bayes_stage.run_bayes(ctx)
    with ctx.warehouse() as wh:  # route A must not need any private table
        wh.con.execute(f"DROP SCHEMA {ctx.schema} CASCADE")
    return ctx, files


def test_route_a_from_released_files_only(released_run):
    import kenlm

    ctx, files = released_run
    summary = lm_stage.run_lm(ctx)
    with ctx.warehouse() as wh:
        assert (
            wh.con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = ?", [ctx.schema]
            ).fetchone()[0]
            == 0
        )
    root = ctx.release.root
    assert summary["paths"] == [layout.MODEL_ARPA, layout.MODEL_BINARY, layout.MODEL_CARD]
    assert json.dumps(summary)  # JSON-able for XCom
    model = kenlm.Model(str(root / layout.MODEL_BINARY))
    assert model.order == 3
    score = model.score("the", bos=True, eos=True)
    assert -20 < score < 0
    declared, tables = read_arpa(root / layout.MODEL_ARPA)
    part = read_parts(ctx)["lm"]
    assert part["route"] == "arpa" and part["validation"]["success"] is True
    assert part["counts"] == {str(n): c for n, c in declared.items()}
    assert part["metrics"]["perplexity"] > 1 and 0 <= part["metrics"]["oov_rate"] <= 1
    released_vocab = set(build.ReleasedInputs(root).vocabulary())
    unigrams = set(tables.tables[1]["ngram"].to_list())
    assert released_vocab <= unigrams  # the DP vocabulary is the model's vocabulary
    assert unigrams - released_vocab <= {"<s>", "</s>", "<unk>"} | set(
        w for g in tables.tables[3]["ngram"].to_list() for w in g.split(" ")
    )
    card = (root / layout.MODEL_CARD).read_text()
    assert "user-level (" in card and "kenlm.Model" in card and "| 3 |" in card


def test_route_b_lmplz_on_theta_samples(released_run, tmp_path):
    import kenlm

    ctx, _ = released_run
    arpa = tmp_path / "b.arpa"
    info = build.build_route_b(build.ReleasedInputs(ctx.release.root), ctx.config, arpa, seed=1)
    assert info["route"] == "lmplz" and "samples_from_trigram_dist" in info["sources"]
    build.compile_binary(arpa, tmp_path / "b.binary")
    assert kenlm.Model(str(tmp_path / "b.binary")).order == 3


def test_theta_samples_follow_the_chain(released_run):
    ctx, _ = released_run
    theta = build.ReleasedInputs(ctx.release.root).theta()
    tri = set(zip(theta["w1"], theta["w2"], theta["w3"], strict=True))
    bi = set(zip(theta["w2"], theta["w3"], strict=True))
    tri_contexts, bi_contexts = {t[:2] for t in tri}, {b[0] for b in bi}
    sentences = list(build.sample_from_theta(theta, 500, seed=3))
    assert len(sentences) == 500
    for s in sentences:
        padded = ["<s>", *s, "</s>"]
        assert "<s>" not in s and "</s>" not in s and len(s) <= build.MAX_SENTENCE_TOKENS + 2
        assert tuple(padded[:3]) in tri if len(padded) >= 3 else True
        for i in range(1, len(padded) - 2):  # every step is a trigram of θ or a back-off bigram
            step = tuple(padded[i : i + 3])
            if step in tri or step[1:] in bi:
                continue
            # ... except the end a sentence is given when the chain has nowhere to go (docstring of
            # sample_from_theta): no trigram continues (w1, w2) and no bigram continues w2
            assert step[2] == "</s>" and i == len(padded) - 3, step
            assert step[:2] not in tri_contexts and step[1] not in bi_contexts, step


def test_plan_order_and_configuration(released_run):
    ctx, _ = released_run
    names = [step.name for step in release_steps(ctx.config)]
    assert names.index("validation") < names.index("lm") == names.index("report") - 1
    off = ctx.config.with_values(**{"lm_route": "off"})
    assert "lm" not in [step.name for step in release_steps(off)]
    with pytest.raises(ConfigError, match="lm_order"):
        build.route_a_counts(
            build.ReleasedInputs(ctx.release.root), ctx.config.with_values(**{"lm_order": 4})
        )
    with pytest.raises(ConfigError, match="lm_order"):
        RunConfig.build(input="x", out="y", lm_order=7)


def test_auto_route_keeps_the_better_candidate(released_run):
    ctx, files = released_run
    auto = RunContext(ctx.config.with_values(**{"lm_route": "auto", "lm_eval_text": str(files["public"])}))
    summary = lm_stage.run_lm(auto)
    part = read_parts(auto)["lm"]
    candidates = part["candidates"]
    assert set(candidates) == {"arpa", "lmplz"}
    best = min(candidates, key=lambda r: candidates[r]["perplexity"])
    assert part["route"] == summary["method"] == best
    assert part["metrics"]["text"] == "user-supplied"
    assert part["metrics"]["perplexity"] == pytest.approx(candidates[best]["perplexity"], rel=1e-6)
    leftovers = sorted(p.name for p in (auto.release.root / "model").iterdir())
    assert leftovers == ["MODEL_CARD.md", "model.arpa", "model.binary"]
