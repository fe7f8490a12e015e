"""The policy Gaussian's sequential update, compiled (numba): one pass over users in visiting order.

Kept apart from :mod:`dpngram.mechanisms.dpsu` so that importing the mechanisms does not import
numba (it is loaded only when a policy histogram is built); the compiled code is cached next to
this file, so a process pays the compilation once per machine.

Owns: :func:`policy_gaussian_fill`.
Imports: numba; the standard library.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def policy_gaussian_fill(
    weights: np.ndarray, offsets: np.ndarray, items: np.ndarray, cap: float
) -> None:  # pragma: no cover - compiled
    """In place, for users u = 0, 1, ... with distinct items ``items[offsets[u]:offsets[u+1]]``:
    ``weights[W] += P((cap - weights[W])_+)``, P the projection onto the unit l2 ball (the same
    update as :func:`dpngram.mechanisms.dpsu_policy.policy_gaussian_update`, which tests compare)."""
    for u in range(offsets.size - 1):
        start, end = offsets[u], offsets[u + 1]
        norm2 = 0.0
        for j in range(start, end):
            gap = cap - weights[items[j]]
            if gap > 0.0:
                norm2 += gap * gap
        scale = 1.0 / math.sqrt(norm2) if norm2 > 1.0 else 1.0
        for j in range(start, end):
            i = items[j]
            gap = cap - weights[i]
            if gap > 0.0:
                weights[i] += gap * scale
