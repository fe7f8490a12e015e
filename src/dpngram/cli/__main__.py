"""``python -m dpngram.cli``: the ``dpngram`` command.

Owns: nothing (runs :func:`dpngram.cli.main.main`).
Imports: dpngram.cli.main.
"""

from dpngram.cli.main import main

raise SystemExit(main())
