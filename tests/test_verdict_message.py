"""The model card's verdict lines when the DP verdict cannot tell: about how many times this
dataset's users it would need to tell (``dpngram.lm.model_card.users_multiple``,
``users_needed_line``; docs/lm_privacy.md, section 5a, "Users needed").

The multiple is w/|d̂| (w the log-ratio interval's half-width on the side of 0): it must match the
release itself. With the noise taken out of ``release_verdict`` (the real calibration, the exact
sums), a dataset k times as large with the same per-user difference tells from k ≈ pad/(N|d̂|) on;
the card's multiple is within a few percent of that crossing, so 5% fewer users must still not
tell and 5% more must.
"""

from __future__ import annotations

import math

import pytest

from dpngram.core.noise import NoiseSource
from dpngram.lm.model_card import (
    MAX_USERS_MULTIPLE,
    users_multiple,
    users_needed_line,
    verdict_line,
    verdict_lines,
)
from dpngram.mechanisms import lm_verdict
from dpngram.mechanisms.lm_verdict import VerdictSums, release_verdict


@pytest.fixture
def noiseless(monkeypatch):
    """``release_verdict`` with the real calibration (σ, grid, so the real pad) but the exact sums
    in place of the noisy ones: the interval is then a function of the users alone."""
    real = lm_verdict.noisy_release

    def exact(vector, **kwargs):
        _, calibration = real(vector, **kwargs)
        return vector, calibration

    monkeypatch.setattr(lm_verdict, "noisy_release", exact)


def released(users: int, released_ppl: float, public_ppl: float) -> dict:
    """The verdict on ``users`` users whose per-token perplexity is ``released_ppl`` under the
    released model and ``public_ppl`` under the public-only model (at the default run's lm_counts
    share, ε = 2.38)."""
    sums = VerdictSums(
        released_loss=users * math.log(released_ppl),
        public_loss=users * math.log(public_ppl),
        difference=users * math.log(released_ppl / public_ppl),
        users=users,
    )
    return release_verdict(sums, epsilon=2.38, delta=3.5e-8, noise=NoiseSource.secure())


@pytest.mark.parametrize(
    ("released_ppl", "public_ppl", "better"),
    [(88.0, 92.0, "released model better"), (92.0, 88.0, "public-only model better")],
)
def test_the_multiple_is_where_the_release_starts_to_tell(noiseless, released_ppl, public_ppl, better):
    users = 500
    verdict = released(users, released_ppl, public_ppl)
    assert verdict["verdict"] == "cannot tell"
    multiple = users_multiple(verdict)
    assert multiple is not None and 3 < multiple < 6  # ~0.2-nat half-width against a 0.044-nat gap
    assert released(math.floor(0.95 * multiple * users), released_ppl, public_ppl)["verdict"] == "cannot tell"
    assert released(math.ceil(1.05 * multiple * users), released_ppl, public_ppl)["verdict"] == better
    # the card's sentence, rounded up, follows the verdict line in the same paragraph
    lines = verdict_lines(verdict)
    assert lines[0] == verdict_line(verdict) and "the data cannot tell" in lines[0]
    assert lines[1].startswith(f"The verdict would need about {math.ceil(multiple)}× as many users as")
    assert lines[2] == ""


def cannot_tell(estimate: float, low: float, high: float) -> dict:
    """A released verdict that cannot tell, with log-ratio estimate ``estimate`` in [low, high]."""
    return {
        "released_perplexity": 90.0 * math.exp(estimate),
        "public_only_perplexity": 90.0,
        "interval": {"level": 0.95, "released_perplexity": [70.0, 120.0], "log_ratio": [low, high]},
        "log_ratio": estimate,
        "verdict": "cannot tell",
        "epsilon": 2.38,
        "loss_clip_nats": 12.0,
    }


@pytest.mark.parametrize(
    ("estimate", "low", "high", "shown"),
    [
        (-0.05, -0.4, 0.28, "7"),  # near side 0.33 against 0.05: 6.6, rounded up
        (0.05, -0.28, 0.4, "7"),  # the released model worse: the near side is the lower end
        (-0.1, -0.3, 0.023, "1.3"),  # just short of telling: one decimal below 2×
        (-0.2, -0.5, 0.09, "1.5"),
    ],
)
def test_the_multiple_uses_the_half_width_on_the_side_of_zero(estimate, low, high, shown):
    line = users_needed_line(cannot_tell(estimate, low, high))
    assert line is not None and f"about {shown}× as many users as this dataset" in line
    assert "stays the size estimated here" in line  # the assumption is stated


@pytest.mark.parametrize("estimate", [0.0, 0.2 / 150, -0.2 / 150])
def test_an_estimate_of_about_zero_gives_no_multiple(estimate):
    verdict = cannot_tell(estimate, -0.2 + estimate, 0.2 + estimate)
    assert users_multiple(verdict) is None
    line = users_needed_line(verdict)
    assert line is not None and "cannot be estimated from this run" in line and "×" not in line
    assert line in verdict_lines(verdict)


def test_just_inside_the_cap_still_gives_a_multiple():
    estimate = -0.2 / (MAX_USERS_MULTIPLE - 10)
    assert users_multiple(cannot_tell(estimate, -0.4, 0.2 + estimate)) == pytest.approx(
        MAX_USERS_MULTIPLE - 10
    )


@pytest.mark.parametrize("said", ["released model better", "public-only model better"])
def test_a_verdict_that_tells_gives_no_multiple(said):
    verdict = {**cannot_tell(-0.3, -0.5, -0.1), "verdict": said}
    assert users_multiple(verdict) is None and users_needed_line(verdict) is None
    assert not [line for line in verdict_lines(verdict) if "as many users" in line]


def test_no_estimate_or_no_verdict_gives_no_sentence():
    none = {**cannot_tell(-0.05, -2.0, 2.0), "released_perplexity": None, "log_ratio": None}
    assert users_needed_line(none) is None and users_needed_line(None) is None
    assert "too few held-out users" in verdict_lines(none)[0]


@pytest.mark.parametrize(
    ("users", "released_ppl", "public_ppl"), [(500, 88.0, 92.0), (5000, 88.0, 92.0), (5000, 92.0, 88.0)]
)
def test_the_line_shows_the_interval_the_verdict_is_decided_on(noiseless, users, released_ppl, public_ppl):
    """The ratio interval printed on the verdict line excludes 1 exactly when the verdict tells, and
    on the side it names: a reader can check the verdict from the line alone."""
    import re

    verdict = released(users, released_ppl, public_ppl)
    line = verdict_line(verdict)
    found = re.search(r"a ratio of (\d+\.\d+) \((\d+\.\d+)–(\d+\.\d+), 95%\)", line)
    assert found is not None, line
    ratio, low, high = (float(v) for v in found.groups())
    assert ratio == pytest.approx(released_ppl / public_ppl, abs=0.006)  # printed to 2 decimals
    if verdict["verdict"] == "cannot tell":
        assert low < 1.0 < high
    elif verdict["verdict"] == "released model better":
        assert high < 1.0
    else:
        assert low > 1.0
    if users == 5000:  # ten times the first case's users: the interval narrows enough to tell
        assert verdict["verdict"] != "cannot tell"
