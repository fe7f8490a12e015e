"""The only place in dpngram that draws randomness used by a DP mechanism.

Every mechanism takes a :class:`NoiseSource`. In a real run it is seeded from the operating
system's CSPRNG (:func:`secrets.randbits`, 256 bits) and drives numpy's counter-based ``Philox``
bit generator, whose state cannot practically be recovered from its outputs the way PCG/MT state
can. Nothing in a run configuration can choose the seed.

Samplers and the floating-point caveat (Mironov 2012, "On significance of the least significant
bits for differential privacy"): textbook continuous samplers computed in floating point have
gaps and irregularities in the low-order bits of their output, which can leak the value they were
added to when the *noisy value itself* is released. dpngram therefore uses:

* :meth:`NoiseSource.gaussian` (numpy's continuous normal) only where the output is a
  **threshold decision** (DPSU / DPNE ``H[u] + Z > rho``): one bit per key is released, and the
  probability of that bit depends only on the sampler's CDF, which numpy's 53-bit ziggurat
  reproduces to within floating-point rounding.
* :meth:`NoiseSource.discrete_gaussian` / :meth:`NoiseSource.discrete_laplace` (exact integer
  distributions, Canonne-Kamath-Steinke 2020, Alg. 1-3, vectorised) and their grid-scaled forms
  :meth:`gaussian_on_grid` / :meth:`laplace_on_grid` wherever a **noisy value is released**. The
  outputs lie on a fixed grid independent of the private input, so the low-bit attack does not
  apply. Their Bernoulli acceptance steps use double-precision uniforms, so the realised
  probabilities differ from the ideal ones by at most ~2^-53 relative; see ``docs/noise.md``.

OpenDP's exact samplers are the reference these are cross-checked against in the tests; they are
too slow for bulk use (about 6,000 Gaussian draws per second on the project machines).

Non-private randomness (synthetic corpora, benchmark splits) must use :func:`simulation_rng`, which
is explicitly *not* for DP noise, so that every generator in the code base is created here.

Owns: :class:`NoiseSource` (every draw of DP noise), the insecure test seed, :func:`simulation_rng`.
Imports: nothing from dpngram; numpy.
"""

from __future__ import annotations

import math
import numbers
import os
import secrets
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

#: Both must hold for a seeded (reproducible, NOT private) noise source: this environment variable
#: set to this exact value, and pytest imported in the process. The CLI and DAG never set it.
TEST_SEED_ENV = "DPNGRAM_INSECURE_TEST_SEED"


TEST_SEED_VALUE = "yes-this-process-releases-nothing"


_BATCH_OVERSAMPLE = 1.6  # discrete-Gaussian rejection accepts >= ~0.6 of proposals for sigma >= 1


#: The callback of :func:`before_first_draw`, fired (once) by the first draw of any NoiseSource.
_FIRST_DRAW: list[Callable[[], None]] = []
_FIRST_DRAW_LOCK = threading.Lock()


