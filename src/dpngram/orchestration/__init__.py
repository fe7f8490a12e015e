"""Layer ``orchestration``: the plan of a release.

``plan.py``: ``STEPS``, every step of a release in order with its skip rule (the Airflow DAG makes
one task per step; the CLI's ``run_release`` runs them in one process), ``release_steps`` and
``run_dpne``.

Owns: the steps of a release, their order and skip rules.
Imports: dpngram.stages (lazily, when a step runs), dpngram.mechanisms, dpngram.validation,
dpngram.lm, dpngram.release, dpngram.engines, dpngram.text, dpngram.config, dpngram.core.
"""
