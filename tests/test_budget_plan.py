"""Joint calibration: the stages' noise scaled together so that the composed total is the run's
budget (docs/accounting.md, "Joint calibration").

The composition is checked against the events the mechanisms' *own* event builders produce at the
calibrated shares (the functions the stages charge the ledger with; not against the shapes the
plan assumes), for every combination of stages; the ledger's charges for a run add up to the
run's composed total."""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from dpngram.config import RunConfig
from dpngram.config.budget_plan import DEFAULT_STAGE_BUDGET
from dpngram.core.accounting import Accountant, PrivacyEvent, compose_gaussian_sigmas
from dpngram.core.noise import NoiseSource
from dpngram.mechanisms.bayes import bayesian_release, calibrate
from dpngram.mechanisms.dpne import LevelOutcome, level_sigmas
from dpngram.mechanisms.dpsu import vocabulary_parameters
from dpngram.mechanisms.lm_counts import CountRelease
from dpngram.mechanisms.synth import ExplorationTree, TreeParams
from dpngram.mechanisms.triehh import plan_events
from dpngram.release.context import RunContext, StageResult
from dpngram.release.publish import prepare
from dpngram.release.spend import spend_once
from dpngram.stages.triehh import privacy_plan

#: The target precision of the issue: the composed total equals the run's epsilon to 1e-6
#: (relative), never above it. The plan solves to 1e-7 (JOINT_TOLERANCE); the stages' own
#: calibrations round sigma up by at most 1e-12 relative, which lowers epsilon by less than that.
PRECISION = 1e-6


def _config(fractions: dict[str, float], **extra) -> RunConfig:
    """A run whose every budgeted stage runs (the Bayesian stage needs a public corpus)."""
    values = {"public": "public.txt", **extra}
    return RunConfig.build(input="x", out="y", epsilon=4.0, delta=1e-7, stage_budget=fractions, **values)


def _real_events(config: RunConfig) -> list[PrivacyEvent]:
    """The events each budgeted stage's own calibration produces at its calibrated share."""
    return _real_events_of(config, tuple(config.stage_budget))


def _real_events_of(config: RunConfig, stages: tuple[str, ...]) -> list[PrivacyEvent]:
    events: list[PrivacyEvent] = []
    dpne = config.dpne
    for stage in stages:
        share = config.stage_share(stage)
        if stage == "dpne":
            dpsu_vocabulary = dpne.vocabulary_method != "triehh"
            sigmas = level_sigmas(
                share,
                dpne.max_n,
                dpne.sigma_decay,
                threshold_delta=dpne.threshold_delta,
                dpsu_vocabulary=dpsu_vocabulary,
                new_words_reserve=config.new_words_reserve(),
            )
            if dpsu_vocabulary:
                vocab = vocabulary_parameters(
                    share,
                    dpne.max_n,
                    dpne.sigma_decay,
                    dpne.max_contribution,
                    threshold_delta=dpne.threshold_delta,
                    new_words=config.new_words_per_user(),
                    new_words_share=dpne.new_words_share,
                    new_words_funding=dpne.new_words_funding,
                )
                vocab_events = vocab.events("dpne.k1")
                gaussians = [e.sigma for e in vocab_events if e.mechanism == "gaussian"]
                if config.new_words_reserve():
                    # the round paid by every level: all of them compose to the levels' sigma* alone
                    unfunded = level_sigmas(
                        share, dpne.max_n, dpne.sigma_decay, threshold_delta=dpne.threshold_delta
                    )
                    funded = gaussians + [s for k, s in sigmas.items() if k >= 2]
                    assert compose_gaussian_sigmas(funded) == pytest.approx(
                        compose_gaussian_sigmas(unfunded.values()), rel=1e-12
                    )
                    assert sigmas[2] > unfunded[2]  # and the k-gram levels did pay
                else:
                    # with a new-words round, its sigma and the rest compose to the one sigma_1
                    assert compose_gaussian_sigmas(gaussians) == pytest.approx(sigmas[1], rel=1e-12)
                events += vocab_events
            events += [_level_events(k, sigma) for k, sigma in sigmas.items() if k >= 2]
        elif stage == "bayes":
            # the sensitivity and vocabulary size do not change the noise multiplier sigma/sensitivity
            calibration = calibrate(share.epsilon, share.delta, 3.7, 5000)
            _, released = bayesian_release(
                np.zeros(3), calibration, NoiseSource.secure(), stage=stage, differentially_private=True
            )
            events += released
        elif stage == "lm_counts":
            calibration = calibrate(share.epsilon, share.delta, 3.7, 5000)
            events += CountRelease(pl.DataFrame(), pa.table({}), calibration, 0.0).events(stage)
        elif stage == "synth":
            params = TreeParams(share.epsilon, config.synth.l_max, config.synth.n_max, n_labels=10)
            events += ExplorationTree(params).events(stage)
        elif stage == "triehh":
            events += plan_events(privacy_plan(config), stage)
    return events


