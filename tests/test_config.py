"""RunConfig validation: every rule that voids the guarantee gives a one-line ConfigError naming the field."""

from __future__ import annotations

import json

import pytest

from dpngram.config import RunConfig
from dpngram.config.budget_plan import STAGES
from dpngram.config.run import flat_fields
from dpngram.config.sections import SECTIONS, DpneConfig
from dpngram.core.errors import ConfigError

BASE = {"input": "users.jsonl", "out": "out"}


def error_of(**values) -> str:
    with pytest.raises(ConfigError) as info:
        RunConfig.build(**{**BASE, **values})
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_defaults_build():
    config = RunConfig.build(**BASE)
    assert config.epsilon > 0 and 0 < config.delta < 1
    assert config.run_id is None


@pytest.mark.parametrize("epsilon", [0, -1, -1e-12])
def test_epsilon_must_be_positive(epsilon):
    assert error_of(epsilon=epsilon).startswith("epsilon: ")


@pytest.mark.parametrize("delta", [1, 1.5, 0, -0.1])
def test_delta_must_be_in_open_unit_interval(delta):
    assert error_of(delta=delta).startswith("delta: ")


def test_delta_must_be_below_one_over_users():
    config = RunConfig.build(**BASE, delta=1e-3)
    for n_users in (10, 999):  # 1/n > 1e-3: fine
        config.check_against_users(n_users)
    for n_users in (1000, 1001, 10**6):  # delta >= 1/n
        with pytest.raises(ConfigError) as info:
            config.check_against_users(n_users)
        assert str(info.value).startswith("delta: ")
        assert str(n_users) not in str(info.value)  # the private user count is not echoed


@pytest.mark.parametrize("value", [0, -3])
def test_max_contribution_at_least_one(value):
    assert error_of(max_contribution=value).startswith("max_contribution: ")


@pytest.mark.parametrize("eta", [0, 1, 1.5, -0.01])
def test_eta_in_open_unit_interval(eta):
    assert error_of(eta=eta).startswith("eta: ")


def test_unknown_field_is_named():
    assert error_of(epsilonn=3) == "epsilonn: unknown parameter (got 3)"


def test_stage_budget_sum_above_one():
    message = error_of(stage_budget={"dpne": 0.7, "bayes": 0.5})
    assert message.startswith("stage_budget: ") and "sum" in message


def test_stage_budget_unknown_stage_and_bad_fraction():
    assert error_of(stage_budget={"nope": 0.5}).startswith("stage_budget: ")
    assert error_of(stage_budget={"dpne": 0}).startswith("stage_budget: ")


def test_stage_without_budget_is_refused_when_used():
    config = RunConfig.build(**BASE, stage_budget={"dpne": 0.5})
    eps, delta = config.stage_share("dpne")
    assert eps == pytest.approx(config.epsilon * 0.5) and delta == pytest.approx(config.delta * 0.5)
    missing = next(s for s in STAGES if s != "dpne")
    with pytest.raises(ConfigError, match=r"^stage_budget: "):
        config.stage_share(missing)


def test_lifetime_below_run_budget():
    assert "lifetime_epsilon" in error_of(epsilon=4, lifetime_epsilon=3)
    assert "lifetime_delta" in error_of(delta=1e-6, lifetime_delta=1e-7)


def test_required_fields_and_several_problems_on_one_line():
    with pytest.raises(ConfigError) as info:
        RunConfig.build(epsilon=-1)
    message = str(info.value)
    assert "input: is required" in message and "out: is required" in message and "epsilon: " in message
    assert "\n" not in message


def test_memory_limit_and_run_id_formats():
    assert error_of(memory_limit="lots").startswith("memory_limit: ")
    assert error_of(run_id="../escape").startswith("run_id: ")
    assert RunConfig.build(**BASE, memory_limit="512 MB").engine.memory_limit == "512MB"


def test_param_schema_mirrors_bounds():
    schema = RunConfig.param_schema()
    assert set(schema) == {name for name, *_ in flat_fields()}
    assert schema["epsilon"]["exclusiveMinimum"] == 0
    assert schema["delta"]["exclusiveMinimum"] == 0 and schema["delta"]["exclusiveMaximum"] == 1
    assert schema["eta"]["exclusiveMinimum"] == 0 and schema["eta"]["exclusiveMaximum"] == 1
    assert schema["max_contribution"]["minimum"] == 1
    assert schema["pruning"]["enum"] == ["both", "single"]
    assert (
        "default" not in schema["input"]
        and schema["max_n"]["default"] == DpneConfig.model_fields["max_n"].default
    )


def test_sections_group_the_parameters_and_keep_the_flat_names():
    """Nested, typed sections (config.bayes.clip_count) behind the unchanged flat names of the CLI
    flags, Airflow Params and the report's parameters."""
    config = RunConfig.build(
        **BASE, bayes_clip_count=3, max_n=4, engine="spark", lm_route="off", synth_l_max=7
    )
    assert (config.bayes.clip_count, config.dpne.max_n, config.engine.name) == (3, 4, "spark")
    assert (config.lm.route, config.synth.l_max) == ("off", 7)
    flat = config.flat()
    assert flat["bayes_clip_count"] == 3 and flat["engine"] == "spark" and flat["dpne_variant"] == "auto"
    assert set(flat) == set(RunConfig.param_schema())
    assert RunConfig.build(**flat) == config  # the flat form round-trips
    assert json.loads(config.to_json()) == flat
    assert config.with_values(max_n=2).dpne.max_n == 2 and config.dpne.max_n == 4
    # every flat name is in exactly one place
    names = [name for name, *_ in flat_fields()]
    assert len(names) == len(set(names))
    for section, model in SECTIONS.items():
        assert set(model.FLAGS) == set(model.model_fields), section
        assert RunConfig.param_schema()[next(iter(model.FLAGS.values()))]["section"] == model.TITLE
    # a bad value names the flat parameter the user typed
    assert error_of(bayes_clip_count=0).startswith("bayes_clip_count: ")
    assert error_of(engine="flink").startswith("engine: ")
