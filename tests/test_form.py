"""The Airflow trigger form's schema (dpngram.orchestration.form), without Airflow: what the form
draws for each parameter and what it accepts, checked with the JSON-schema validator Airflow uses
for Params, and that what it sends builds the intended RunConfig."""

from __future__ import annotations

import jsonschema
import pytest

from dpngram.config import RunConfig
from dpngram.config.budget_plan import DEFAULT_STAGE_BUDGET
from dpngram.core.errors import ConfigError
from dpngram.orchestration.form import ESSENTIALS, SECTION_ORDER, bounds_text, form_params

DEFAULTS = {"input": "/data/in.jsonl.gz", "out": "/data/out", "public": "/data/public.txt.gz"}


@pytest.fixture(scope="module")
def params() -> dict[str, dict]:
    return form_params(DEFAULTS)


def _schema(param: dict) -> dict:
    return {k: v for k, v in param.items() if k not in ("default", "section", "values_display", "title")}


def _valid(param: dict, value) -> bool:
    try:
        jsonschema.validate(value, _schema(param))
    except jsonschema.ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ({"exclusiveMinimum": 0, "maximum": 100}, "Allowed: 0 < value ≤ 100."),
        ({"minimum": 1, "maximum": 12}, "Allowed: 1 ≤ value ≤ 12."),
        ({"exclusiveMinimum": 0, "exclusiveMaximum": 1}, "Allowed: 0 < value < 1."),
        ({"minimum": 0, "maximum": 100_000_000}, "Allowed: 0 ≤ value ≤ 100 000 000."),
        ({"exclusiveMinimum": 0.0}, "Allowed: 0 < value."),
        ({"type": "string"}, ""),
    ],
)
def test_bounds_text(schema, text):
    assert bounds_text(schema) == text


def test_essentials_first_then_sections_in_order(params):
    names = list(params)
    assert names[: len(ESSENTIALS)] == list(ESSENTIALS)
    assert all("section" not in params[n] for n in ESSENTIALS)
    rest = [params[n]["section"] for n in names[len(ESSENTIALS) :]]
    assert list(dict.fromkeys(rest)) == list(SECTION_ORDER)
    assert set(params) == set(RunConfig.param_schema()) - {"run_id"}


def test_every_parameter_is_described_with_its_bounds(params):
    schema = RunConfig.param_schema()
    for name, param in params.items():
        assert param["description"].strip(), name
        if any(k in schema[name] for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
            assert param["description"].endswith(bounds_text(schema[name])), name


def test_only_parameters_without_a_default_are_required(params):
    required = {
        n
        for n, p in params.items()
        if "null" not in (p["type"] if isinstance(p["type"], list) else [p["type"]])
    }
    assert required == {"input", "out"}


def test_defaults_validate_and_build_the_full_product(params):
    for name, param in params.items():
        assert _valid(param, param["default"]), (name, param["default"])
    config = RunConfig.build(**{name: param["default"] for name, param in params.items()})
    assert config.stage_budget == DEFAULT_STAGE_BUDGET


def test_an_emptied_field_means_the_default(params):
    """The form sends null for an emptied field: the schema accepts it and the run uses the default."""
    for name in ("epsilon", "max_n", "bayes_S", "engine", "lowercase", "stage_budget"):
        assert _valid(params[name], None), name
    values = {name: param["default"] for name, param in params.items()}
    config = RunConfig.build(**{**values, "epsilon": None, "max_n": None, "engine": None})
    assert (config.epsilon, config.dpne.max_n, config.engine.name) == (4.0, 5, "duckdb")
    assert not _valid(params["input"], None)


def test_bounds_are_enforced_by_the_schema(params):
    assert not _valid(params["epsilon"], 101) and not _valid(params["epsilon"], 0)
    assert _valid(params["epsilon"], 100)
    assert not _valid(params["delta"], 1) and not _valid(params["max_n"], 13)


def test_number_or_auto_fields_are_one_line_strings(params):
    """Two non-null types would make Airflow draw a 6-line text area: these are strings that
    suggest 'auto' and accept a number typed as text, which RunConfig reads as a number."""
    for name in ("bayes_S", "bayes_rho", "lm_mix_weight", "lm_unigram_adaptation"):
        param = params[name]
        assert param["type"][0] == "string" and param["examples"] == ["auto"], name
        assert _valid(param, "auto") and _valid(param, "0.5") and _valid(param, 0.5), name
        assert not _valid(param, "half"), name
    values = {name: param["default"] for name, param in params.items()}
    config = RunConfig.build(**{**values, "bayes_rho": "0.25", "lm_mix_weight": "auto"})
    assert config.bayes.rho == 0.25 and config.lm.mix_weight == "auto"
    with pytest.raises(ConfigError, match="bayes_rho"):
        RunConfig.build(**{**values, "bayes_rho": "1.5"})


def test_enum_fields_offer_the_default_as_an_empty_choice(params):
    param = params["engine"]
    assert param["enum"] == ["duckdb", "spark", None]
    assert param["values_display"] == {"null": "default (duckdb)"}


@pytest.mark.parametrize(
    ("budget", "accepted"),
    [
        ({"dpne": 2}, False),  # a fraction above 1
        ({"dpne": 0}, False),  # no share is written by leaving the stage out
        ({"nosuchstage": 0.5}, False),  # an unknown stage
        ({"dpne": 1}, True),
        ({"dpne": 0.4, "lm_counts": 0.3, "bayes": 0.15, "synth": 0.15}, True),
        ({"dpne": 0.7, "bayes": 0.7}, True),  # a sum above 1: the schema cannot say it (precheck does)
    ],
)
def test_stage_budget_keys_and_fractions_are_enforced_by_the_schema(params, budget, accepted):
    """Airflow validates a trigger's conf with this schema before it creates the run (the API
    answers 400: tests/test_airflow_standalone.py)."""
    assert _valid(params["stage_budget"], budget) is accepted
    assert (
        "Allowed: keys dpne, lm_counts, bayes, synth, triehh; each value 0 < value ≤ 1."
        in (params["stage_budget"]["description"])
    )
    if not accepted or sum(budget.values()) <= 1:
        return
    with pytest.raises(ConfigError, match="fractions sum to 1.4 > 1"):
        RunConfig.build(input="x", out="y", stage_budget=budget)
