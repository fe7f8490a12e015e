"""New words: one more DPSU round for the vocabulary, over the words nobody has released yet.

The vocabulary's DP-SIPS rounds (:mod:`dpngram.mechanisms.dpsu`) keep up to Delta0 = 100 distinct
words per user, picked at random, and a word outside the public domain needs the full DPSU
threshold. On a small population of real writers this admits only the most common words: in the
chat corpus of the LM benchmark (1,169 users) "haha" is used by 45% of the users and is still not
released, because a user's 100 kept words rarely include it. The words of real text that fall
outside the public corpus (benchmarks/results/lm_oov.json) are exactly the ones the language model
then cannot name.

This round (``dpsu_new_words`` = m > 0; docs/dpne.md, "New words") runs after the vocabulary's
release, over each user's words that are neither released nor in the public domain, and keeps the
user's m most frequent of them (ties in a secret salted order), weight 1/sqrt(#kept) each. That is
the weighted DPSU of GGK+20 with Delta = m on a filtered relation:

* the filter is public data (the public domain) and earlier DP output (the released words), so by
  adaptive composition the round is, given them, a Gaussian mechanism of l2-sensitivity 1 (each
  user's weights have norm <= 1, and the kept set depends on that user's words only);
* the threshold rho_new = dpsu_threshold(sigma_new, delta_new, m) bounds by delta_new the
  probability that a word held only by the added user is released.

Its noise is sigma_1 / sqrt(f) (f = ``dpsu_new_words_share``; sigma_1 the vocabulary's noise without
the round) and its threshold takes f of the vocabulary's threshold delta_0. Who pays for it is
``dpsu_new_words_funding``: 'vocabulary' (:func:`split_new_words`) runs the rest of the vocabulary at
sigma_1 / sqrt(1 - f), the two Gaussians composing exactly to the one sigma_1 (Dong, Roth & Su
2019); 'dpne' (:func:`new_words_from_levels`) multiplies every DPNE level's sigma, the vocabulary's
included, by the same factor so that the levels and the round compose exactly to the stage's
sigma* (:func:`dpngram.core.accounting.reserve_gaussian`). Either way the stage's privacy shape and
the run's calibration are unchanged.

Owns: :class:`NewWordsRound` (its parameters and privacy events) and its release.
Imports: dpngram.mechanisms (dpsu_policy, dpsu_rounds), dpngram.engines, dpngram.core; pyarrow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

from dpngram.core.accounting import PrivacyEvent, compose_gaussian_sigmas, dpsu_threshold, reserve_gaussian
from dpngram.core.errors import ConfigError
from dpngram.core.noise import NoiseSource
from dpngram.engines.base import Engine
from dpngram.engines.sql import load_sql, safe_identifier
from dpngram.mechanisms.dpsu_policy import threshold_histogram
from dpngram.mechanisms.dpsu_rounds import dpsu_events

#: Largest ``dpsu_new_words`` (words a user contributes to the round).
MAX_NEW_WORDS_PER_USER = 10_000

#: Who pays for the round (``dpsu_new_words_funding``): the vocabulary alone, or every DPNE level.
NewWordsFunding = Literal["vocabulary", "dpne"]


@dataclass(frozen=True)
class NewWordsRound:
    """Public parameters of the new-words round: noise ``sigma``, threshold ``threshold``, the
    threshold's ``threshold_delta`` and ``per_user`` (m: words kept per user)."""

    sigma: float
    threshold: float
    threshold_delta: float
    per_user: int

    def events(self, stage: str) -> list[PrivacyEvent]:
        """The round's privacy map: a sensitivity-1 Gaussian of ``sigma`` and the (0,
        ``threshold_delta``) event of its threshold (module docstring)."""
        return dpsu_events(stage, self.sigma, self.threshold_delta, "new words")

    def report(self, released: int | None) -> dict[str, float | int | None]:
        return {
            "per_user": self.per_user,
            "sigma": self.sigma,
            "rho": self.threshold,
            "threshold_delta": self.threshold_delta,
            "released": released,
        }


def check_new_words(share: float, per_user: int) -> None:
    """``dpsu_new_words``: an integer in 1..MAX_NEW_WORDS_PER_USER; ``dpsu_new_words_share``: in (0, 1)."""
    if (
        isinstance(per_user, bool)
        or not isinstance(per_user, int)
        or not 1 <= per_user <= MAX_NEW_WORDS_PER_USER
    ):
        raise ConfigError(
            f"dpsu_new_words: must be an integer in 1..{MAX_NEW_WORDS_PER_USER} (got {per_user!r})"
        )
    if not (isinstance(share, (int, float)) and math.isfinite(share) and 0 < share < 1):
        raise ConfigError(f"dpsu_new_words_share: must be a number in (0, 1) (got {share!r})")


