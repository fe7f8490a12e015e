"""The rerun policy of tests/conftest.py, checked by running pytest on small test files with the
real conftest: a test that draws CSPRNG noise (marked ``statistical`` or using the ``secure_noise``
fixture) is re-run once on failure; a deterministic test never is, so a real failure is never
retried into a pass, and a statistical test that fails twice still fails."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")

# Each test fails on its first call and passes on its second (a file counts the calls).
FAILS_ONCE = """
import pytest
from pathlib import Path

def _call(name):
    counter = Path(name + ".calls")
    calls = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(calls))
    return calls

@pytest.mark.statistical
def test_marked():
    assert _call("marked") > 1

def test_uses_secure_noise(secure_noise):
    secure_noise.uniform(1)
    assert _call("fixture") > 1

def test_deterministic():
    assert _call("deterministic") > 1

@pytest.mark.statistical
def test_always_fails():
    assert _call("always") < 0
"""


def test_statistical_tests_and_only_they_are_rerun_once(pytester: pytest.Pytester) -> None:
    shutil.copy(CONFTEST, pytester.path / "conftest.py")
    pytester.makeini("[pytest]\nmarkers =\n    statistical: repeated-trial test\n")
    pytester.makepyfile(test_reruns=FAILS_ONCE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    outcomes = result.parseoutcomes()
    assert {k: outcomes.get(k) for k in ("passed", "failed", "rerun")} == {
        "passed": 2,
        "failed": 2,
        "rerun": 3,
    }
    result.stdout.fnmatch_lines(["*FAILED test_reruns.py::test_deterministic*"])
    result.stdout.fnmatch_lines(["*FAILED test_reruns.py::test_always_fails*"])
    calls = {
        name: int((pytester.path / f"{name}.calls").read_text())
        for name in ("marked", "fixture", "deterministic", "always")
    }
    assert calls == {"marked": 2, "fixture": 2, "deterministic": 1, "always": 2}
