"""The Airflow trigger form of a release: which run parameters come first, how the rest are grouped,
and the JSON-schema details that make Airflow 3's form draw each field well.

Airflow 3.3 draws a Param

* as *required* (a red star, the Trigger button blocked while empty) when its ``type`` excludes
  ``null``: every parameter with a default gets ``null`` in its type; an emptied field arrives as
  null and :meth:`dpngram.config.RunConfig.build` then uses the default. Only parameters the
  configuration itself requires (``input``, ``out``) stay required;
* in the first, open section when it has no ``section``; the essentials (:data:`ESSENTIALS`) have
  none, every other parameter is in one of :data:`SECTION_ORDER` (collapsed);
* as a 6-line text area when its type allows two non-null types (``0.5`` or ``"auto"``), unless
  ``examples`` is set: those parameters get ``examples: ["auto"]`` and a ``pattern`` instead, which
  gives a one-line field suggesting 'auto';
* without its JSON-schema bounds: :func:`bounds_text` writes them into the description.

Owns: the form layout (essentials, sections, their order) and :func:`form_params`.
Imports: dpngram.config.
"""

from __future__ import annotations

from typing import Any

from dpngram.config import RunConfig
from dpngram.config.sections import SECTIONS

#: The first screen of the form (no section: Airflow's open default section), in this order.
ESSENTIALS = ("dataset", "input", "public", "out", "epsilon", "delta", "stage_budget", "max_n")

#: The collapsed sections, in the order the form shows them.
PRIVACY, INPUT, LM, BAYES, SYNTH, TRIEHH, ENGINE = (
    "Privacy details",
    "Input and storage",
    "Language model",
    "Stage: Bayesian trigram distribution",
    "Stage: synthetic text",
    "Stage: TrieHH word discovery",
    "Engine",
)
SECTION_ORDER = (PRIVACY, INPUT, LM, BAYES, SYNTH, TRIEHH, ENGINE)

#: Top-level parameters outside the essentials, by section.
TOP_LEVEL_SECTIONS = {
    "lifetime_epsilon": PRIVACY,
    "lifetime_delta": PRIVACY,
    "budget_calibration": PRIVACY,
    "input_format": INPUT,
    "input_extensions": INPUT,
    "follow_external_symlinks": INPUT,
    "max_quarantine_fraction": INPUT,
    "user_field": INPUT,
    "text_field": INPUT,
    "lowercase": INPUT,
    "warehouse": INPUT,
}

#: Configuration sections (RunConfig attribute) -> form section. The DPNE mechanism's knobs
#: (contribution bound, eta, noise schedule, pruning) are privacy details.
CONFIG_SECTIONS = {
    "dpne": PRIVACY,
    "lm": LM,
    "bayes": BAYES,
    "synth": SYNTH,
    "triehh": TRIEHH,
    "engine": ENGINE,
}

#: A number, or 'auto' (the one-line form of a ``number | "auto"`` parameter).
NUMBER_OR_AUTO = r"^\s*(auto|[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)\s*$"


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else f"{value:,}".replace(",", " ")


def bounds_text(schema: dict[str, Any]) -> str:
    """The JSON-schema bounds of a parameter as one sentence, e.g. 'Allowed: 0 < value ≤ 100.'
    ('' when it has none)."""
    values = schema.get("additionalProperties")
    if isinstance(values, dict) and values.get("type") == "number":  # an object of fractions
        keys = schema.get("propertyNames", {}).get("enum")
        named = f"keys {', '.join(keys)}; " if keys else ""
        return f"Allowed: {named}each value {bounds_text(values).removeprefix('Allowed: ').rstrip('.')}."
    low = high = ""
    if "exclusiveMinimum" in schema:
        low = f"{_number(schema['exclusiveMinimum'])} < "
    elif "minimum" in schema:
        low = f"{_number(schema['minimum'])} ≤ "
    if "exclusiveMaximum" in schema:
        high = f" < {_number(schema['exclusiveMaximum'])}"
    elif "maximum" in schema:
        high = f" ≤ {_number(schema['maximum'])}"
    if not low and not high:
        return ""
    return f"Allowed: {low}value{high}."


def section_of(name: str, config_section: str | None) -> str | None:
    """The form section of parameter ``name`` (None: the essentials)."""
    if name in ESSENTIALS:
        return None
    if config_section is not None:  # a section added to RunConfig later gets its own, at the end
        return CONFIG_SECTIONS.get(config_section) or SECTIONS[config_section].TITLE
    return TOP_LEVEL_SECTIONS.get(name, INPUT)


def form_params(defaults: dict[str, Any], skip: tuple[str, ...] = ("run_id",)) -> dict[str, dict[str, Any]]:
    """``{name: {"default": ..., **schema}}`` for ``airflow.sdk.Param(default, **schema)``, ordered
    essentials first, then section by section; ``defaults`` override RunConfig's defaults (a
    deployment's paths and DPNGRAM_PARAMS)."""
    from dpngram.config.run import flat_fields

    sections = {name: section for name, section, *_ in flat_fields()}
    required = {name for name, _, _, info in flat_fields() if info.is_required()}
    out: dict[str, dict[str, Any]] = {}
    for name, fragment in RunConfig.param_schema().items():
        if name in skip:
            continue
        schema = {k: v for k, v in fragment.items() if k not in ("default", "section")}
        default = defaults.get(name, fragment.get("default"))
        types = schema.get("type")
        types = list(types) if isinstance(types, list) else [types] if types else []
        if len([t for t in types if t != "null"]) > 1:  # number | "auto": one line, 'auto' suggested
            schema["type"] = ["string", *[t for t in types if t not in ("string", "null")]]
            schema["examples"] = ["auto"]
            schema["pattern"] = NUMBER_OR_AUTO
            types = schema["type"]
        if name not in required and "null" not in types:
            schema["type"] = [*types, "null"]
            if "enum" in schema:
                schema["enum"] = [*schema["enum"], None]
                schema["values_display"] = {"null": f"default ({default})"}
        bounds = bounds_text(schema)
        description = schema.get("description", "")
        if bounds:
            description = f"{description} {bounds}".strip()
        schema["description"] = description
        section = section_of(name, sections[name])
        if section is not None:
            schema["section"] = section
        out[name] = {"default": default, **schema}
    order = {section: i for i, section in enumerate((None, *SECTION_ORDER))}
    essentials = {name: i for i, name in enumerate(ESSENTIALS)}
    ranked = sorted(
        out, key=lambda n: (order.get(out[n].get("section"), len(order)), essentials.get(n, len(essentials)))
    )
    return {name: out[name] for name in ranked}