def _level_events(k: int, sigma: float) -> PrivacyEvent:
    """A DPNE level's event as the mechanism builds it (:meth:`LevelOutcome.events`)."""
    outcome = LevelOutcome(
        k, released=0, valid=0, previous=0, sigma=sigma, rho=None, variant="exact", valid_count="exact"
    )
    (event,) = outcome.events(f"dpne.k{k}")
    return event


def _combinations() -> list[tuple[dict[str, float], dict]]:
    stages = ("dpne", "lm_counts", "bayes", "synth")
    out = []
    for n in range(1, len(stages) + 1):
        for subset in itertools.combinations(stages, n):
            out.append(({s: 1.0 / n for s in subset}, {}))
            if "dpne" in subset:
                for method in ("triehh", "both"):
                    fractions = {s: 1.0 / (n + 1) for s in (*subset, "triehh")}
                    out.append((fractions, {"vocabulary_method": method}))
    # unequal shares, the default (= the demo's) split, a schedule with c < 1 and the paper's delta split
    out.append(({"dpne": 0.4, "lm_counts": 0.4, "bayes": 0.1, "synth": 0.1}, {}))
    out.append(({"dpne": 0.4, "lm_counts": 0.3, "bayes": 0.15, "synth": 0.15}, {}))  # the previous default
    out.append(({"dpne": 0.9, "synth": 0.1}, {"sigma_decay": 0.8, "dpne_threshold_delta": 0.5, "max_n": 3}))
    # the vocabulary's new-words round: same events' total (docs/dpne.md, "New words"), paid by the
    # vocabulary alone (the default until 2026-12-07) and by every level (the default since)
    funded_by_vocabulary = {"dpsu_new_words": 10, "dpsu_new_words_funding": "vocabulary"}
    out.append(({"dpne": 0.4, "lm_counts": 0.4, "bayes": 0.1, "synth": 0.1}, funded_by_vocabulary))
    out.append(({"dpne": 1.0}, {**funded_by_vocabulary, "dpsu_new_words": 3, "dpsu_new_words_share": 0.6}))
    funded_by_levels = {"dpsu_new_words": 10, "dpsu_new_words_funding": "dpne"}
    out.append(({"dpne": 0.4, "lm_counts": 0.4, "bayes": 0.1, "synth": 0.1}, funded_by_levels))
    out.append(({"dpne": 0.5, "triehh": 0.5}, {**funded_by_levels, "vocabulary_method": "both"}))
    out.append(({"dpne": 1.0}, {**funded_by_levels, "dpsu_new_words_share": 0.6, "sigma_decay": 0.8}))
    return out


@pytest.mark.parametrize(("fractions", "extra"), _combinations())
def test_every_stage_combination_composes_to_the_run_budget(fractions, extra):
    config = _config(fractions, **extra)
    events = _real_events(config)
    total = Accountant(events).total_epsilon(config.delta)
    assert total <= config.epsilon * (1 + 1e-12)
    assert total == pytest.approx(config.epsilon, rel=PRECISION)
    plan = config.budget_plan()
    assert plan.composed_epsilon == pytest.approx(total, rel=PRECISION)
    # the shares keep their proportions: one common factor on every stage's epsilon
    for stage, fraction in fractions.items():
        assert config.stage_share(stage).epsilon == pytest.approx(plan.multiplier * fraction * 4.0, rel=1e-12)
        assert config.stage_share(stage).delta == pytest.approx(fraction * 1e-7, rel=1e-12)


