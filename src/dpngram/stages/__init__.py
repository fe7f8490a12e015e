"""Layer ``stages``: one module per pipeline step.

A stage reads the configuration, calls its mechanism, charges the budget through
:func:`dpngram.release.spend.spend_once` and returns a public summary. Stages talk to each other
only through the run's warehouse tables and the staged release directory, so each can be its own
Airflow task; no stage imports another (import-linter independence contract).

Owns: the pipeline steps: ``ingest``, ``triehh``, ``dpne.k1`` (vocabulary.py), ``dpne.k2``..``dpne.k12``
and ``dpne.kgrams`` (dpne.py), ``lm_counts``, ``bayes``, ``synth``, ``validation`` (validate.py),
``lm``, ``report``.
Imports: dpngram.mechanisms, dpngram.validation, dpngram.lm, dpngram.release, dpngram.engines,
dpngram.text, dpngram.config, dpngram.core; never another stage.
"""
