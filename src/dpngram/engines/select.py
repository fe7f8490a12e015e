"""Which engine a run uses: :func:`open_engine` opens the DuckDB warehouse or a Spark engine from
the run's configuration.

Owns: engine selection (:func:`open_engine`).
Imports: dpngram.engines (base; duckdb and spark lazily: pyspark is an optional extra), dpngram.config,
dpngram.core."""

from __future__ import annotations

import importlib.util
from typing import Any

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError
from dpngram.engines.base import ENGINES, Engine


def open_engine(config: RunConfig, *, spark: Any = None) -> Engine:
    """The engine a run's configuration selects (``config.engine.name``), opened on the run's
    warehouse (DuckDB: the run's own file, ``WAREHOUSE/runs/RUN_ID.duckdb``).
    ``spark``: an existing SparkSession to reuse (tests); otherwise the Spark engine
    creates one from ``config.engine.spark_master``/``config.engine.spark_conf`` and stops it on
    close."""
    engine = config.engine.name
    if engine == "duckdb":
        from dpngram.engines.duckdb import Warehouse

        return Warehouse(
            config.run_warehouse, memory_limit=config.engine.memory_limit, threads=config.engine.threads
        )
    if engine == "spark":
        if importlib.util.find_spec("pyspark") is None:
            raise ConfigError(
                "engine: 'spark' needs the Spark extra, which is not installed (pip install 'dpngram[spark]')"
            )
        from dpngram.engines.spark import SparkEngine

        return SparkEngine.for_config(config, spark=spark)
    raise ValueError(f"engine: must be one of {list(ENGINES)} (got {engine!r})")
