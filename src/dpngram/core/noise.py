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
* integer noise added to a value snapped to a fixed power-of-two grid wherever a **noisy value
  is released** (:meth:`gaussian_on_grid` / :meth:`laplace_on_grid`): the outputs lie on a grid
  independent of the private input, so the low-bit attack does not apply.

  - Gaussian: :meth:`NoiseSource.rounded_gaussian`, ``floor(Z + 1/2)`` with ``Z ~ N(0, σ²)``.
    With the value snapped to an integer ``m`` first, ``m + floor(Z + 1/2) = floor(m + Z + 1/2)``
    is a deterministic function of the continuous Gaussian mechanism's output ``m + Z``, so the
    analytic Gaussian accounting of ``m`` applies to it exactly, in any dimension (post-processing;
    docs/noise.md, "Released Gaussian values").
  - Laplace: :meth:`NoiseSource.discrete_laplace` (the difference of two geometric variables;
    Canonne-Kamath-Steinke 2020), whose privacy loss on a lattice shift is exactly bounded.

  Both are computed in double precision, so the realised probability of each integer differs from
  the ideal one by a relative amount of order ``σ · 2^-50`` (the 52-bit resolution of the
  underlying draws, scaled to lattice units); see ``docs/noise.md``.

OpenDP's exact discrete Laplace is the reference :meth:`discrete_laplace` is cross-checked against in
the tests; OpenDP's exact samplers are too slow for bulk use (about 6,000 Gaussian draws per second
on the project machines).

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


#: Largest noise scale, in lattice units, :meth:`NoiseSource.rounded_gaussian` accepts: beyond it the
#: draws' 52-bit resolution (about 2^-50 · sigma per lattice cell, relative) would no longer be
#: negligible. The stages' grids give sigma/grid of order 1e3-1e8 (docs/noise.md).
MAX_LATTICE_SIGMA = 2.0**36


#: The callback of :func:`before_first_draw`, fired (once) by the first draw of any NoiseSource
#: (every method but :meth:`NoiseSource.selection_salt`).
_FIRST_DRAW: list[Callable[[], None]] = []
_FIRST_DRAW_LOCK = threading.Lock()


@contextmanager
def before_first_draw(callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` once, just before the first random draw of any :class:`NoiseSource`
    inside the block (process-wide: noise is drawn on the driver, one stage at a time). Every
    sampler counts as a draw, and :meth:`NoiseSource.salt` too; only
    :meth:`NoiseSource.selection_salt` does not (a key whose privacy proof holds for any value).

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

    def threshold_bands(
        self, values: np.ndarray, sigma: float, threshold: float, floor: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """One draw ``y = values + N(0, sigma^2)`` and two masks: released ``y > threshold`` and
        admitted ``floor <= y <= threshold`` (DP-SIPS admission: the noisy value itself never
        leaves this process; docs/dpne.md, "Admission by the first round")."""
        values = np.asarray(values, dtype=np.float64)
        noisy = values + self.gaussian(sigma, values.shape)
        released = noisy > threshold
        return released, (noisy >= floor) & ~released

    # -- exact integer samplers: released noisy values ----------------------------------------
    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        """Integers with P(x) proportional to exp(-|x|/scale) (difference of two geometrics)."""
        _about_to_draw()
        _check_scale("scale", scale)
        p = -math.expm1(-1.0 / scale)  # success probability 1 - e^{-1/scale}
        first = self._rng.geometric(p, size)
        second = self._rng.geometric(p, size)
        return (first - second).astype(np.int64)

    def rounded_gaussian(self, sigma: float, size: int) -> np.ndarray:
        """Integers ``floor(Z + 1/2)`` with ``Z ~ N(0, sigma^2)``: Gaussian noise in lattice units.

        Why rounding and not the discrete Gaussian of Canonne, Kamath & Steinke (2020): for an
        integer vector ``m`` (a value snapped to its grid), ``m + floor(Z + 1/2)`` equals
        ``floor(m + Z + 1/2)`` coordinate by coordinate, a fixed function of the continuous Gaussian
        mechanism's output ``m + Z``. Post-processing then gives the release exactly the privacy
        profile of the continuous Gaussian mechanism on ``m`` (analytic Gaussian, any dimension,
        any shape of the change between neighbours), which is what the accountant composes. The
        discrete Gaussian's multivariate profile is not that one; docs/noise.md measures the gap.
        Rounding adds about 1/12 of a squared lattice step to the variance (for sigma of a few
        steps or more; the stages' grids make sigma thousands of steps).
        """
        _about_to_draw()
        _check_scale("sigma", sigma)
        if sigma > MAX_LATTICE_SIGMA:
            raise ValueError(
                f"sigma in lattice units must be at most 2^36 (got {sigma:.3g}); use a coarser grid"
            )
        return np.floor(self._rng.normal(0.0, sigma, size) + 0.5).astype(np.int64)

    def gaussian_on_grid(self, sigma: float, size: int, grid: float) -> np.ndarray:
        """Gaussian noise for released values: ``grid * rounded_gaussian(sigma / grid)``. Add it to a
        value already snapped to the same power-of-two grid (docs/noise.md, steps 1-2)."""
        _check_scale("sigma", sigma)
        _check_scale("grid", grid)
        return grid * self.rounded_gaussian(sigma / grid, size).astype(np.float64)

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
        """A random 62-bit integer for hash-based sampling inside SQL, counted as a **real draw**:
        inside :func:`before_first_draw` the ledger is charged before it, like any noise.

        The default for every salt. Use it wherever the privacy argument rests on the randomness
        (or secrecy) of the salted selection itself: subsampling or shuffling amplification, random
        user groups (TrieHH draws its groups with :meth:`sample_without_replacement`, also a real
        draw), a sample released without further noise. A salt that only keys a selection whose
        privacy proof holds for every fixed salt may use :meth:`selection_salt` instead."""
        _about_to_draw()
        return self._draw_salt()

    def selection_salt(self) -> int:
        """A random 62-bit integer keying a selection inside SQL that does **not** charge the ledger
        by itself (it does not fire :func:`before_first_draw`): the stage is charged at its first
        real noise draw, so a failure in the SQL between this salt and that draw (out of memory,
        disk full, a kill) leaves the stage uncharged and resumable (docs/faults.md, "Selection
        salts").

        Allowed only when both hold:

        1. the privacy proof holds for **every fixed value** of the salt (it could be public):
           the salt only picks *which* of a user's items a contribution bound keeps, the order in
           which users are visited, or a partition of the users by id, and the sensitivity bound or
           parallel composition holds whatever it picks; its randomness buys utility (an unbiased
           subset), not privacy;
        2. the selection reaches the release only through a later noise draw of the same stage:
           nothing computed from it is written, logged or returned before that draw.

        Then drawing it again after a failure that released nothing costs no budget: each attempt
        is the same (ε, δ)-DP mechanism for whatever salt it got. Today: the DPSU/DPNE per-user
        subset and the policy Gaussian's visiting order (:func:`dpngram.mechanisms.dpsu.secret_histogram`),
        the Bayesian stage's per-user trigram subset, the LM-count stage's selection/counting
        partition. Anything else uses :meth:`salt`; ``tests/test_faults.py`` fails on a call site
        that is not on its reviewed list."""
        return self._draw_salt()

    def _draw_salt(self) -> int:
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
