"""benchmarks/dpne/budget.py's composition table (part of ``make bench``'s dpne_bench.py): every
split it lists plans every stage it names, and the joint calibration spends the run's epsilon to
within its tolerance for each (a split whose stages were all skipped once divided by zero)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from dpne.budget import composed_epsilons  # noqa: E402  (benchmarks/ is not a package)

from dpngram.core.accounting import JOINT_TOLERANCE  # noqa: E402


def test_every_split_of_the_composition_table_plans_its_stages_and_spends_the_run_epsilon():
    table = composed_epsilons()
    rows = [*table["demo_splits"].values(), *table["every_combination"]]
    assert len(table["every_combination"]) == 23  # 15 subsets of 4 stages, 8 with TrieHH beside dpne
    for row in rows:
        assert row["target_epsilon"] == 4.0, row["stage_budget"]
        assert row["composed_joint"] <= row["target_epsilon"]
        assert row["relative_error"] <= JOINT_TOLERANCE
        assert row["composed_per_stage"] <= row["composed_joint"] + 1e-12
    assert table["max_relative_error"] == max(r["relative_error"] for r in table["every_combination"])