def test_per_stage_calibration_leaves_budget_unspent_and_joint_does_not():
    """The demo split of the issue: every stage calibrated to its share alone composes to about
    3.1 of 4 (sub-additivity of composition: the Gaussian parts merge); jointly it composes to 4."""
    fractions = {"dpne": 0.5, "bayes": 0.3, "synth": 0.2}
    alone = _config(fractions, budget_calibration="per-stage")
    joint = _config(fractions)
    spent_alone = Accountant(_real_events(alone)).total_epsilon(1e-7)
    spent_joint = Accountant(_real_events(joint)).total_epsilon(1e-7)
    assert alone.budget_plan().multiplier == 1.0 and spent_alone < 3.2
    assert joint.budget_plan().multiplier > 1.2 and spent_joint == pytest.approx(4.0, rel=PRECISION)
    # the basic-composition sum of the stand-alone stages is what per-stage calibration "spends"
    alone_parts = sum(
        Accountant([e for e in _real_events(alone) if e.stage.split(".")[0] == s]).total_epsilon(
            alone.stage_share(s).delta
        )
        for s in fractions
    )
    # (the Bayesian stage leaves 1e-3 of its delta unused, worth ~1e-5 of its epsilon at this delta)
    assert alone_parts == pytest.approx(4.0, rel=1e-4) and alone_parts <= 4.0


def test_a_single_stage_is_not_scaled():
    """One stage calibrated to the whole budget already composes to it: the factor is exactly 1.
    The Bayesian stage calibrates at delta (1 - 1e-3) and so spends a little less than its share
    alone; joint calibration gives that back (a factor just above 1)."""
    for stage in ("dpne", "synth"):
        assert _config({stage: 1.0}).budget_plan().multiplier == 1.0
    assert 1.0 < _config({"bayes": 1.0}).budget_plan().multiplier < 1.001


def test_shares_below_one_keep_their_reserve():
    """Fractions summing to 0.6 target 0.6 of the run's budget: a deliberate reserve is kept."""
    config = _config({"dpne": 0.3, "bayes": 0.3})
    plan = config.budget_plan()
    assert plan.target.epsilon == pytest.approx(2.4) and plan.target.delta == pytest.approx(6e-8)
    total = Accountant(_real_events(config)).total_epsilon(plan.target.delta)
    assert total == pytest.approx(2.4, rel=PRECISION)


def test_a_stage_that_does_not_run_reserves_no_budget():
    """The default split funds the Bayesian stage, which needs a public corpus: without one it is
    skipped, and its share goes to the other stages (in proportion), so the run still composes to
    its whole epsilon."""
    fractions = dict(DEFAULT_STAGE_BUDGET)
    with_public, without = _config(fractions), _config(fractions, public=None)
    assert without.stage_skip_reason("bayes") is not None and with_public.stage_skip_reason("bayes") is None
    assert set(without.budget_plan().calibrated) == {"dpne", "lm_counts", "synth"}
    events = [e for e in _real_events(with_public) if e.stage != "bayes"]
    # with the public corpus, the three other stages alone spend less than the run's epsilon
    # (3.94 of 4 with the default split: bayes's Gaussian composes sub-additively with the others) ...
    assert Accountant(events).total_epsilon(1e-7) < 3.95
    # ... without it they get the bayes share and spend all of it
    spent = Accountant([e for e in _real_events_of(without, ("dpne", "lm_counts", "synth"))]).total_epsilon(
        1e-7
    )
    assert spent == pytest.approx(4.0, rel=PRECISION)
    from dpngram.core.errors import ConfigError

    with pytest.raises(ConfigError, match="does not run: no public corpus"):
        without.stage_share("bayes")
    for stage, share in without.budget_plan().calibrated.items():
        assert share.delta == pytest.approx(fractions[stage] / (1 - fractions["bayes"]) * 1e-7, rel=1e-12)


