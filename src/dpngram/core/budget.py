"""Privacy budgets as values: an (ε, δ) pair with the arithmetic budgets need.

A run's budget is split into stage shares (``budget * fraction``), spends add up under basic
composition (``a + b``) and a spend fits a budget when both parts do (``spend <= budget``). A
``Budget`` unpacks like the pair it is (``epsilon, delta = budget``).

Owns: :class:`Budget`.
Imports: nothing from dpngram; the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

#: Relative slack when comparing budgets (floating-point sums of shares).
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Budget:
    """ε ≥ 0 and 0 ≤ δ < 1."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise ValueError(f"epsilon must be finite and >= 0 (got {self.epsilon!r})")
        if not (0 <= self.delta < 1):
            raise ValueError(f"delta must be in [0, 1) (got {self.delta!r})")

    def __add__(self, other: Budget) -> Budget:
        """Basic composition: the ε's add and the δ's add."""
        return Budget(self.epsilon + other.epsilon, self.delta + other.delta)

    def __mul__(self, fraction: float) -> Budget:
        """A share of this budget (``fraction`` in [0, 1])."""
        if not 0 <= fraction <= 1 + TOLERANCE:
            raise ValueError(f"a share must be in [0, 1] (got {fraction!r})")
        return Budget(self.epsilon * fraction, self.delta * fraction)

    __rmul__ = __mul__

    def __le__(self, other: Budget) -> bool:  # type: ignore[override]
        """True when this spend fits within ``other`` (both parts, up to rounding)."""
        return self.epsilon <= other.epsilon * (1 + TOLERANCE) and self.delta <= other.delta * (1 + TOLERANCE)

    def __iter__(self) -> Iterator[float]:
        yield self.epsilon
        yield self.delta