@contextmanager
def before_first_draw(callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` once, just before the first random draw of any :class:`NoiseSource`
    inside the block (process-wide: noise is drawn on the driver, one stage at a time).

    :func:`dpngram.release.spend.spend_once` uses it to charge the ledger *before* a stage draws
    its noise, so a crash can only leave an over-charge, never a draw without a charge. If the
    callback raises (e.g. the lifetime budget is exhausted), the draw does not happen."""
    with _FIRST_DRAW_LOCK:
        if _FIRST_DRAW:
            raise RuntimeError("before_first_draw blocks cannot be nested")
        _FIRST_DRAW.append(callback)
    try:
        yield
    finally:
        with _FIRST_DRAW_LOCK:
            _FIRST_DRAW.clear()


def _about_to_draw() -> None:
    if not _FIRST_DRAW:  # fast path: no stage is watching
        return
    with _FIRST_DRAW_LOCK:
        callback = _FIRST_DRAW.pop() if _FIRST_DRAW else None
    if callback is not None:
        callback()


class InsecureSeedError(RuntimeError):
    """Raised when a seeded noise source is requested outside the test harness."""


class NoiseSource:
    """CSPRNG-seeded generator of DP noise. Create one per stage (or per run) and pass it down."""

    def __init__(self, *, _seed: int | None = None, _label: str = "secure") -> None:
        entropy = secrets.randbits(256) if _seed is None else _seed
        self._rng = np.random.Generator(np.random.Philox(np.random.SeedSequence(entropy)))
        self.mode = _label

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def secure(cls) -> NoiseSource:
        """The only constructor a real run uses."""
        return cls()

    @classmethod
    def seeded_for_tests(cls, seed: int) -> NoiseSource:
        """Reproducible noise for determinism tests. Refused unless running under pytest with
        ``DPNGRAM_INSECURE_TEST_SEED`` set to :data:`TEST_SEED_VALUE`; such output is not private."""
        if os.environ.get(TEST_SEED_ENV) != TEST_SEED_VALUE or "pytest" not in sys.modules:
            raise InsecureSeedError(
                "a seeded noise source is only available inside the test suite; real runs always "
                "draw noise from the operating system's CSPRNG"
            )
        return cls(_seed=seed, _label="seeded-test (NOT PRIVATE)")

    @property
    def is_secure(self) -> bool:
        return self.mode == "secure"

    # -- continuous Gaussian: threshold decisions only -----------------------------------------
    def gaussian(self, sigma: float, size: int | tuple[int, ...] | None = None) -> np.ndarray:
        """N(0, sigma^2) draws, for threshold decisions (one bit released per draw)."""
        _about_to_draw()
        _check_scale("sigma", sigma)
        return self._rng.normal(0.0, sigma, size)

    def above_threshold(self, values: np.ndarray, sigma: float, threshold: float) -> np.ndarray:
        """Boolean mask of ``values + N(0, sigma^2) > threshold`` (DPSU / DPNE release rule)."""
        values = np.asarray(values, dtype=np.float64)
        return values + self.gaussian(sigma, values.shape) > threshold

    # -- exact integer samplers: released noisy values ----------------------------------------
    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        """Integers with P(x) proportional to exp(-|x|/scale) (difference of two geometrics)."""
        _about_to_draw()
        _check_scale("scale", scale)
        p = -math.expm1(-1.0 / scale)  # success probability 1 - e^{-1/scale}
        first = self._rng.geometric(p, size)
        second = self._rng.geometric(p, size)
        return (first - second).astype(np.int64)

    def discrete_gaussian(self, sigma: float, size: int) -> np.ndarray:
        """Integers with P(x) proportional to exp(-x^2 / (2 sigma^2)).

        Canonne, Kamath & Steinke (2020), Algorithm 3: propose Y from a discrete Laplace with
        scale t = floor(sigma) + 1 and accept with probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)).
        Vectorised: proposals are drawn in batches until ``size`` have been accepted.
        """
        _about_to_draw()
        _check_scale("sigma", sigma)
        t = math.floor(sigma) + 1
        out = np.empty(size, dtype=np.int64)
        filled = 0
        while filled < size:
            want = size - filled
            batch = max(16, int(want * _BATCH_OVERSAMPLE))
            proposal = self.discrete_laplace(t, batch)
            accept_p = np.exp(-((np.abs(proposal) - sigma * sigma / t) ** 2) / (2.0 * sigma * sigma))
            accepted = proposal[self._rng.random(batch) < accept_p][:want]
            out[filled : filled + accepted.size] = accepted
            filled += accepted.size
        return out

    def gaussian_on_grid(self, sigma: float, size: int, grid: float) -> np.ndarray:
        """Gaussian noise for released values: ``grid * DiscreteGaussian(sigma / grid)``."""
        _check_scale("sigma", sigma)
        _check_scale("grid", grid)
        return grid * self.discrete_gaussian(sigma / grid, size).astype(np.float64)

    def laplace_on_grid(self, scale: float, size: int, grid: float) -> np.ndarray:
        """Laplace noise for released values: ``grid * DiscreteLaplace(scale / grid)``."""
        _check_scale("scale", scale)
        _check_scale("grid", grid)
        return grid * self.discrete_laplace(scale / grid, size).astype(np.float64)

    # -- discrete helpers needed by the scalable samplers --------------------------------------
    def binomial(self, n: int, p: float) -> int:
        """One Binomial(n, p) draw (e.g. the number of spurious k-grams, DPNE supplement Alg. 1)."""
        _about_to_draw()
        if n < 0 or not 0.0 <= p <= 1.0:
            raise ValueError(f"binomial needs n >= 0 and 0 <= p <= 1 (got n={n}, p={p})")
        return int(self._rng.binomial(n, p)) if n > 0 else 0

    def integers(self, low: int, high: int, size: int) -> np.ndarray:
        """Uniform integers in [low, high)."""
        _about_to_draw()
        return self._rng.integers(low, high, size, dtype=np.int64)

    def uniform(self, size: int) -> np.ndarray:
        """Uniform floats in [0, 1)."""
        _about_to_draw()
        return self._rng.random(size)

    def sample_without_replacement(self, population: int, k: int) -> np.ndarray:
        """``k`` distinct integers drawn uniformly from range(population)."""
        _about_to_draw()
        if not 0 <= k <= population:
            raise ValueError(f"cannot draw {k} distinct items from {population}")
        if k == 0:
            return np.empty(0, dtype=np.int64)
        if k * 4 >= population:  # dense: a permutation prefix is cheapest
            return self._rng.permutation(population)[:k].astype(np.int64)
        chosen: np.ndarray = np.empty(0, dtype=np.int64)
        while chosen.size < k:  # sparse: draw with replacement, de-duplicate, top up
            extra = self._rng.integers(0, population, int((k - chosen.size) * 1.2) + 8, dtype=np.int64)
            merged = np.concatenate([chosen, extra])
            _, first = np.unique(merged, return_index=True)
            chosen = merged[np.sort(first)]
        return chosen[:k]

    def salt(self) -> int:
        """A random 62-bit integer, for hash-based per-user sampling inside SQL."""
        _about_to_draw()
        return int(self._rng.integers(0, 2**62, dtype=np.int64))


def simulation_rng(seed: int | None = None) -> np.random.Generator:
    """A plain numpy generator for NON-private randomness: synthetic corpora, benchmark user
    splits, test fixtures. Never use it for noise that protects a release."""
    return np.random.default_rng(seed)


def _check_scale(name: str, value: float) -> None:
    # numbers.Real covers int, float and numpy's integer and floating scalars; bool is refused
    # because True/False as a noise scale is always a caller's mistake.
    if isinstance(value, bool) or not (
        isinstance(value, numbers.Real) and math.isfinite(value) and value > 0
    ):
        raise ValueError(f"{name} must be a finite number > 0 (got {value!r})")
