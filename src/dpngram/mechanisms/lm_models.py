"""The models step ``lm_counts`` scores held-out users under: P, Q, P_β and the released model M.

Step ``lm_counts`` (:mod:`dpngram.stages.lm_counts`) scores its selection users under the mixtures
λ·Q + (1 − λ)·P_β (:mod:`dpngram.mechanisms.lm_selection`) and its verdict users under the released
model M and P (:mod:`dpngram.mechanisms.lm_verdict`). The models are, all of them, post-processing
of the released counts, the DP vocabulary and the public corpus (docs/lm_privacy.md, section 4):

* P, the public model (built with the count domain,
  :attr:`dpngram.mechanisms.lm_counts.CountDomain.public_model`);
* Q, the model of the released noisy counts (:func:`private_model`, ``lm/open_model.py``);
* P_β, P adapted to Q's unigrams with strength β (P_0 = P; the caller's ``adapt``);
* M, weight·Q + (1 − weight)·P_β merged into one backoff model, the model step ``lm`` writes.

:class:`CandidateModels` builds each one's :class:`~dpngram.lm.backoff_scorer.BackoffScorer` once.

Owns: Q from the released counts, the candidate models' scorers and the released model built for
the verdict.
Imports: dpngram.mechanisms.lm_counts (types), dpngram.lm; no noise, no private data.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpngram.lm.backoff_scorer import BackoffScorer
    from dpngram.mechanisms.lm_counts import CountRelease

log = logging.getLogger(__name__)


#: How Q spreads the unigram mass below the threshold (``noisy_count_model``'s ``unresolved``;
#: report part key ``unresolved_unigrams``, which step ``lm`` reads back).
UNRESOLVED_UNIGRAMS = "empirical_bayes"


def private_model(counts: CountRelease, public_model: Any, order: int, *, discount_sigmas: float) -> Any:
    """Q: the model of the released noisy counts (post-processing; lm/open_model.py), the counts
    discounted by ``discount_sigmas``·σ (``lm_count_discount``)."""
    from dpngram.lm.open_model import noisy_count_model

    sigma = counts.sigma
    return noisy_count_model(
        counts.rows.select("n", "ngram", "noisy_count"),
        public_model,
        order,
        threshold=counts.threshold,
        discount=discount_sigmas * sigma,
        unresolved=UNRESOLVED_UNIGRAMS,
        sigma=sigma,
    )


def public_scorer(public_model: Any) -> BackoffScorer:
    """P's scorer (:class:`CandidateModels` takes it built: the stage builds it on its worker)."""
    from dpngram.lm.backoff_scorer import BackoffScorer

    return BackoffScorer.from_model(public_model)


#: (P, Q, β) -> P_β: how step ``lm`` adapts P to Q's unigrams (``dpngram.lm.build.adapted_public``).
Adapt = Callable[[Any, Any, float], Any]


class CandidateModels:
    """The step's models, as scorers built once each: Q, P and P adapted at each strength β the
    selection scores (P itself at β = 0), and the released model (the mixture merged into one
    backoff model, as step ``lm`` builds it) that the verdict scores. ``adapt``: the function step
    ``lm`` builds P_β with, so that the verdict scores the very model it writes; passed in, as
    ``dpngram.lm.build`` reads the run configuration, which a mechanism may not import."""

    def __init__(
        self,
        public_model: Any,
        private_model: Any,
        public_scorer: BackoffScorer | None = None,
        *,
        adapt: Adapt,
    ) -> None:
        self._public, self._private, self._adapt = public_model, private_model, adapt
        self._scorers: dict[str, BackoffScorer] = {} if public_scorer is None else {"public": public_scorer}
        self._adapted: dict[float, Any] = {}
        self._union: Future[Any] | None = None
        self.released_models: dict[tuple[float, float], Any] = {}

    def union_ahead(self, pool: Executor) -> None:
        """Have ``pool``'s worker compute the n-gram union of P and Q now, for the released model
        (:meth:`released`) that the verdict builds after the selection: the union is the same for
        every adapted P (P's rows), and the worker is idle while this thread adapts P for the
        selection. A failure there only makes :meth:`released` compute the union itself."""
        from dpngram.lm.mixture import NgramUnion

        self._union = pool.submit(NgramUnion.of, self._public, self._private)

    def _union_of(self) -> Any:
        if self._union is None:
            return None
        try:
            return self._union.result()
        except Exception as err:  # noqa: BLE001 - mix_models computes it again
            log.warning("lm_counts: the n-gram union computed ahead failed: %s", err)
            return None

    def _scorer(
        self, name: str, build: Callable[[], Any], like: BackoffScorer | None = None
    ) -> BackoffScorer:
        from dpngram.lm.backoff_scorer import BackoffScorer

        if name not in self._scorers:
            self._scorers[name] = BackoffScorer.from_model(build(), like)
        return self._scorers[name]

    def _adapted_model(self, beta: float) -> Any:
        if beta not in self._adapted:
            self._adapted[beta] = self._adapt(self._public, self._private, beta)
        return self._adapted[beta]

    def private(self) -> BackoffScorer:
        return self._scorer("private", lambda: self._private)

    def public(self, beta: float) -> BackoffScorer:
        if beta == 0:
            return self._scorer("public", lambda: self._public)
        return self._scorer(
            f"public_adapted_{beta!r}",
            lambda: self._adapted_model(beta),
            like=self.public(0),  # P's n-grams: its hash tables serve every β
        )

    def released(self, beta: float, weight: float) -> BackoffScorer:
        """The model step ``lm`` writes (``dpngram.lm.build.build_route_mixture``): weight·Q +
        (1 − weight)·P_β merged into one backoff model. Not the per-event mixture the selection
        scores: they differ where neither model lists an n-gram (docs/lm.md, "Mixture")."""
        from dpngram.lm.mixture import mix_models

        def build() -> Any:
            model = mix_models(self._adapted_model(beta), self._private, weight, union=self._union_of())
            self.released_models[(beta, weight)] = model
            return model

        return self._scorer(f"released_{beta!r}_{weight!r}", build)
