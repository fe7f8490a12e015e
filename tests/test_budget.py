"""Budgets as values: shares, composition, fitting, refusal of meaningless values."""

from __future__ import annotations

import pytest

from dpngram.config import RunConfig
from dpngram.core.budget import Budget
from dpngram.core.errors import ConfigError


def test_shares_compose_back_to_the_run_budget() -> None:
    config = RunConfig.build(
        input="x", out="y", public="p.txt", epsilon=4, delta=1e-6, stage_budget={"dpne": 0.7, "bayes": 0.3}
    )
    dpne, bayes = config.nominal_share("dpne"), config.nominal_share("bayes")
    assert dpne.epsilon == pytest.approx(2.8) and dpne.delta == pytest.approx(7e-7)
    # what the stages calibrate to: the same deltas, epsilons scaled by one common factor > 1
    calibrated = config.stage_share("dpne"), config.stage_share("bayes")
    factor = calibrated[0].epsilon / dpne.epsilon
    assert factor > 1 and calibrated[1].epsilon / bayes.epsilon == pytest.approx(factor, rel=1e-12)
    assert (calibrated[0].delta, calibrated[1].delta) == (dpne.delta, bayes.delta)
    total = dpne + bayes
    assert total.epsilon == pytest.approx(4.0) and total.delta == pytest.approx(1e-6)
    assert total <= config.budget and dpne <= config.budget
    assert not Budget(4.1, 1e-6) <= config.budget and not Budget(1.0, 2e-6) <= config.budget
    epsilon, delta = dpne  # unpacks like the (epsilon, delta) pair
    assert (epsilon, delta) == (dpne.epsilon, dpne.delta)


@pytest.mark.parametrize(("epsilon", "delta"), [(-1.0, 0.0), (float("inf"), 0.0), (1.0, 1.0), (1.0, -1e-9)])
def test_meaningless_budgets_are_refused(epsilon: float, delta: float) -> None:
    with pytest.raises(ValueError):
        Budget(epsilon, delta)


def test_a_share_must_be_a_fraction_and_a_stage_without_share_is_named() -> None:
    with pytest.raises(ValueError, match="share"):
        Budget(1.0, 1e-7) * 1.5
    config = RunConfig.build(input="x", out="y", stage_budget={"dpne": 1.0})  # (the default funds bayes)
    with pytest.raises(ConfigError, match="stage_budget: stage 'bayes' has no budget"):
        config.stage_share("bayes")
