"""The run configuration: typed, validated parameters, one section per stage.

:class:`RunConfig` (``run.py``) is what every layer reads; its sections (``sections.py``), the flat
names that CLI flags and Airflow Params use (``flat.py``) and the budget plan (``budget_plan.py``:
whether each stage runs and with what share) are its parts. The names below are the ones callers
use; import the others from their module.

Owns: the package's public names (re-exported from its modules).
Imports: dpngram.config.run, dpngram.config.sections, dpngram.config.flat,
dpngram.config.budget_plan.
"""

from dpngram.config.budget_plan import DEFAULT_STAGE_BUDGET, STAGES
from dpngram.config.run import RunConfig, flat_fields
from dpngram.config.sections import SECTIONS, BayesConfig, DpneConfig, LmConfig

__all__ = [
    "DEFAULT_STAGE_BUDGET",
    "SECTIONS",
    "STAGES",
    "BayesConfig",
    "DpneConfig",
    "LmConfig",
    "RunConfig",
    "flat_fields",
]
