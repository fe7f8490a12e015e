"""Flat parameter names: how the sectioned :class:`~dpngram.config.run.RunConfig` meets its users.

CLI flags, Airflow Params and the report's ``parameters`` use flat names (``bayes_clip_count``,
``max_n``, ``engine``); ``RunConfig.bayes.clip_count`` is the typed access. This module maps one to
the other (``FLAT_NAMES``; the list of every field with the top-level ones,
:func:`dpngram.config.run.flat_fields`, lives next to ``RunConfig``), turns a field's schema into
an Airflow Param's (:func:`schema_fragment`) and words validation errors with the flat names users
type (:func:`format_errors`).

Owns: ``FLAT_NAMES``, :func:`schema_fragment`, :func:`format_errors`.
Imports: dpngram.config.sections; pydantic (never dpngram.config.run: imports flow one way).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from dpngram.config.sections import RETIRED_PARAMS, SECTIONS

#: flat name -> (section, field) for every sectioned parameter.
FLAT_NAMES: dict[str, tuple[str, str]] = {
    flat: (section, field) for section, model in SECTIONS.items() for field, flat in model.FLAGS.items()
}


def schema_fragment(prop: dict[str, Any], name: str) -> dict[str, Any]:
    frag: dict[str, Any] = {}
    if "anyOf" in prop:  # Optional[...]: allow null
        frag["type"] = [p.get("type") for p in prop["anyOf"] if p.get("type")]
        for p in prop["anyOf"]:
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                if key in p:
                    frag[key] = p[key]
    else:
        for key in ("type", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern"):
            if key in prop:
                frag[key] = prop[key]
        for key in ("additionalProperties", "propertyNames"):
            if key in prop:
                frag[key] = prop[key]
    frag["title"] = prop.get("title", name)
    if "description" in prop:
        frag["description"] = prop["description"]
    return frag


def format_errors(err: ValidationError) -> str:
    """One line per problem: ``name: rule (got value)``, with the flat name users type."""
    lines = []
    for problem in err.errors():
        loc = [str(p) for p in problem["loc"]]
        if len(loc) >= 2 and loc[0] in SECTIONS and loc[1] in SECTIONS[loc[0]].FLAGS:
            loc = [SECTIONS[loc[0]].FLAGS[loc[1]], *loc[2:]]
        where = ".".join(loc) or "config"
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = RETIRED_PARAMS.get(where, "unknown parameter")
        elif problem["type"] == "missing":
            message = "is required"
        got = problem.get("input")
        shown = "" if problem["type"] in ("missing",) or isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{where}: {message}{shown}")
    return "; ".join(lines)
