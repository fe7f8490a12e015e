"""Airflow local settings for dpngram deployments: pre-import dpngram where tasks are forked.

With the LocalExecutor, each task runs in a process forked from one of the scheduler's executor
workers, which are themselves forked from the scheduler; with the CeleryExecutor, from a Celery
worker's pool processes, forked from the worker. A dpngram task's first import of dpngram (scipy,
duckdb, pyarrow, polars: ``import dpngram.release.context`` alone takes ~6 s on a 2-core machine)
is paid once per task, ~20 times per release. Importing the modules here, in the scheduler or the
Celery worker before they fork, lets every task inherit them.

Airflow imports ``airflow_local_settings`` from ``$AIRFLOW_HOME/config`` in every component; the
pre-import runs only in the scheduler (``airflow scheduler``) and the Celery workers (``airflow
celery worker``), so the api-server, dag-processor and CLI commands start as fast as before. A
failed import is ignored (the task then imports the module itself and reports the error where it
belongs). Nothing here touches data or Airflow settings.
"""

from __future__ import annotations

import importlib
import sys

__all__: list[str] = []  # Airflow copies a local-settings module's public names into its settings

#: The modules dpngram's tasks import (heaviest dependencies first).
PRELOAD = (
    "dpngram.orchestration.plan",
    "dpngram.stages.ingest",
    "dpngram.stages.vocabulary",
    "dpngram.stages.dpne",
    "dpngram.stages.report",
    "dpngram.stages.lm",
)


def _is_scheduler() -> bool:
    """Whether this process forks the task processes: ``airflow scheduler`` (LocalExecutor) or
    ``airflow celery worker`` (CeleryExecutor)."""
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    return bool(args) and (args[0] == "scheduler" or args[:2] == ["celery", "worker"])


if _is_scheduler():
    for _name in PRELOAD:
        try:
            importlib.import_module(_name)
        except Exception:  # noqa: BLE001, S112 - an optimisation only; the task re-imports and reports
            continue
