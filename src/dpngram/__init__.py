"""dpngram: differentially private n-grams and language models.

One import package in layers (docs/architecture.md), top to bottom: ``cli``, ``demo``,
``orchestration``, ``stages``, ``mechanisms`` | ``validation``, ``lm``, ``release``, ``engines``,
``text``, ``config``, ``core``. A module imports its own layer and the layers below it, never one
above, and no stage imports another stage (import-linter contracts in ``pyproject.toml``). The SQL
statements ship as the data package ``dpngram.sql`` (``sql/<stage>/<statement>.sql``).

Owns: the package root (its location is what the Spark engine ships to executors); no code.
Imports: nothing.
"""