def _round(sigma: float, threshold_delta: float, share: float, per_user: int) -> tuple[float, NewWordsRound]:
    """The rest of the threshold delta (1 - f) delta_0 and the round at ``sigma`` with f delta_0."""
    main_delta = threshold_delta * (1.0 - share)
    new_delta = threshold_delta - main_delta
    return main_delta, NewWordsRound(
        sigma=sigma,
        threshold=dpsu_threshold(sigma, new_delta, per_user),
        threshold_delta=new_delta,
        per_user=per_user,
    )


def split_new_words(
    sigma: float, threshold_delta: float, share: float, per_user: int
) -> tuple[float, float, NewWordsRound]:
    """Funding 'vocabulary': split the vocabulary's (sigma_1, delta_0) between its release and the
    new-words round: returns (sigma_1 / sqrt(1 - f), (1 - f) delta_0, the round at sigma_1 / sqrt(f)
    and the rest of delta_0). The two sigmas compose to at most ``sigma`` and a few ulps below it (rounded
    as :func:`dpngram.mechanisms.dpsu_rounds.sips_sigmas` rounds: the accountant's epsilon is never
    below the one Gaussian's) and the deltas add up to
    ``threshold_delta``."""
    check_new_words(share, per_user)
    main, new = sigma / math.sqrt(1.0 - share), sigma / math.sqrt(share)
    while compose_gaussian_sigmas([main, new]) > sigma:
        main, new = math.nextafter(main, 0.0), math.nextafter(new, 0.0)
    main_delta, rnd = _round(new, threshold_delta, share, per_user)
    return main, main_delta, rnd


def new_words_from_levels(
    sigmas: Sequence[float], threshold_delta: float, share: float, per_user: int
) -> tuple[float, float, NewWordsRound]:
    """Funding 'dpne': the round at sigma_1 / sqrt(f) (``sigmas`` = the DPNE levels' [sigma_1, ...,
    sigma_T] without the round), paid by every level in proportion
    (:func:`dpngram.core.accounting.reserve_gaussian`; the k-gram levels apply the same factor
    through :func:`dpngram.mechanisms.dpne.level_sigmas`). Returns (the vocabulary's scaled sigma_1,
    (1 - f) delta_0, the round with f delta_0)."""
    check_new_words(share, per_user)
    scaled, new = reserve_gaussian(sigmas, share)
    main_delta, rnd = _round(new, threshold_delta, share, per_user)
    return scaled[0], main_delta, rnd


def release_new_words(
    wh: Engine,
    schema: str,
    source: str,
    released: str,
    public: str | None,
    rnd: NewWordsRound,
    noise: NoiseSource,
    token_items: bool = False,
) -> pa.Array:
    """The round over ``{schema}.{source}(user_id, item)`` (one row per occurrence): the histogram
    of each user's ``rnd.per_user`` most frequent items outside ``{schema}.{released}(item)`` and
    ``{schema}.{public}(item)`` (``sql/dpsu/new_words_histogram.sql``; private, dropped here), then
    the items whose weight + N(0, sigma^2) exceeds the threshold. Returns them (keys only).
    ``token_items``: the source is the run's tokens (``dpsu/vocabulary_source``), so the histogram
    is read from the sentences' token ids instead (``new_words_histogram_tokens.sql``, the same
    histogram)."""
    excluded = safe_identifier(f"{released}_new_words_excluded")
    histogram = safe_identifier(f"{released}_new_words_histogram")
    try:
        wh.execute(
            load_sql(
                "dpsu/new_words_excluded",
                schema=schema,
                target=excluded,
                released=released,
                public=public or released,
            )
        )
        wh.execute(
            load_sql(
                "dpsu/new_words_histogram_tokens" if token_items else "dpsu/new_words_histogram",
                schema=schema,
                target=histogram,
                source=source,
                excluded=excluded,
            ),
            {"salt": int(noise.selection_salt()), "per_user": rnd.per_user},
        )
        kept = threshold_histogram(
            wh,
            load_sql("dpsu/histogram_scan", schema=schema, histogram=histogram),
            sigma=rnd.sigma,
            threshold=rnd.threshold,
            noise=noise,
        )
    finally:
        wh.drop(schema, excluded, histogram)
    return kept.column("item").combine_chunks()
