"""The ``dpngram`` flags of the run parameters, generated from the configuration.

Every :class:`dpngram.config.RunConfig` parameter is a flag of ``run``, ``baseline`` and ``ingest``
by its flat name (:func:`dpngram.config.run.flat_fields`), grouped by section in ``--help``, so
flags never drift from the configuration.

Owns: :func:`add_config_flags`, :func:`config_from_args`, the ``--stage-budget`` syntax.
Imports: dpngram.config.
"""

from __future__ import annotations

import argparse
import json
import types
from collections.abc import Sequence
from typing import Any, Literal, Union, get_args, get_origin

from dpngram.config import RunConfig
from dpngram.config.run import flat_fields
from dpngram.config.sections import RETIRED_CHOICES, SECTIONS

#: Short metavars for the paper's symbols.
_METAVARS = {
    "epsilon": "E",
    "delta": "D",
    "max_n": "T",
    "max_contribution": "D0",
    "eta": "ETA",
    "sigma_decay": "C",
    "input": "PATH",
    "out": "DIR",
    "public": "PATH",
    "warehouse": "PATH",
    "dataset": "NAME",
    "run_id": "ID",
    "memory_limit": "SIZE",
    "threads": "N",
    "lifetime_epsilon": "E",
    "lifetime_delta": "D",
    "stage_budget": "STAGE=F,...",
    "exact_max_valid": "N",
    "user_field": "NAME",
    "text_field": "NAME",
}


def _parse_budget(value: str) -> dict[str, float]:
    """``dpne=0.6,bayes=0.4`` or a JSON object -> {stage: fraction}. A stage named twice is
    refused (``dpne=1,dpne=1`` would otherwise silently keep the last share)."""
    value = value.strip()

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, item in pairs:
            if key in seen:
                raise argparse.ArgumentTypeError(f"stage {key!r} is given twice; give each stage once")
            seen[key] = item
        return seen

    if value.startswith("{"):
        try:
            parsed = json.loads(value, object_pairs_hook=unique)
        except json.JSONDecodeError:
            raise argparse.ArgumentTypeError("expected STAGE=FRACTION,... or a JSON object") from None
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError("expected a JSON object")
        try:
            return {str(k): float(v) for k, v in parsed.items()}
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError("expected numbers as the fractions") from None
    pairs: list[tuple[str, Any]] = []
    for item in filter(None, (p.strip() for p in value.split(","))):
        stage, sep, fraction = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected STAGE=FRACTION (got {item!r})")
        try:
            pairs.append((stage.strip(), float(fraction)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected STAGE=FRACTION (got {item!r})") from None
    return unique(pairs)


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _not_retired(retired: dict[str, str]) -> Any:
    """A flag type that refuses a retired choice with its reason (argparse would only say "invalid
    choice")."""

    def check(value: str) -> str:
        if value in retired:
            raise argparse.ArgumentTypeError(retired[value])
        return value

    return check


def add_config_flags(
    parser: argparse.ArgumentParser, *, optional: Sequence[str] = (), skip: Sequence[str] = ()
) -> None:
    """One flag per RunConfig parameter by its flat name (``max_n`` -> ``--max-n``,
    ``bayes.clip_count`` -> ``--bayes-clip-count``), grouped by section in ``--help``; defaults
    stay RunConfig's. Fields RunConfig requires are required flags unless listed in ``optional``."""
    groups: dict[str | None, argparse._ArgumentGroup] = {}
    for name, section, _, field in flat_fields():
        if name in skip:
            continue
        if section not in groups:
            title = "Data and privacy" if section is None else SECTIONS[section].TITLE
            groups[section] = parser.add_argument_group(title)
        group = groups[section]
        annotation = _unwrap_optional(field.annotation)
        flag = "--" + name.replace("_", "-")
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        help_text = f"{field.title or name}: {field.description or ''}".rstrip(": ")
        if default is not None:
            help_text += f" (default: {default})"
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": help_text.replace("%", "%%")}
        if annotation is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["metavar"] = _METAVARS.get(name, name.upper())
            if get_origin(annotation) is Literal:
                kwargs["choices"] = list(get_args(annotation))
                kwargs.pop("metavar")
                if name in RETIRED_CHOICES:
                    kwargs["type"] = _not_retired(RETIRED_CHOICES[name])
            elif get_origin(annotation) is dict:
                kwargs["type"] = _parse_budget
            elif annotation in (int, float):
                kwargs["type"] = annotation
            if field.is_required() and name not in optional:
                kwargs["required"] = True
        group.add_argument(flag, **kwargs)


def config_from_args(args: argparse.Namespace, **overrides: Any) -> RunConfig:
    values = {name: getattr(args, name, None) for name, *_ in flat_fields()}
    values.update(overrides)
    return RunConfig.build(**values)
