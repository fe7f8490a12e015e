"""Layer ``orchestration``: the plan of a release.

``plan.py``: ``STEPS``, every step of a release in order with its skip rule (the Airflow DAG makes
one task per step; the CLI's ``run_release`` runs them in one process) and ``release_steps``;
``form.py``: the Airflow trigger form.

Owns: the steps of a release, their order and skip rules.
Imports: dpngram.stages (inside a function per stage, when a step runs), dpngram.mechanisms,
dpngram.validation, dpngram.lm, dpngram.release, dpngram.engines, dpngram.text, dpngram.config, dpngram.core.
"""
