"""Layer ``core``: the foundations every other layer builds on.

``errors.py`` every user-facing error class; ``noise.py`` :class:`~dpngram.core.noise.NoiseSource`,
the only place noise is drawn; ``accounting.py`` σ from (ε, δ), composition, the privacy summary;
``budget.py`` ``Budget``, an (ε, δ) pair with its arithmetic.

Owns: the user-facing errors, noise sampling, privacy calibration and composition, budgets.
Imports: no other dpngram layer; numpy, scipy.
"""
