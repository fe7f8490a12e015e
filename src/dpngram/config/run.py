"""Typed, validated run configuration: :class:`RunConfig`.

One model is the single source of truth for run parameters: the CLI builds it from flags, the
Airflow DAG builds its Params (JSON schema, titles, descriptions) from :meth:`RunConfig.param_schema`,
and every stage reads it. Errors name the field and the rule (:class:`ConfigError`), never a
traceback.

Rules that void the privacy guarantee are refused here (epsilon <= 0, delta outside (0, 1),
Delta < 1, eta outside (0, 1)); the data-dependent rule ``delta < 1/n_users`` is checked by
:meth:`RunConfig.check_against_users` once ingest has counted users (the count itself is not
released: only the pass/fail decision is used to stop the run).

Owns: :class:`RunConfig` (its top-level fields and the rules across sections),
``RESERVED_DATASET_NAMES``, ``DATASET_PATTERN``.
Imports: dpngram.config.sections, dpngram.config.flat, dpngram.config.budget_plan, dpngram.core;
pydantic.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dpngram.config import budget_plan
from dpngram.config.budget_plan import DEFAULT_STAGE_BUDGET, LM_SOURCE, STAGES
from dpngram.config.flat import FLAT_NAMES, format_errors, schema_fragment
from dpngram.config.sections import (
    SECTIONS,
    BayesConfig,
    DpneConfig,
    EngineConfig,
    LmConfig,
    SynthConfig,
    TriehhConfig,
)
from dpngram.core.budget import Budget
from dpngram.core.errors import ConfigError

if TYPE_CHECKING:
    from dpngram.core.accounting import BudgetPlan

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
#: Dataset names that are names of the output layout (dpngram.release.layout.RESERVED_NAMES):
#: releases go to OUT/DATASET/runs and OUT/DATASET/latest, so a dataset is a directory name.
RESERVED_DATASET_NAMES = ("runs", "latest")
#: The same rule as a JSON-schema pattern (the trigger form refuses a bad name before a run exists).
DATASET_PATTERN = r"^(?!(?:runs|latest)$)[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


class RunConfig(BaseModel):
    """Everything a run needs. Field descriptions become the Airflow trigger-form help text."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # -- data --------------------------------------------------------------------------------
    dataset: str = Field(
        "default",
        title="Dataset name",
        description="Key of the privacy ledger (runs on the same dataset share its lifetime budget) and "
        "the release directory OUT/DATASET. Allowed: 1-64 letters, digits, '_', '.', '-' (not 'runs', "
        "'latest').",
        json_schema_extra={"pattern": DATASET_PATTERN},
    )
    input: str = Field(
        ...,
        title="Input path",
        description=(
            "JSONL, CSV or Parquet file (.gz accepted), or a directory of .txt files (one user per file)."
        ),
    )
    input_format: Literal["auto", "jsonl", "csv", "parquet", "textdir"] = Field(
        "auto",
        title="Input format",
        description="'auto' picks from the file name or directory.",
    )
    input_extensions: str = Field(
        ".txt",
        title="Text-directory extensions",
        description="With a directory input: read only files with these extensions (comma-separated, "
        "e.g. .txt,.md; a .gz after one is allowed); other files are quarantined, not read.",
    )
    follow_external_symlinks: bool = Field(
        False,
        title="Follow symlinks out of the input directory",
        description="With a directory input: also read files whose symbolic link resolves outside the "
        "directory (off: they are quarantined, not read). The report records the setting.",
    )
    max_quarantine_fraction: float = Field(
        0.05,
        ge=0,
        le=1,
        title="Max quarantined fraction",
        description="Refuse the run at ingest, before any noise is drawn (its budget reservation is "
        "released), when more than this fraction of the input's rows is quarantined as malformed; "
        "1 never refuses.",
    )
    user_field: str = Field("user_id", title="User-id field", description="Column/key holding the user id.")
    text_field: str = Field("text", title="Text field", description="Column/key holding the text.")
    public: str | None = Field(
        None,
        title="Public corpus",
        description="Plain-text public corpus (one sentence per line, .gz accepted) used as a prior.",
    )
    out: str = Field(
        ...,
        title="Output directory",
        description="Releases go to OUT/DATASET/runs/RUN_ID; OUT/DATASET/latest points to the "
        "dataset's newest.",
    )
    warehouse: str | None = Field(
        None,
        title="Warehouse directory",
        description="Directory of the private working tables (never published): each run has a DuckDB "
        "file of its own there, WAREHOUSE/runs/RUN_ID.duckdb, removed when the run publishes. Empty: "
        "the machine's DPNGRAM_WAREHOUSE, else ~/.local/share/dpngram/warehouse. The privacy ledger is "
        "not kept here (docs/accounting.md).",
        validate_default=True,
    )
    run_id: str | None = Field(None, title="Run id", description="Defaults to a timestamped id.")

    # -- tokenizer ---------------------------------------------------------------------------
    lowercase: bool = Field(
        True, title="Lower-case tokens", description="Fold case after NFKC normalisation."
    )

    # -- privacy ------------------------------------------------------------------------------
    epsilon: float = Field(
        4.0, gt=0, le=100, title="Epsilon", description="Total privacy loss of the run (epsilon > 0)."
    )
    delta: float = Field(
        1e-7,
        gt=0,
        lt=1,
        title="Delta",
        description="Total failure probability of the run; must also be below 1/number of users.",
    )
    stage_budget: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_STAGE_BUDGET),
        title="Budget split",
        description="Fractions of (epsilon, delta) per stage, as JSON; a stage runs only with a share and "
        "the fractions sum to at most 1. Stages: dpne (vocabulary and k-grams), lm_counts (noisy counts "
        "for the language model), bayes (trigram distribution), synth (synthetic text), triehh (LDP "
        "words). The default runs every stage the product releases, language model included.",
        # the trigger form / REST API refuse unknown stages and fractions outside (0, 1] before a
        # run is created (Airflow validates Params with this JSON schema); the sum is checked by
        # _budget (privacy_precheck)
        json_schema_extra={
            "propertyNames": {"enum": list(STAGES)},
            "additionalProperties": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        },
    )
    lifetime_epsilon: float | None = Field(
        None,
        gt=0,
        title="Lifetime epsilon",
        description="Refuse the run if the dataset's recorded spend plus this run would exceed it.",
    )
    lifetime_delta: float | None = Field(
        None,
        gt=0,
        lt=1,
        title="Lifetime delta",
        description="Refuse the run if the dataset's recorded delta plus this run's would exceed it.",
    )
    budget_calibration: Literal["joint", "per-stage"] = Field(
        "joint",
        title="Budget calibration",
        description="'joint': the stages' noise is scaled together so that their composed total is exactly "
        "the run's epsilon; 'per-stage': each stage is calibrated to its share alone (composes to less).",
    )

    # -- one section per stage (flat names, as CLI flags and Params: ``SECTION.FLAGS``) ----------
    dpne: DpneConfig = Field(default_factory=DpneConfig)
    bayes: BayesConfig = Field(default_factory=BayesConfig)
    lm: LmConfig = Field(default_factory=LmConfig)
    synth: SynthConfig = Field(default_factory=SynthConfig)
    triehh: TriehhConfig = Field(default_factory=TriehhConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)

    # -- validators ---------------------------------------------------------------------------
    @field_validator("dataset")
    @classmethod
    def _dataset_name(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise ValueError(
                "must be 1-64 characters of letters, digits, '_', '.', '-', starting with a letter or digit"
            )
        if value in RESERVED_DATASET_NAMES:
            raise ValueError(f"'{value}' is reserved (a name of the output layout, OUT/DATASET/{value})")
        return value

    @field_validator("input_extensions")
    @classmethod
    def _extensions(cls, value: str) -> str:
        items = [p.strip() for p in value.split(",") if p.strip()]
        if not items or any(not re.match(r"^\.[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$", e) for e in items):
            raise ValueError("must be extensions with their dot, separated by commas, e.g. '.txt,.md'")
        if any(e.lower() == ".gz" for e in items):
            raise ValueError("'.gz' is not an extension of its own: name the one before it (.txt.gz -> .txt)")
        return ",".join(items)

    @field_validator("warehouse")
    @classmethod
    def _warehouse(cls, value: str | None) -> str:
        return str(warehouse_directory(value))

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.:+\-]{0,127}$", value):
            raise ValueError("must be 1-128 characters of letters, digits, '_', '.', ':', '+', '-'")
        return value

    @field_validator("stage_budget")
    @classmethod
    def _budget(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(STAGES))
        if unknown:
            raise ValueError(f"unknown stage(s) {unknown}; known: {list(STAGES)}")
        if any(not (0 < f <= 1) for f in value.values()):
            raise ValueError("every fraction must be in (0, 1]")
        if sum(value.values()) > 1 + 1e-9:
            raise ValueError(f"fractions sum to {sum(value.values()):.4g} > 1")
        return value

    @model_validator(mode="after")
    def _triehh(self) -> RunConfig:
        alphabet, end = self.triehh.alphabet, self.triehh.end_symbol
        if len(set(alphabet)) != len(alphabet) or any(ch.isspace() for ch in alphabet):
            raise ValueError("triehh_alphabet: must not repeat characters or contain whitespace")
        if end in alphabet or end.isspace():
            raise ValueError("triehh_end_symbol: must be a non-space character outside triehh_alphabet")
        method = self.dpne.vocabulary_method
        uses_triehh = method in ("triehh", "both")
        if uses_triehh and self.stage_budget.get("triehh", 0) <= 0:
            raise ValueError(f"vocabulary_method: '{method}' needs a budget share stage_budget.triehh")
        if not uses_triehh and "triehh" in self.stage_budget:
            raise ValueError("stage_budget: 'triehh' has a share but vocabulary_method is 'dpsu'")
        if method == "triehh" and self.dpne.max_n == 1 and "dpne" in self.stage_budget:
            raise ValueError(
                "stage_budget: with vocabulary_method 'triehh' and max_n 1 no dpne level draws noise, so "
                "the dpne share would buy nothing; drop it or raise max_n"
            )
        return self

    @model_validator(mode="after")
    def _lm_route(self) -> RunConfig:
        if self.lm.route == "mixture" and LM_SOURCE not in self.stage_budget:
            raise ValueError(
                f"lm_route: 'mixture' is built from the noisy counts of stage {LM_SOURCE}, which has no "
                "stage_budget share; add one, or use 'auto' (no model without it) or 'off'"
            )
        if LM_SOURCE in self.stage_budget and self.lm.order > 3:  # refused before any budget is spent
            raise ValueError(
                f"lm_order: the model is built from the noisy counts of stage {LM_SOURCE}, which go up to "
                f"order 3 (got {self.lm.order}); lower lm_order, or drop the {LM_SOURCE} share (no model)"
            )
        return self

    @model_validator(mode="after")
    def _lifetime(self) -> RunConfig:
        if self.lifetime_epsilon is not None and self.lifetime_epsilon < self.epsilon:
            raise ValueError(
                f"lifetime_epsilon ({self.lifetime_epsilon}) is below this run's epsilon ({self.epsilon})"
            )
        if self.lifetime_delta is not None and self.lifetime_delta < self.delta:
            raise ValueError(
                f"lifetime_delta ({self.lifetime_delta}) is below this run's delta ({self.delta})"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_names(cls, values: Any) -> Any:
        """Accept the flat names (``bayes_clip_count``, ``max_n``, ``engine`` ...) that the CLI flags,
        Airflow Params and saved parameters use, and put each into its section."""
        if not isinstance(values, dict):
            return values
        nested: dict[str, Any] = {}
        for key, value in values.items():
            where = FLAT_NAMES.get(key)
            if where is None:
                nested[key] = value
            else:
                section, field = where
                current = nested.setdefault(section, {})
                if isinstance(current, dict):
                    current[field] = value
        return nested

    def text_extensions(self) -> tuple[str, ...]:
        """``input_extensions`` as lower-case extensions with their dot."""
        return tuple(e.strip().lower() for e in self.input_extensions.split(",") if e.strip())

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def build(cls, **values: Any) -> RunConfig:
        """Validate ``values`` by flat name (None means 'use the default'), raising
        :class:`ConfigError` with one line per problem."""
        cleaned = {k: v for k, v in values.items() if v is not None}
        try:
            return cls(**cleaned)
        except ValidationError as err:
            raise ConfigError(format_errors(err)) from None

    def with_values(self, **values: Any) -> RunConfig:
        """A validated copy with ``values`` (flat names) changed."""
        return RunConfig.build(**{**self.flat(), **values})

    def flat(self) -> dict[str, Any]:
        """Every parameter by its flat name (JSON types), in :func:`flat_fields` order."""
        dumped = self.model_dump(mode="json")
        out: dict[str, Any] = {}
        for name, section, field, _ in flat_fields():
            out[name] = dumped[field] if section is None else dumped[section][field]
        return out

    @property
    def run_warehouse(self) -> Path:
        """The DuckDB file of this run's private tables: ``WAREHOUSE/runs/RUN_ID.duckdb`` (a run
        id is fixed once the run has started)."""
        if not self.run_id:
            raise ConfigError("run_id: is required once a run has started (call prepare() first)")
        assert self.warehouse is not None  # the validator fills it
        return Path(self.warehouse) / "runs" / f"{self.run_id}.duckdb"

    @property
    def budget(self) -> Budget:
        """The run's (epsilon, delta)."""
        return Budget(self.epsilon, self.delta)

    # -- the vocabulary's public domain and new-words round ---------------------------------------
    def vocabulary_public_domain(self) -> bool:
        """Whether the vocabulary has a public domain: a public corpus, ``dpne_public_vocabulary`` > 0,
        and DP-SIPS with 2+ rounds (round 1 fixes the reference size; docs/dpne.md, "The public
        domain of the vocabulary"), with a DPSU vocabulary."""
        dpne = self.dpne
        return (
            self.public is not None
            and dpne.public_vocabulary > 0
            and dpne.policy == "dp-sips"
            and dpne.sips_rounds >= 2
            and dpne.vocabulary_method != "triehh"
        )

    def new_words_per_user(self) -> int:
        """m of the vocabulary's new-words round, 0 when it does not run: it runs with a public domain
        only (:meth:`vocabulary_public_domain`; its candidates are the words the public corpus lacks,
        docs/dpne.md "New words"), and ``dpsu_new_words`` 0 turns it off."""
        return self.dpne.new_words if self.vocabulary_public_domain() else 0

    def new_words_reserve(self) -> float:
        """The share every DPNE level gives up for the new-words round: ``dpsu_new_words_share`` when
        the round runs and every level pays for it (``dpsu_new_words_funding`` 'dpne'); else 0."""
        funded_by_levels = self.dpne.new_words_funding == "dpne"
        return self.dpne.new_words_share if self.new_words_per_user() and funded_by_levels else 0.0

    # -- the budget plan (dpngram.config.budget_plan: the one home of these rules) -------------
    def nominal_share(self, stage: str) -> Budget:
        """``stage``'s fraction of the run's (epsilon, delta) (:func:`budget_plan.nominal_share`)."""
        return budget_plan.nominal_share(self, stage)

    def stage_share(self, stage: str) -> Budget:
        """The (epsilon, delta) ``stage`` calibrates its noise to (:func:`budget_plan.stage_share`)."""
        return budget_plan.stage_share(self, stage)

    def stage_skip_reason(self, stage: str) -> str | None:
        """Why a budgeted stage will not run, or None (:func:`budget_plan.stage_skip_reason`)."""
        return budget_plan.stage_skip_reason(self, stage)

    def budget_plan(self) -> BudgetPlan:
        """Every running budgeted stage's calibrated budget (:func:`budget_plan.budget_plan`)."""
        return budget_plan.budget_plan(self)

    def check_against_users(self, n_users: int) -> None:
        """Refuse parameters that void the guarantee for a dataset of ``n_users`` users."""
        if n_users > 0 and self.delta >= 1.0 / n_users:
            raise ConfigError(
                f"delta: must be < 1/number of users for a meaningful guarantee (got {self.delta:g}; "
                f"the input has too few users for it — lower delta)"
            )

    def to_json(self) -> str:
        """The parameters by flat name, as the report's ``parameters`` part records them."""
        return json.dumps(self.flat(), sort_keys=True)

    @classmethod
    def param_schema(cls) -> dict[str, dict[str, Any]]:
        """JSON-schema fragments per flat name, in the form Airflow ``Param(default, **schema)``
        takes (:func:`dpngram.config.run.param_schema`)."""
        return param_schema()


def flat_fields() -> list[tuple[str, str | None, str, Any]]:
    """(flat name, section or None, field, pydantic FieldInfo) for every parameter: the top-level
    fields first, then each section's, in declaration order."""
    out: list[tuple[str, str | None, str, Any]] = [
        (name, None, name, info) for name, info in RunConfig.model_fields.items() if name not in SECTIONS
    ]
    for section, model in SECTIONS.items():
        out += [(model.FLAGS[field], section, field, info) for field, info in model.model_fields.items()]
    return out


def param_schema() -> dict[str, dict[str, Any]]:
    """JSON-schema fragments per flat name (type, bounds, enum, title, description, default,
    section), in the form Airflow ``Param(default, **schema)`` takes."""
    out: dict[str, dict[str, Any]] = {}
    schemas: dict[str | None, dict[str, Any]] = {None: RunConfig.model_json_schema()}
    for name, section, field, info in flat_fields():
        if section not in schemas:
            schemas[section] = SECTIONS[section].model_json_schema()
        frag = schema_fragment(schemas[section]["properties"][field], name)
        if not info.is_required():
            frag["default"] = info.get_default(call_default_factory=True)
        if section is not None:
            frag["section"] = SECTIONS[section].TITLE
        out[name] = frag
    return out


#: The machine's warehouse directory when a run names none (each Airflow worker its own).
WAREHOUSE_ENV = "DPNGRAM_WAREHOUSE"


def default_warehouse() -> Path:
    """Where private working tables go when neither the run nor :data:`WAREHOUSE_ENV` names a
    directory: ``$XDG_DATA_HOME/dpngram/warehouse`` (XDG's default ``~/.local/share``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dpngram" / "warehouse"


def warehouse_directory(value: str | None) -> Path:
    """The absolute warehouse directory for ``value`` (None: :data:`WAREHOUSE_ENV`, else
    :func:`default_warehouse`). A file there is the one-file warehouse of an older dpngram, which
    also held the privacy ledger: refused, saying how to keep its ledger."""
    chosen = value or os.environ.get(WAREHOUSE_ENV) or str(default_warehouse())
    path = Path(chosen).expanduser().resolve()
    if path.is_file():
        raise ValueError(
            f"{path} is a file: the one-file warehouse of an older dpngram, which also held the privacy "
            f"ledger. Warehouses are directories now (one DuckDB file per run) and the ledger is kept "
            f"apart: import its ledger with `dpngram ledger --import {path}`, then pass a directory"
        )
    return path
