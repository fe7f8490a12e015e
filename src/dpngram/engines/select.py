"""Which engine a run uses: :func:`open_engine` opens the DuckDB warehouse or a Spark engine from
the run's configuration.

Owns: engine selection (:func:`open_engine`), the run's DuckDB warehouse (:func:`open_warehouse`), the
in-memory scratch engine (:func:`scratch_engine`): the only places a warehouse is built.
Imports: dpngram.engines (base; duckdb and spark lazily: pyspark is an optional extra), dpngram.config,
dpngram.core."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from dpngram.config import RunConfig
from dpngram.core.errors import ConfigError
from dpngram.engines.base import ENGINES, Engine

if TYPE_CHECKING:
    from dpngram.engines.duckdb import Warehouse


def open_engine(config: RunConfig, *, spark: Any = None) -> Engine:
    """The engine a run's configuration selects (``config.engine.name``), opened on the run's
    warehouse (DuckDB: the run's own file, ``WAREHOUSE/runs/RUN_ID.duckdb``).
    ``spark``: an existing SparkSession to reuse (tests); otherwise the Spark engine
    creates one from ``config.engine.spark_master``/``config.engine.spark_conf`` and stops it on
    close."""
    engine = config.engine.name
    if engine == "duckdb":
        return open_warehouse(config)
    if engine == "spark":
        if importlib.util.find_spec("pyspark") is None:
            raise ConfigError(
                "engine: 'spark' needs the Spark extra, which is not installed (pip install 'dpngram[spark]')"
            )
        from dpngram.engines.spark import SparkEngine

        return SparkEngine.for_config(config, spark=spark)
    raise ValueError(f"engine: must be one of {list(ENGINES)} (got {engine!r})")


def open_warehouse(config: RunConfig, *, read_only: bool = False) -> Warehouse:
    """The run's own DuckDB file (``WAREHOUSE/runs/RUN_ID.duckdb``) with the configured memory
    limit and threads, whatever the engine (the operator's exact statistics live there)."""
    from dpngram.engines.duckdb import Warehouse

    return Warehouse(
        config.run_warehouse,
        memory_limit=config.engine.memory_limit,
        threads=config.engine.threads,
        read_only=read_only,
    )


def scratch_engine(memory_limit: str, threads: int | None = None) -> Warehouse:
    """An in-memory DuckDB engine for work on released (public) files only, such as merging a
    run's released levels, with the same memory bound as the run's warehouse. Closed by its
    ``with`` block; nothing of it persists."""
    from dpngram.engines.duckdb import Warehouse

    return Warehouse(":memory:", memory_limit=memory_limit, threads=threads)
