"""KenLM tools built by `make setup` and the `kenlm` Python module agree.

* lm/kenlm_bin.py finds the tools in the documented order and fails with a clear message;
* lmplz -> ARPA -> build_binary -> kenlm.Model round trip: the binary loads, its scores equal the
  ARPA's, full_scores add up to score, perplexity is the documented function of the score;
* both sides were compiled with the same KENLM_MAX_ORDER: an order-6 model works in build_binary
  and kenlm.Model, an order-7 model is refused by both.
"""

from __future__ import annotations

import math
import os
import stat
import subprocess
from pathlib import Path

import kenlm
import pytest

from dpngram.lm.kenlm_bin import (
    KENLM_BIN_ENV,
    KENLM_MAX_ORDER,
    KENLM_TOOLS,
    kenlm_binary,
    kenlm_cache_bin_dir,
)


def _fake_tool(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# --------------------------------------------------------------------------- lookup order


@pytest.fixture
def isolated_lookup(tmp_path, monkeypatch):
    """No env dir, an empty cache, an empty PATH: nothing is found unless a test puts it there."""
    monkeypatch.delenv(KENLM_BIN_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    return tmp_path


def test_cache_dir_follows_xdg_cache_home(isolated_lookup):
    assert kenlm_cache_bin_dir() == isolated_lookup / "cache" / "dpngram" / "kenlm-0.3.0-order6" / "bin"


def test_cache_dir_defaults_to_home_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kenlm_cache_bin_dir() == tmp_path / ".cache" / "dpngram" / "kenlm-0.3.0-order6" / "bin"


def test_env_dir_wins_over_cache_and_path(isolated_lookup, monkeypatch):
    tmp = isolated_lookup
    from_env = _fake_tool(tmp / "env", "lmplz")
    _fake_tool(kenlm_cache_bin_dir(), "lmplz")
    _fake_tool(tmp / "path", "lmplz")
    monkeypatch.setenv(KENLM_BIN_ENV, str(tmp / "env"))
    assert kenlm_binary("lmplz") == from_env.resolve()


def test_cache_wins_over_path(isolated_lookup):
    in_cache = _fake_tool(kenlm_cache_bin_dir(), "build_binary")
    _fake_tool(isolated_lookup / "path", "build_binary")
    assert kenlm_binary("build_binary") == in_cache.resolve()


def test_path_is_the_last_resort(isolated_lookup, monkeypatch):
    monkeypatch.setenv(KENLM_BIN_ENV, str(isolated_lookup / "empty-env-dir"))
    on_path = _fake_tool(isolated_lookup / "path", "lmplz")
    assert kenlm_binary("lmplz") == on_path.resolve()


def test_non_executable_file_is_skipped(isolated_lookup):
    cache = kenlm_cache_bin_dir()
    cache.mkdir(parents=True)
    (cache / "lmplz").write_text("not executable")
    on_path = _fake_tool(isolated_lookup / "path", "lmplz")
    assert kenlm_binary("lmplz") == on_path.resolve()


def test_missing_tool_says_to_run_make_setup(isolated_lookup, monkeypatch):
    monkeypatch.setenv(KENLM_BIN_ENV, str(isolated_lookup / "nowhere"))
    with pytest.raises(FileNotFoundError) as excinfo:
        kenlm_binary("build_binary")
    message = str(excinfo.value)
    assert "make setup" in message
    assert "build_binary" in message
    assert str(isolated_lookup / "nowhere") in message
    assert "\n" not in message


def test_unknown_tool_name_is_refused(isolated_lookup):
    with pytest.raises(ValueError, match="name: must be one of lmplz, build_binary"):
        kenlm_binary("query")


# --------------------------------------------------------------------------- real binaries

# 400 sentences over a 20-word vocabulary: enough distinct 6- and 7-grams for lmplz, tiny to run.
_WORDS = ("the cat sat on a mat while dog ran far away from house and it was good red blue sky").split()


def _corpus(path: Path, sentences: int = 400) -> Path:
    n = len(_WORDS)
    lines = (" ".join(_WORDS[(i * j + j * j) % n] for j in range(1, 13)) for i in range(sentences))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _lmplz(corpus: Path, order: int, arpa: Path, tmp: Path) -> None:
    # -S is an absolute 64 MB (not a percentage of RAM: 10% of 24 GB is touched as 2.4 GB).
    with corpus.open("rb") as stdin, arpa.open("wb") as stdout:
        done = subprocess.run(
            [
                str(kenlm_binary("lmplz")),
                "-o",
                str(order),
                "-S",
                "64M",
                "-T",
                str(tmp),
                "--discount_fallback",
            ],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            check=False,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]


def _build_binary(arpa: Path, binary: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(kenlm_binary("build_binary")), str(arpa), str(binary)],
        capture_output=True,
        check=False,
        timeout=120,
    )


def _arpa_counts(arpa: Path) -> dict[int, int]:
    counts = {}
    with arpa.open(encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("ngram "):
                order, count = line[len("ngram ") :].split("=")
                counts[int(order)] = int(count)
            elif line.startswith("\\1-grams:"):
                break
    return counts


@pytest.fixture(scope="module")
def trigram_model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kenlm3")
    corpus = _corpus(tmp / "corpus.txt")
    arpa, binary = tmp / "model.arpa", tmp / "model.binary"
    _lmplz(corpus, 3, arpa, tmp)
    built = _build_binary(arpa, binary)
    assert built.returncode == 0, built.stderr.decode(errors="replace")[-2000:]
    return arpa, binary


def test_binaries_are_the_setup_build():
    for name in KENLM_TOOLS:
        path = kenlm_binary(name)
        assert os.access(path, os.X_OK), path


def test_lmplz_writes_a_trigram_arpa(trigram_model):
    arpa, _ = trigram_model
    counts = _arpa_counts(arpa)
    assert sorted(counts) == [1, 2, 3]
    # every corpus word plus <s>, </s>, <unk>
    assert counts[1] == len(set(_WORDS)) + 3


def test_binary_model_loads_and_scores_consistently(trigram_model):
    arpa, binary = trigram_model
    model = kenlm.Model(str(binary))
    from_arpa = kenlm.Model(str(arpa))
    assert model.order == 3
    sentences = ["the cat sat on a mat", "dog ran far away", "sky blue red good was it"]
    for sentence in sentences:
        total = model.score(sentence, bos=True, eos=True)
        parts = list(model.full_scores(sentence, bos=True, eos=True))
        assert len(parts) == len(sentence.split()) + 1  # one per word plus </s>
        # float32 log10 probabilities summed in float: agree to float32 rounding
        assert math.isclose(sum(p for p, _, _ in parts), total, rel_tol=1e-5, abs_tol=1e-4)
        assert all(p <= 0.0 for p, _, _ in parts)
        # kenlm's perplexity is 10 ** (-score / (words + 1)) with </s> counted as a word
        perplexity = model.perplexity(sentence)
        assert math.isfinite(perplexity) and perplexity >= 1.0
        assert math.isclose(perplexity, 10 ** (-total / (len(sentence.split()) + 1)), rel_tol=1e-5)
        # the binary is a lossless (probing, unquantised) copy of the ARPA
        assert math.isclose(from_arpa.score(sentence), total, rel_tol=1e-5, abs_tol=1e-4)


def test_binary_vocabulary_is_the_corpus_vocabulary(trigram_model):
    _, binary = trigram_model
    model = kenlm.Model(str(binary))
    assert all(word in model for word in _WORDS)
    assert "zebra" not in model


def test_binaries_and_python_module_share_max_order(tmp_path):
    """KENLM_MAX_ORDER is compiled into both sides: order N loads in both, N+1 in neither."""
    corpus = _corpus(tmp_path / "corpus.txt")
    top, over = KENLM_MAX_ORDER, KENLM_MAX_ORDER + 1
    arpa_top, arpa_over = tmp_path / f"o{top}.arpa", tmp_path / f"o{over}.arpa"
    _lmplz(corpus, top, arpa_top, tmp_path)
    _lmplz(corpus, over, arpa_over, tmp_path)
    assert sorted(_arpa_counts(arpa_over)) == list(range(1, over + 1))

    ok = _build_binary(arpa_top, tmp_path / f"o{top}.binary")
    assert ok.returncode == 0, ok.stderr.decode(errors="replace")[-2000:]
    assert kenlm.Model(str(tmp_path / f"o{top}.binary")).order == top

    refused = _build_binary(arpa_over, tmp_path / f"o{over}.binary")
    assert refused.returncode != 0
    assert b"max_order" in refused.stdout + refused.stderr
    with pytest.raises(OSError):
        kenlm.Model(str(arpa_over))
