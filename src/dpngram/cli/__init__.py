"""``dpngram`` command line: run a release (or one part of it) in-process, with progress and a summary.

Sub-commands::

    dpngram sample   --out DIR [--users N] [--seed S]        synthetic corpus for trying things out
    dpngram ingest   --input PATH [...]                      ingest only; operator summary (console)
    dpngram run      --input PATH --out DIR [...]            privacy_precheck, the steps of the plan
                                                             (ingest, dpne.k1..kT, dpne.kgrams, ...,
                                                             validation, lm, report), publish
    dpngram baseline --method dpsu-all|dpsu-even|dpsu-single [--k K] --input PATH --out DIR [...]
    dpngram ledger   --dataset NAME [--warehouse PATH]       privacy spend history of a dataset
    dpngram budget   --dataset NAME [--lifetime-epsilon E]   show or change the dataset's lifetime budget
    dpngram gc       [--out DIR] [--run-id ID] [--delete]   open reservations of failed runs
    dpngram audit    [--mechanism NAME] [--fast] [--json]    empirical lower bound on epsilon per mechanism
    dpngram demo                                             sample corpus + Airflow `dags test` run
    dpngram evaluate --model PATH --text FILE [--arpa PATH] [--json]   open-vocab perplexity, top-k, OOV rate

Every :class:`dpngram.config.RunConfig` field is a flag of ``run``/``baseline``/``ingest``
(generated from :func:`dpngram.config.flat_fields`, so flags never drift from the configuration). ``run``
and ``baseline`` run the steps of :mod:`dpngram.orchestration.plan` in this process
(:func:`~dpngram.orchestration.plan.run_release`), the same steps the Airflow DAG runs as tasks.

The package, by concern: :mod:`~dpngram.cli.flags` (flags generated from the configuration),
:mod:`~dpngram.cli.console` (progress, summaries, quarantine), :mod:`~dpngram.cli.commands` (one
thin function per sub-command, calling the release, ledger and publish layers),
:mod:`~dpngram.cli.parser` (the argument parser) and :mod:`~dpngram.cli.main` (the entry point: one
line and an exit code per error).

Owns: the ``dpngram`` command (its entry point :func:`main`, ``dpngram = dpngram.cli:main``).
Imports: dpngram.cli.main.
"""

from dpngram.cli.main import main

__all__ = ["main"]
