"""Language-model stage (stages/lm.py, lm/build.py) end to end on the tiny sample corpus: the mixture
with the run's private schema DROPPED (it reads released files only), the binary loads and scores
with kenlm, the GX suite on the ARPA passes, the model card and report part exist, the stage sits
between validation and report in the release plan, and the retired routes ('arpa', 'lmplz') and
their parameters are refused with their reason."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import run_through_dpne

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.lm import build
from dpngram.lm.arpa_file import read_arpa
from dpngram.orchestration.plan import release_steps
from dpngram.release import layout
from dpngram.release.context import read_parts
from dpngram.stages import lm as lm_stage
from dpngram.stages import lm_counts as lm_counts_stage
from dpngram.text.sample import write_sample


def _through_dpne(tmp, files, **config_values):
    """A small run through DPNE with half of ε for lm_counts (the stage tests' settings)."""
    return run_through_dpne(
        tmp,
        files,
        epsilon=8.0,
        delta=1e-4,
        max_n=3,
        stage_budget={"dpne": 0.5, "lm_counts": 0.5},
        memory_limit="1GB",
        lm_public_vocab_size=400,
        lm_count_domain=800,
        **config_values,
    )


@pytest.fixture(scope="module")
def released_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lm-stage")
    files = write_sample(tmp / "sample", n_users=300, seed=5, vocab_size=300, public_sentences=3000)
    ctx = _through_dpne(tmp, files, lm_eval_text=str(files["public"]))
    lm_counts_stage.run_lm_counts(ctx, noise=NoiseSource.seeded_for_tests(5))
    with ctx.warehouse() as wh:  # the model must not need any private table
        wh.con.execute(f"DROP SCHEMA {ctx.schema} CASCADE")
    return ctx, files


def test_mixture_from_released_files_only(released_run):
    import kenlm

    ctx, _ = released_run
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
    assert summary["method"] == build.MIXTURE_ROUTE and summary["epsilon"] == 0.0
    assert json.dumps(summary)  # JSON-able for XCom
    model = kenlm.Model(str(root / layout.MODEL_BINARY))
    assert model.order == 3
    assert -20 < model.score("the", bos=True, eos=True) < 0
    declared, tables = read_arpa(root / layout.MODEL_ARPA)
    parts = read_parts(ctx)
    part = parts["lm"]
    assert part["route"] == "mixture" and part["validation"]["success"] is True
    assert part["counts"] == {str(n): c for n, c in declared.items()}
    assert part["mix_weight"] == parts["lm_counts"]["mix_weight"]
    assert part["private_domain"] == parts["lm_counts"].get("private_domain")
    # the open vocabulary: every DP word and the public words V_LM keeps are unigrams of the model
    released_vocab = set(build.ReleasedInputs(root).vocabulary())
    unigrams = set(tables.tables[1]["ngram"].to_list())
    assert released_vocab <= unigrams
    assert len(unigrams - {"<s>", "</s>", "<unk>"}) == part["vocabulary"]["model"]
    # both comparison rows (held-out public sentences, lm_eval_text), each with both models
    comparison = part["comparison"]
    assert len(comparison) == 2 and build.EVAL_TEXT_ROW in comparison
    assert any(row.startswith(build.HELDOUT_PUBLIC_ROW) for row in comparison)
    for row in comparison.values():
        assert set(row) == {"released model", "public-only model"}
        assert all(m["open_vocab_perplexity"] > 1 for m in row.values())
    card = (root / layout.MODEL_CARD).read_text()
    assert "user-level (" in card and "kenlm.Model" in card and "| 3 |" in card
    assert "route: **mixture**" in card and "lm_theta_tokens" not in card
    leftovers = sorted(p.name for p in (root / "model").iterdir())
    assert leftovers == ["MODEL_CARD.md", "model.arpa", "model.binary"]


def test_the_held_out_public_row_scores_the_released_model_itself(released_run):
    """The card's held-out public row is the released model (its compiled binary, scored by KenLM)
    and the P it was built from, on sentences neither was trained on: P's n-grams (the released
    model's, through the mixture) come from the other public lines only."""
    from dpngram.lm.evaluate import evaluate_file, evaluate_model
    from dpngram.lm.open_model import HELDOUT_EVERY, RELEASED_PART, open_public_model, public_sentences

    ctx, files = released_run
    lm_stage.run_lm(ctx)
    root = ctx.release.root
    comparison = read_parts(ctx)["lm"]["comparison"]
    (row,) = [v for k, v in comparison.items() if k.startswith(build.HELDOUT_PUBLIC_ROW)]
    heldout = build.heldout_text(ctx.config, root)
    kenlm_scored = evaluate_file(root / layout.MODEL_BINARY, heldout, ctx.config.lowercase)
    released = row["released model"]
    assert released["tokens"] == kenlm_scored["tokens"] > 0
    # KenLM holds 32-bit floats of 7-decimal ARPA values; the in-memory scorer 64-bit ones
    assert released["open_vocab_perplexity"] == pytest.approx(kenlm_scored["open_vocab_perplexity"], rel=1e-4)

    # no model of the run saw a held-out sentence: their trigrams are in P only where another line has them
    def trigrams(part: str) -> set[str]:
        padded = (["<s>", *s, "</s>"] for s in public_sentences(files["public"], True, part))
        return {" ".join(t) for p in padded for t in zip(p, p[1:], p[2:], strict=False)}

    def public_model(part: str):
        return open_public_model(
            build.ReleasedInputs(root).vocabulary(),
            str(files["public"]),
            order=3,
            public_cap=ctx.config.lm.public_vocab_size,
            part=part,
        )[2]

    def listed(part: str) -> set[str]:
        return set(public_model(part).tables[3]["ngram"].to_list())

    only_held = trigrams("heldout") - trigrams("train")
    assert only_held & listed("all")  # fitted on every line, P would list some: the check can fail
    assert not only_held & listed(RELEASED_PART)
    assert HELDOUT_EVERY > 1
    # and that P is the row's public-only model (the one the released model was built from)
    public_row = evaluate_model(public_model(RELEASED_PART), heldout, ctx.config.lowercase)
    assert row["public-only model"]["open_vocab_perplexity"] == public_row["open_vocab_perplexity"]


def test_step_lm_scores_both_models_itself_when_lm_counts_did_not(released_run, monkeypatch):
    """Step lm_counts scores P and the model it builds for the verdict (the model step lm writes)
    on the held-out public sentences, and step lm takes that row from its report part; with a part
    that has none (a run without the verdict), step lm loads P and scores both models itself: the
    same row either way."""
    from dpngram.release.context import PARTS_DIR

    ctx, _ = released_run
    part_path = ctx.release.root / PARTS_DIR / "lm_counts.json"
    original = part_path.read_text(encoding="utf-8")
    counts_part = json.loads(original)
    stored = counts_part["heldout_public"]
    assert set(stored) == {"released model", "public-only model"}
    assert stored["released model"] != stored["public-only model"]

    def no_public(*args, **kwargs):
        raise AssertionError("step lm loaded P although step lm_counts stored both scores (and M)")

    with monkeypatch.context() as patched:
        patched.setattr(lm_stage, "load_public", no_public)
        patched.setattr(build, "load_public", no_public)
        lm_stage.run_lm(ctx)
    (row,) = [
        v for k, v in read_parts(ctx)["lm"]["comparison"].items() if k.startswith(build.HELDOUT_PUBLIC_ROW)
    ]
    assert row == stored
    del counts_part["heldout_public"]
    part_path.write_text(json.dumps(counts_part), encoding="utf-8")
    try:
        lm_stage.run_lm(ctx)
        comparison = read_parts(ctx)["lm"]["comparison"]
    finally:
        part_path.write_text(original, encoding="utf-8")
    (recomputed,) = [v for k, v in comparison.items() if k.startswith(build.HELDOUT_PUBLIC_ROW)]
    assert recomputed.keys() == stored.keys()
    for model, metrics in stored.items():
        for key, value in metrics.items():
            # the same model scored by the same code: equal up to summation order
            assert recomputed[model][key] == pytest.approx(value, rel=1e-12), (model, key)


def test_a_failed_held_out_scoring_in_lm_counts_is_left_to_step_lm(tmp_path_factory, monkeypatch):
    """Step lm_counts scores the two models on the held-out public sentences after its noise is
    drawn; a failure there must not fail the step (a step that fails after its draw cannot be run
    again): it logs, stores no scores, and step lm scores both models itself."""
    tmp = tmp_path_factory.mktemp("lm-heldout-failure")
    files = write_sample(tmp / "sample", n_users=200, seed=8, vocab_size=200, public_sentences=2000)
    ctx = _through_dpne(tmp, files)

    def fail(*args, **kwargs):
        raise RuntimeError("scoring failed on purpose")

    with monkeypatch.context() as patched:
        patched.setattr(lm_counts_stage, "heldout_public_metrics", fail)
        lm_counts_stage.run_lm_counts(ctx, noise=NoiseSource.seeded_for_tests(8))
    counts_part = read_parts(ctx)["lm_counts"]
    assert counts_part["heldout_public"] is None and counts_part["private_domain"] is not None
    lm_stage.run_lm(ctx)
    comparison = read_parts(ctx)["lm"]["comparison"]
    (row,) = [v for k, v in comparison.items() if k.startswith(build.HELDOUT_PUBLIC_ROW)]
    assert set(row) == {"released model", "public-only model"}
    assert all(m["open_vocab_perplexity"] > 1 for m in row.values())


def test_the_verdict_scores_the_model_step_lm_writes(tmp_path_factory, monkeypatch):
    """The private-domain verdict's released-model coordinate is the verdict users' clipped mean
    log-loss under the model step lm writes (the mixture merged into one backoff model), scored
    here independently by KenLM from model.binary; not the per-event mixture λ·Q + (1 − λ)·P_β
    the selection scores, which differs where neither model lists an n-gram (checked to differ
    here, so the test can fail)."""
    import math

    import kenlm
    import numpy as np
    import polars as pl

    from dpngram.engines.sql import load_sql
    from dpngram.lm.backoff_scorer import BackoffScorer
    from dpngram.mechanisms import lm_verdict

    tmp = tmp_path_factory.mktemp("lm-verdict")
    files = write_sample(tmp / "sample", n_users=400, seed=11, vocab_size=300, public_sentences=2000)
    ctx = _through_dpne(tmp, files, lm_verdict_holdout=0.2)
    seen = {}
    real = lm_verdict.score_verdict_users

    def recording(wh, schema, **kwargs):
        sql = load_sql("lm_counts/verdict_sentences", schema=schema)
        params = {k: kwargs[k] for k in ("salt", "holdout_per_mille", "verdict_per_mille")}
        seen["rows"] = wh.fetch_arrow(sql, params).to_pylist()
        seen["sums"] = real(wh, schema, **kwargs)
        return seen["sums"]

    monkeypatch.setattr(lm_verdict, "score_verdict_users", recording)
    lm_counts_stage.run_lm_counts(ctx, noise=NoiseSource.seeded_for_tests(7))
    lm_stage.run_lm(ctx)
    model = kenlm.Model(str(ctx.release.root / layout.MODEL_BINARY))
    by_user: dict[str, list[float]] = {}
    for row in seen["rows"]:
        if row["tokens"]:
            scores = model.full_scores(" ".join(row["tokens"]), bos=True, eos=True)
            by_user.setdefault(row["user_id"], []).extend(lp for lp, _, _ in scores)
    losses = [-math.log(10.0) * sum(v) / len(v) for v in by_user.values()]
    clipped = sum(min(max(x, 0.0), lm_verdict.VERDICT_LOSS_CLIP) for x in losses)
    sums = seen["sums"]
    assert sums.users == len(by_user) > 20
    # KenLM's 32-bit values against the scorer's 64-bit tables: ~1e-6 in log10 per event
    assert sums.released_loss == pytest.approx(clipped, rel=0, abs=1e-5 * len(by_user))
    # the per-event mixture gives a different sum: the check above tells the two apart
    part = read_parts(ctx)["lm_counts"]
    _, public, private = build.mixture_components(build.ReleasedInputs(ctx.release.root), ctx.config, part)
    weight, beta = float(part["mix_weight"]), float(part.get("unigram_adaptation", 0.0))
    adapted_model = build.adapted_public(public, private, beta)
    adapted, private = (BackoffScorer.from_model(m) for m in (adapted_model, private))
    per_event = 0.0
    for user in by_user:
        sentences = [r["tokens"] for r in seen["rows"] if r["user_id"] == user and r["tokens"]]
        flat = pl.Series([t for s in sentences for t in s], dtype=pl.String)
        offsets = np.concatenate([[0], np.cumsum([len(s) for s in sentences])])
        p, q = (m.score(m.word_rows(flat), offsets) for m in (adapted, private))
        loss = -np.mean(np.log(weight * 10.0**q + (1 - weight) * 10.0**p))
        per_event += min(max(loss, 0.0), lm_verdict.VERDICT_LOSS_CLIP)
    assert 0 < weight < 1
    assert abs(per_event - sums.released_loss) > 100 * 1e-5 * len(by_user)


@pytest.mark.parametrize("failing", ["comparison", "check"])
def test_a_failure_beside_the_binary_build_leaves_no_binary(released_run, monkeypatch, failing):
    """The binary is compiled while the model is checked and compared (stages/lm.py): when either
    fails, the error reaches the caller, the build is stopped and no binary is left, whole or
    partial (without lm_eval_text, whose row waits for the binary first)."""
    import dpngram.validation
    from dpngram.release.context import RunContext

    run, _ = released_run
    lm = run.config.lm.model_copy(update={"eval_text": None})
    ctx = RunContext(run.config.model_copy(update={"lm": lm}))
    model_dir = ctx.release.root / "model"
    (model_dir / "model.binary").unlink(missing_ok=True)

    def fail(*args, **kwargs):
        raise RuntimeError(f"{failing} failed on purpose")

    if failing == "comparison":
        monkeypatch.setattr(lm_stage, "heldout_public_row", fail)
    else:
        monkeypatch.setattr(dpngram.validation, "validate_model", fail)
    with pytest.raises(RuntimeError, match=f"{failing} failed on purpose"):
        lm_stage.run_lm(ctx)
    assert not [p.name for p in model_dir.iterdir() if p.name.startswith("model.binary")]
    monkeypatch.undo()
    lm_stage.run_lm(ctx)  # and a retry completes
    assert (model_dir / "model.binary").is_file()


def _break_arpa(path, breakage: str) -> None:
    """Edit a written ARPA file the way a faulty writer might: a positive log-probability, or an
    order-2 line that an order-3 line needs as its context removed (its count kept consistent)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    start = {name: lines.index(f"\\{name}-grams:") for name in ("1", "2", "3")}
    if breakage == "positive":
        i = start["1"] + 1
        lines[i] = "\t".join(["0.5", *lines[i].split("\t")[1:]])
    else:
        trigram = lines[start["3"] + 1].split("\t")[1].split(" ")
        context = " ".join(trigram[:2])
        i = next(j for j in range(start["2"] + 1, start["3"]) if lines[j].split("\t")[1:2] == [context])
        del lines[i]
        h = next(j for j, line in enumerate(lines) if line.startswith("ngram 2="))
        lines[h] = f"ngram 2={int(lines[h].split('=')[1]) - 1}"
    path.write_text("\n".join(lines), encoding="utf-8")


@pytest.mark.parametrize(
    "breakage, expected",
    [("positive", ["positive_logprobs", "logprob (max_value=0)"]), ("context", ["arpa_rule_violations"])],
)
def test_the_model_suite_fails_a_broken_arpa_file(released_run, breakage, expected):
    """The GX suite model.arpa reads the file as written: a positive log-probability and a context
    missing one order below (closure, tested by membership) each fail it, by name."""
    from dpngram.validation import validate_model

    ctx, _ = released_run
    path = ctx.release.root / layout.MODEL_ARPA
    if not path.is_file():  # this test alone
        lm_stage.run_lm(ctx)
    original = path.read_bytes()
    assert validate_model(ctx)["success"] is True
    try:
        _break_arpa(path, breakage)
        result = validate_model(ctx)
    finally:
        path.write_bytes(original)
    assert result["success"] is False
    for name in expected:
        assert any(name in failure for failure in result["failures"]), (name, result["failures"])


def test_the_stage_checks_the_tables_it_wrote_and_the_file_against_them(released_run):
    """Step lm hands the suite the tables it wrote (no second parse of the file): a rule broken in
    those tables fails the suite by name, and a file whose bytes differ from the bytes written
    fails it as ``file_differs_from_checked_tables``."""
    import hashlib

    from dpngram.lm.arpa_file import WrittenArpa, read_arpa
    from dpngram.lm.ngram_tables import ArpaModel
    from dpngram.validation import validate_model

    ctx, _ = released_run
    path = ctx.release.root / layout.MODEL_ARPA
    if not path.is_file():  # this test alone
        lm_stage.run_lm(ctx)
    original = path.read_bytes()
    declared, model = read_arpa(path)
    written = WrittenArpa(model, declared, hashlib.sha256(original).hexdigest())
    assert validate_model(ctx, written=written)["success"] is True
    tables = dict(model.tables)
    positive = pl.when(pl.int_range(pl.len()) == 1).then(0.5).otherwise("logprob")
    tables[1] = tables[1].with_columns(logprob=positive)
    broken = validate_model(ctx, written=WrittenArpa(ArpaModel(tables), declared, written.sha256))
    assert broken["success"] is False
    assert any("positive_logprobs" in failure for failure in broken["failures"]), broken["failures"]
    assert not any("file_differs" in failure for failure in broken["failures"])
    try:
        _break_arpa(path, "positive")
        changed = validate_model(ctx, written=written)
    finally:
        path.write_bytes(original)
    assert changed["success"] is False
    assert [f for f in changed["failures"] if "file_differs_from_checked_tables" in f], changed["failures"]


def test_the_model_lm_counts_stored_is_the_model_lm_would_build(released_run, tmp_path):
    """Stage lm_counts stores the model its verdict scored; step lm writes it from the cache. The
    file is byte for byte the one built from the released files with no cache entry, and an entry
    is keyed by the released files' content (another noisy count: another key)."""
    import shutil

    import pyarrow.parquet as pq

    from dpngram.release.identity import public_cache_dir

    ctx, _ = released_run
    part = read_parts(ctx)["lm_counts"]
    inputs = build.ReleasedInputs(ctx.release.root)
    key = build.mixture_key(inputs, ctx.config, part)
    cache = public_cache_dir(ctx.config)
    entries = [cache / kind / key for kind in build.MIXTURE_KINDS]
    assert all(entry.is_dir() for entry in entries)  # stored by stage lm_counts
    built_from = []
    cached = build.build_route_mixture(part, inputs, ctx.config, tmp_path / "cached.arpa")
    assert cached["model"].derived_structure() is not None  # the stored row links came with it
    for entry in entries:
        shutil.rmtree(entry)
    fresh = build.build_route_mixture(
        part,
        inputs,
        ctx.config,
        tmp_path / "fresh.arpa",
        public=lambda: built_from.append(1) or _public(inputs, ctx, part),
    )
    assert built_from == [1]  # a miss builds M from P
    assert (tmp_path / "cached.arpa").read_bytes() == (tmp_path / "fresh.arpa").read_bytes()
    assert fresh["counts"] == cached["counts"] and fresh["vocabulary"] == cached["vocabulary"]
    assert all(entry.is_dir() for entry in entries)  # and stores it again
    # another release of the counts is another key
    counts = ctx.release.root / layout.LM_COUNTS
    original = counts.read_bytes()
    table = pq.read_table(counts)
    try:
        pq.write_table(
            table.set_column(2, "noisy_count", [[v * 1.5 for v in table["noisy_count"].to_pylist()]]), counts
        )
        assert build.mixture_key(inputs, ctx.config, part) != key
    finally:
        counts.write_bytes(original)
    assert build.mixture_key(inputs, ctx.config, part) == key


def _public(inputs, ctx, part):
    return build.load_public(inputs, ctx.config, part)[1]


def test_step_lm_rebuilds_q_with_the_spread_the_release_records(released_run, tmp_path):
    """Report part lm_counts names how Q spreads its unresolved unigram mass; step lm's Q follows
    it, a part without the key (a release from before 2026-12-01) gets P's shape, and the released
    model's cache key tells the two apart."""
    from dpngram.lm.open_model import noisy_count_model

    ctx, _ = released_run
    part = read_parts(ctx)["lm_counts"]
    assert part["unresolved_unigrams"] == "empirical_bayes"
    old = {k: v for k, v in part.items() if k != "unresolved_unigrams"}
    inputs = build.ReleasedInputs(ctx.release.root)
    public = _public(inputs, ctx, part)
    counts = pl.read_parquet(ctx.release.root / layout.LM_COUNTS)
    common = dict(threshold=part["threshold"], discount=part["discount"], sigma=part["sigma"])
    for p, spread in ((part, "empirical_bayes"), (old, "public")):
        expected = noisy_count_model(counts, public, part["order"], unresolved=spread, **common)
        got = build.noisy_counts_model(inputs, public, p)
        assert got.tables[1].equals(expected.tables[1]), spread
    new_q, old_q = (build.noisy_counts_model(inputs, public, p).tables[1] for p in (part, old))
    assert not new_q.equals(old_q)  # the sample's counts leave words below the threshold
    assert build.mixture_key(inputs, ctx.config, part) != build.mixture_key(inputs, ctx.config, old)
    # and the model card's "smoothing" line says which spread the model has
    for p, words in ((part, "by empirical-Bayes counts"), (old, "in the public model's shape")):
        info = build.build_route_mixture(p, inputs, ctx.config, tmp_path / "model.arpa")
        assert words in info["smoothing"], info["smoothing"]


@pytest.mark.parametrize(
    "breakage, message",
    [("positive", "Positive log probability"), ("context", "context of every 3-gram should appear")],
)
def test_build_binary_refuses_a_broken_file(released_run, tmp_path, breakage, message):
    """Step lm checks the tables it wrote and the file's digest, not a parse of the file: KenLM's
    build_binary, which compiles every released model, parses it and refuses a positive
    log-probability or a trigram whose context is not listed (with the error's own words)."""
    ctx, _ = released_run
    path = ctx.release.root / layout.MODEL_ARPA
    if not path.is_file():  # this test alone
        lm_stage.run_lm(ctx)
    broken = tmp_path / "broken.arpa"
    broken.write_bytes(path.read_bytes())
    _break_arpa(broken, breakage)
    with pytest.raises(RuntimeError, match=f"build_binary failed .*{message}"):
        build.compile_binary(broken, tmp_path / "broken.binary")
    assert not (tmp_path / "broken.binary").exists()
    build.compile_binary(path, tmp_path / "whole.binary")  # the file as written compiles


def test_plan_order_and_configuration(released_run):
    ctx, _ = released_run
    names = [step.name for step in release_steps(ctx.config)]
    assert names.index("validation") < names.index("lm") == names.index("report") - 1
    off = ctx.config.with_values(**{"lm_route": "off"})
    assert "lm" not in [step.name for step in release_steps(off)]
    # 'auto' without an lm_counts share: no model (the routes that built one from bayes/synth are gone)
    no_counts = ctx.config.with_values(**{"lm_route": "auto", "stage_budget": {"dpne": 0.5, "bayes": 0.5}})
    assert "lm" not in [step.name for step in release_steps(no_counts)]
    with pytest.raises(ConfigError, match="lm_order"):
        RunConfig.build(input="x", out="y", lm_order=7)


def test_an_lm_order_the_counts_cannot_build_is_refused_before_the_run():
    """The model is built from lm_counts' noisy counts (orders 1-3): a higher lm_order with an
    lm_counts share is a configuration error (before ingest and DPNE spend budget, not in stage
    lm_counts after them); without that share no model is built and the order is free."""
    for order in (4, 5, 6):
        with pytest.raises(ConfigError, match="lm_order: the model is built from the noisy counts"):
            RunConfig.build(input="x", out="y", lm_order=order)
        assert (
            RunConfig.build(input="x", out="y", lm_order=order, stage_budget={"dpne": 1.0}).lm.order == order
        )
    assert RunConfig.build(input="x", out="y", lm_order=3).lm.order == 3


@pytest.mark.parametrize("route", ["arpa", "lmplz"])
def test_retired_routes_are_refused_with_their_reason(route):
    with pytest.raises(ConfigError, match=f"lm_route: route '{route}' was retired"):
        RunConfig.build(input="x", out="y", lm_route=route)


@pytest.mark.parametrize(
    "name", ["lm_theta_tokens", "lm_public_weight", "lm_kgram_count", "lm_sample_sentences", "lm_memory"]
)
def test_retired_parameters_are_refused_with_their_reason(name):
    value = "1G" if name == "lm_memory" else 1
    with pytest.raises(ConfigError, match=f"{name}: retired with lm_route 'arpa'/'lmplz'"):
        RunConfig.build(input="x", out="y", **{name: value})
    with pytest.raises(ConfigError, match="other_name: unknown parameter"):
        RunConfig.build(input="x", out="y", other_name=1)


def test_mixture_without_an_lm_counts_share_is_refused_before_the_run():
    with pytest.raises(ConfigError, match="lm_route: 'mixture' is built from the noisy counts"):
        RunConfig.build(input="x", out="y", lm_route="mixture", stage_budget={"dpne": 1.0})
    assert RunConfig.build(input="x", out="y", lm_route="auto", stage_budget={"dpne": 1.0}).lm.route == "auto"


def test_a_run_without_a_model_says_why_and_the_cli_gives_the_retirement_reason(capsys):
    from dpngram.cli.parser import build_parser
    from dpngram.config.budget_plan import run_notices

    split = RunConfig.build(input="x", out="y", stage_budget={"dpne": 0.5, "bayes": 0.5})
    assert "no language model: stage_budget has no 'lm_counts' share" in " ".join(run_notices(split))
    off = split.with_values(lm_route="off")  # asked for no model: nothing to explain
    assert not [n for n in run_notices(off) if "language model" in n]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--input", "x", "--out", "y", "--lm-route", "lmplz"])
    assert "route 'lmplz' was retired" in capsys.readouterr().err


def test_the_card_says_how_to_read_the_verdicts_perplexities():
    """The verdict's perplexities weigh users, not tokens; the card says so under an estimate, and
    not under a verdict without one (nothing to read)."""
    from dpngram.lm.model_card import verdict_lines

    interval = {"level": 0.95, "released_perplexity": [150.0, 250.0], "log_ratio": [-0.5, -0.1]}
    verdict = {
        "released_perplexity": 198.3,
        "public_only_perplexity": 394.4,
        "interval": interval,
        "log_ratio": -0.3,
        "epsilon": 2.38,
        "verdict": "released model better",
        "loss_clip_nats": 12.0,
    }
    lines = verdict_lines(verdict)
    assert lines[0].startswith("**Verdict:** on held-out users") and "198 against 394" in lines[0]
    assert "a ratio of 0.74 (0.61–0.90, 95%)" in lines[0]  # exp of the log ratio and its interval
    assert "every user counts once" in lines[2] and "clipped at 12 nats" in lines[2]
    none = {**verdict, "released_perplexity": None, "verdict": "cannot tell"}
    assert [line for line in verdict_lines(none) if line] == [verdict_lines(none)[0]]
    assert "the data cannot tell" in verdict_lines(none)[0]
    assert verdict_lines(None)[0].startswith("**Verdict:** none")