def test_triehh_vocabulary_reserves_no_sigma_for_the_dpsu_level():
    """With vocabulary_method='triehh' no DPSU level runs: levels 2..T share the dpne Gaussian and
    no threshold delta is set aside, so each level is less noisy than with a DPSU vocabulary."""
    dpsu = _config({"dpne": 0.5, "triehh": 0.5}, vocabulary_method="both", max_n=4)
    trie = _config({"dpne": 0.5, "triehh": 0.5}, vocabulary_method="triehh", max_n=4)
    sig_dpsu = level_sigmas(dpsu.stage_share("dpne"), 4, 1.2, threshold_delta=0.1, dpsu_vocabulary=True)
    sig_trie = level_sigmas(trie.stage_share("dpne"), 4, 1.2, threshold_delta=0.1, dpsu_vocabulary=False)
    assert set(sig_dpsu) == {1, 2, 3, 4} and set(sig_trie) == {2, 3, 4}
    for k in (2, 3, 4):
        assert sig_trie[k] < sig_dpsu[k]
    # the levels alone spend the dpne share exactly (all of its delta goes to the Gaussian)
    share = trie.stage_share("dpne")
    levels = [PrivacyEvent("dpne", "gaussian", sigma=s) for s in sig_trie.values()]
    assert Accountant(levels).total_epsilon(share.delta) == pytest.approx(share.epsilon, rel=1e-9)


def test_triehh_vocabulary_with_one_level_refuses_a_dpne_share():
    from dpngram.core.errors import ConfigError

    with pytest.raises(ConfigError, match="buy nothing"):
        _config({"dpne": 0.5, "triehh": 0.5}, vocabulary_method="triehh", max_n=1)


def _stage(ctx: RunContext, stage: str, events: list[PrivacyEvent]) -> None:
    name = f"out_{stage.replace('.', '_')}.txt"

    def compute(wh):
        with ctx.release.writing(name) as tmp:
            tmp.write_text("noisy output stands here", encoding="utf-8")
        return StageResult(events=events, report={})

    spend_once(ctx, stage, [name], compute)


def test_ledger_charges_of_a_run_add_up_to_its_composed_total(tmp_path):
    """Stages charged one after the other (as the plan runs them): each is charged the increment
    of the run's composed epsilon, so the ledger's sum is the composed total, which joint
    calibration makes equal to the run's epsilon; delta is charged once."""
    config = RunConfig.build(
        input=str(tmp_path / "in.jsonl"),
        out=str(tmp_path / "out"),
        warehouse=str(tmp_path / "wh.duckdb"),
        memory_limit="1GB",
        epsilon=4.0,
        delta=1e-7,
        max_n=3,
        public=str(tmp_path / "public.txt"),
        stage_budget={"dpne": 0.5, "bayes": 0.3, "synth": 0.2},
    )
    (tmp_path / "public.txt").write_text("a public sentence\n", encoding="utf-8")
    ctx = RunContext(prepare(config))
    events = _real_events(config)
    by_stage: dict[str, list[PrivacyEvent]] = {}
    for event in events:
        by_stage.setdefault(event.stage, []).append(event)
    for stage in ("dpne.k1", "dpne.k2", "dpne.k3", "bayes", "synth"):
        _stage(ctx, stage, by_stage[stage])
    with ctx.ledger() as ledger:
        spent = ledger.spent(config.dataset, ctx.run_id)
    assert spent.epsilon == pytest.approx(Accountant(events).total_epsilon(1e-7), rel=1e-12)
    assert spent.epsilon == pytest.approx(4.0, rel=PRECISION) and spent.epsilon <= 4.0 * (1 + 1e-12)
    assert spent.delta == pytest.approx(1e-7, rel=1e-12)
    # per stage charged <= its stand-alone epsilon (composition is sub-additive here)
    assert math.isfinite(spent.epsilon)


def test_a_stage_over_its_calibrated_share_is_refused(tmp_path):
    config = RunConfig.build(
        input=str(tmp_path / "in.jsonl"),
        out=str(tmp_path / "out"),
        warehouse=str(tmp_path / "wh.duckdb"),
        memory_limit="1GB",
        stage_budget={"dpne": 0.5, "synth": 0.5},
    )
    ctx = RunContext(prepare(config))
    share = config.stage_share("synth")
    with pytest.raises(RuntimeError, match="budget"):
        _stage(ctx, "synth", [PrivacyEvent("synth", "laplace", epsilon=share.epsilon * 1.01)])
