"""The public-model cache (dpngram.lm.public_cache): cached raw counts mapped to a vocabulary equal
counting with that mapping; a cached P equals a freshly fitted one and the Kneser-Ney fit over the
whole V_LM; hits skip the work (also for another DP vocabulary that keeps the same public words),
a changed corpus misses, old entries are pruned, and an unusable cache directory changes nothing."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dpngram.lm import open_model, public_cache
from dpngram.lm.kneser_ney import kneser_ney
from dpngram.lm.ngram_tables import BOS, EOS, UNK, ArpaModel


def _corpus(path: Path, seed: int, lines: int = 400) -> Path:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(60)]
    text = [" ".join(rng.choices(words, k=rng.randint(1, 12))) + " ." for _ in range(lines)]
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def _as_dict(frame: pl.DataFrame) -> dict[str, float]:
    return dict(zip(frame["ngram"].to_list(), frame["count"].to_list(), strict=True))


def _padded_counts(sentences: list[list[str]], n: int, vocabulary: set[str] | None) -> Counter:
    """Reference counts: one <s> and one </s> per sentence, <s> never a unigram."""
    out: Counter = Counter()
    for sentence in sentences:
        mapped = [t if vocabulary is None or t in vocabulary else UNK for t in sentence]
        padded = [BOS, *mapped, EOS]
        for i in range(len(padded) - n + 1):
            if not (n == 1 and padded[i] == BOS):
                out[" ".join(padded[i : i + n])] += 1
    return out


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("mapped", [False, True])
def test_counts_of_every_order_equal_counting_each_order(order, mapped):
    """Orders 2 and 3 count only the top order and take the lower ones as its marginals: equal to
    counting every order, one-token sentences included; order 4 counts each order (a one-token
    sentence has no 4-gram)."""
    rng = random.Random(order)
    words = [f"w{i}" for i in range(25)]
    sentences = [rng.choices(words, k=rng.choice([1, 1, 2, 3, 7])) for _ in range(500)]
    vocabulary = set(words[:12]) if mapped else None
    got = open_model.batch_ngram_counts(iter([pl.Series("toks", sentences)]), order, vocabulary)
    assert sorted(got) == list(range(1, order + 1))
    for n in range(1, order + 1):
        assert _as_dict(got[n]) == dict(_padded_counts(sentences, n, vocabulary)), n
        assert got[n].schema == {"ngram": pl.String, "count": pl.Float64}


@pytest.mark.parametrize("every_word", [False, True])
@pytest.mark.parametrize("part", ["all", "train", "heldout"])
def test_mapped_raw_counts_equal_counting_with_the_vocabulary(tmp_path, part, every_word):
    """Also when the vocabulary holds every public word (nothing maps: the raw counts come back)."""
    corpus = _corpus(tmp_path / "public.txt", 3)
    rng = random.Random(5)
    words = [f"w{i}" for i in range(60)] + ["."]
    vocabulary = set(words if every_word else rng.sample(words[:60], 20)) | {"absent-word"}
    direct = open_model.public_counts(corpus, 3, vocabulary, True, part)
    raw = open_model.raw_public_counts(corpus, 3, True, part)
    mapped = public_cache.map_to_vocabulary(raw, vocabulary)
    for n in (1, 2, 3):
        assert _as_dict(mapped[n]) == _as_dict(direct[n]), (part, n)
    # the shortcut is taken exactly when the vocabulary holds every word of the raw counts
    assert (set(raw[1]["ngram"].to_list()) - {BOS, EOS, UNK} <= vocabulary) == every_word


def test_whole_corpus_counts_through_the_cache_are_the_train_part_plus_the_held_out(tmp_path, monkeypatch):
    """With a cache, the whole corpus's counts are the train part's (cached: every run fits P on
    it) plus the held-out sentences': equal to counting every sentence, and the train sentences
    are not read again."""
    corpus = _corpus(tmp_path / "public.txt", 4, lines=3 * open_model.HELDOUT_EVERY + 7)
    direct = open_model.raw_public_counts(corpus, 3, True, "all")  # no cache: counted directly
    held = open_model.raw_public_counts(corpus, 3, True, "heldout")
    assert held[1].height > 0  # the corpus has held-out sentences, so the sum is a real one
    cache = tmp_path / "cache"
    open_model.raw_public_counts(corpus, 3, True, "train", cache)
    parts_read = []
    reader = open_model.public_sentence_batches

    def batches(path, lowercase=True, part="train"):
        parts_read.append(part)
        return reader(path, lowercase, part)

    monkeypatch.setattr(open_model, "public_sentence_batches", batches)
    via_cache = open_model.raw_public_counts(corpus, 3, True, "all", cache)
    assert parts_read == ["heldout"]
    for n in (1, 2, 3):
        assert _as_dict(via_cache[n]) == _as_dict(direct[n]), n
        assert via_cache[n].schema == direct[n].schema
    assert len(list((cache / "counts").iterdir())) == 2  # the train part's entry and the whole corpus's


def test_cache_entries_of_one_held_out_rate_are_not_read_for_another(tmp_path, monkeypatch):
    """The train part depends on the held-out rate: an entry stored under one rate is not read
    under another (the key names the split)."""
    corpus = _corpus(tmp_path / "public.txt", 4, lines=250)
    cache = tmp_path / "cache"
    first = open_model.raw_public_counts(corpus, 3, True, "train", cache)
    monkeypatch.setattr(open_model, "HELDOUT_EVERY", 7)
    other = open_model.raw_public_counts(corpus, 3, True, "train", cache)
    assert other[1]["count"].sum() != first[1]["count"].sum()
    assert _as_dict(other[3]) == _as_dict(open_model.raw_public_counts(corpus, 3, True, "train")[3])
    assert len(list((cache / "counts").iterdir())) == 2


def test_literal_marker_tokens_read_as_unk_as_in_direct_counting(monkeypatch):
    """The tokenizer never emits a marker, but a token spelled like one must not pass for padding:
    raw counting reads it as <unk>, as counting with any vocabulary (which excludes markers) does."""
    sentences = [["a", BOS, "b"], [EOS, "a"], ["b", UNK, EOS, "a"], ["a"]]

    def batches(path, lowercase, part):
        yield pl.Series("toks", sentences, dtype=pl.List(pl.String))

    monkeypatch.setattr(open_model, "public_sentence_batches", batches)
    vocabulary = {"a", "b"}
    raw = open_model.raw_public_counts("unused", 3)
    mapped = public_cache.map_to_vocabulary(raw, vocabulary)
    direct = open_model.batch_ngram_counts(iter([pl.Series("toks", sentences)]), 3, vocabulary)
    for n in (1, 2, 3):
        assert _as_dict(mapped[n]) == _as_dict(direct[n]), n
    assert _as_dict(raw[3])[f"{BOS} a {UNK}"] == 1.0  # the literal <s> in sentence 1


def _same_model(a, b) -> bool:
    """The same n-grams at every order with values within 1e-12: polars sums floats in parallel,
    so two fits of the same counts may differ in the last bits (never more)."""
    if sorted(a.tables) != sorted(b.tables):
        return False
    for n in a.tables:
        x, y = a.tables[n].sort("ngram"), b.tables[n].sort("ngram")
        if x["ngram"].to_list() != y["ngram"].to_list():
            return False
        for col in ("logprob", "backoff"):
            u, v = x[col].fill_null(0.0).to_numpy(), y[col].fill_null(0.0).to_numpy()
            if (x[col].is_null() != y[col].is_null()).any() or not np.allclose(u, v, rtol=0, atol=1e-12):
                return False
    return True


def test_cached_frequent_ngrams_equal_fresh_ones_and_follow_the_vocabulary(tmp_path, monkeypatch):
    """The counting domain's public n-grams are cached per (P's key, cap): a hit picks nothing
    again, and a run whose V_LM keeps other public words, or another cap, gets its own picks."""
    corpus = _corpus(tmp_path / "public.txt", 7)
    cache = tmp_path / "cache"
    dp = ["w1", "w2", "w3", "private-only"]

    def frequent(dp_words, cap, cache_dir):
        vocabulary, model, picks, _ = open_model.public_model_and_frequent(
            dp_words, str(corpus), order=3, public_cap=30, frequent_cap=cap, cache_dir=cache_dir
        )
        _, counts, _ = open_model.open_public_model(dp_words, str(corpus), order=3, public_cap=30)
        want = {n: set(open_model.most_frequent(counts[n], cap)["ngram"]) for n in (2, 3)}
        return {n: set(picks[n]["ngram"]) for n in (2, 3)}, want

    got, want = frequent(dp, 5, None)
    assert got == want and all(len(v) == 5 for v in got.values())
    assert frequent(dp, 5, cache) == (want, want)
    assert len(list((cache / "frequent").iterdir())) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("picked again although cached")

    with monkeypatch.context() as m:
        m.setattr(open_model, "most_frequent", refuse)
        _, _, again, _ = open_model.public_model_and_frequent(
            dp, str(corpus), order=3, public_cap=30, frequent_cap=5, cache_dir=cache
        )
    assert {n: set(again[n]["ngram"]) for n in (2, 3)} == want
    wider_cap, want_cap = frequent(dp, 9, cache)  # another cap: another entry
    assert wider_cap == want_cap != want
    # a DP vocabulary that keeps other public words under the cap: other counts, another entry
    other, other_want = frequent([*dp, *(f"w{i}" for i in range(40, 60))], 5, cache)
    assert other == other_want
    assert len(list((cache / "frequent").iterdir())) == 3


def test_cached_public_model_equals_a_fresh_one_and_hits_skip_the_work(tmp_path, monkeypatch):
    corpus = _corpus(tmp_path / "public.txt", 7)
    cache = tmp_path / "cache"
    dp = ["w1", "w2", "w3", "private-only"]
    fresh = open_model.open_public_model(dp, str(corpus), order=3, public_cap=30)
    first = open_model.open_public_model(dp, str(corpus), order=3, public_cap=30, cache_dir=cache)
    assert first[0] == fresh[0]
    assert _same_model(first[2], fresh[2])
    for n in (1, 2, 3):
        assert _as_dict(first[1][n]) == _as_dict(fresh[1][n])
    assert len(list((cache / "counts").iterdir())) == 1 and len(list((cache / "models").iterdir())) == 1

    # P is the Kneser-Ney fit over all of V_LM, though its cached terms were fitted over the public
    # words alone and completed with "private-only" (a DP word the corpus lacks)
    assert "private-only" in first[0]
    assert _same_model(first[2], kneser_ney(first[1][3], 3, first[0]))

    def refuse(*args, **kwargs):
        raise AssertionError("recomputed although cached")

    with monkeypatch.context() as m:  # a second use of the same corpus and vocabulary: no work
        m.setattr(open_model, "batch_ngram_counts", refuse)
        m.setattr(open_model, "kneser_ney_terms", refuse)
        again = open_model.open_public_model(dp, str(corpus), order=3, public_cap=30, cache_dir=cache)
        assert _same_model(again[2], fresh[2])
        # another run whose DP vocabulary differs only in words the corpus lacks: no fit either
        other_dp = ["w1", "w2", "w3", "another-private", "and-one-more"]
        other = open_model.open_public_model(other_dp, str(corpus), order=3, public_cap=30, cache_dir=cache)
    assert _same_model(other[2], kneser_ney(other[1][3], 3, other[0]))
    assert len(list((cache / "models").iterdir())) == 1
    # a DP vocabulary that keeps one more public word (beyond the cap): P is fitted again
    beyond = next(f"w{i}" for i in range(60) if f"w{i}" not in first[0])
    wider = open_model.open_public_model([*dp, beyond], str(corpus), order=3, public_cap=30, cache_dir=cache)
    assert beyond in wider[0] and _same_model(wider[2], kneser_ney(wider[1][3], 3, wider[0]))
    assert len(list((cache / "models").iterdir())) == 2

    # the same path with other content: another digest, so a miss (never a stale model)
    _corpus(corpus, 8)
    changed = open_model.open_public_model(dp, str(corpus), order=3, public_cap=30, cache_dir=cache)
    assert _same_model(changed[2], open_model.open_public_model(dp, str(corpus), order=3, public_cap=30)[2])
    assert not _same_model(changed[2], fresh[2])
    assert len(list((cache / "counts").iterdir())) == 2


def test_old_entries_are_pruned_to_the_keep_limit(tmp_path, monkeypatch):
    corpus = _corpus(tmp_path / "public.txt", 9)
    cache = tmp_path / "cache"
    monkeypatch.setitem(public_cache.KEEP, "models", 2)
    for i in range(4):
        open_model.open_public_model([f"w{i}", f"x{i}"], str(corpus), order=2, public_cap=5, cache_dir=cache)
    assert len(list((cache / "models").iterdir())) == 2
    assert not [p for p in (cache / "models").iterdir() if p.name.startswith(".")]  # no temporaries


def test_a_damaged_entry_is_recomputed_and_replaced(tmp_path):
    """An entry whose file cannot be read (cut short here) is computed again and replaced, so the
    next call reads it instead of computing it every time."""
    frame = pl.DataFrame({"ngram": ["a", "b"], "count": [1.0, 2.0]})
    calls = []

    def compute():
        calls.append(1)
        return {1: frame}

    assert public_cache.cached_tables(tmp_path, "counts", "k", compute)[1].equals(frame)
    part = tmp_path / "counts" / "k" / "order1.parquet"
    part.write_bytes(part.read_bytes()[:20])
    assert public_cache.cached_tables(tmp_path, "counts", "k", compute)[1].equals(frame)
    assert public_cache.cached_tables(tmp_path, "counts", "k", compute)[1].equals(frame)
    assert len(calls) == 2  # computed first, then once more for the damaged entry, then read


def test_an_unusable_cache_directory_changes_nothing(tmp_path):
    corpus = _corpus(tmp_path / "public.txt", 4)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory should be", encoding="utf-8")
    got = open_model.open_public_model(["w1"], str(corpus), order=2, public_cap=10, cache_dir=blocker / "c")
    fresh = open_model.open_public_model(["w1"], str(corpus), order=2, public_cap=10)
    assert got[0] == fresh[0] and _same_model(got[2], fresh[2])


def test_word_ranking_from_raw_unigrams_matches_the_word_counts(tmp_path):
    """V_LM is chosen from the cached raw unigrams: the same words, with the same counts, as
    public_word_counts (markers aside), so the vocabulary rule is unchanged."""
    corpus = _corpus(tmp_path / "public.txt", 12)
    raw = open_model.raw_public_counts(corpus, 1)
    words = {w: c for w, c in _as_dict(raw[1]).items() if w not in (BOS, EOS, UNK)}
    assert words == dict(Counter(open_model.public_word_counts(corpus)))


def _same_structure(a, b) -> bool:
    return sorted(a) == sorted(b) and all(
        (getattr(a[n], f) == getattr(b[n], f)).all() for n in a for f in ("context", "suffix", "word")
    )


def test_cached_structure_equals_the_one_derived_from_the_strings(tmp_path, monkeypatch):
    """P carries the structure stored beside its terms, its DP-only unigram rows renumbered: the
    same row links as deriving them from P's strings, cold and warm, for another DP vocabulary
    too; without a cache P derives them when first needed."""
    corpus = _corpus(tmp_path / "public.txt", 7)
    cache = tmp_path / "cache"
    plain = open_model.open_public_model(["w1", "private-only"], str(corpus), order=3, public_cap=30)[2]
    assert plain.derived_structure() is None
    for dp in (["w1", "w2", "private-only"], ["w1", "w2", "another", "zz-last", "0-first"]):
        cold = open_model.open_public_model(dp, str(corpus), order=3, public_cap=30, cache_dir=cache)[2]
        with monkeypatch.context() as m:
            m.setattr(open_model, "terms_structure", _refuse)
            warm = open_model.open_public_model(dp, str(corpus), order=3, public_cap=30, cache_dir=cache)[2]
        for model in (cold, warm):
            assert model.derived_structure() is not None
            derived = ArpaModel(dict(model.tables)).structure()
            assert _same_structure(model.derived_structure(), derived)
    assert len(list((cache / "structure").iterdir())) == 1


def _refuse(*args, **kwargs):
    raise AssertionError("recomputed although cached")


def test_heldout_text_is_cached_per_corpus_and_equals_a_fresh_one(tmp_path, monkeypatch):
    """The model card's held-out public sentences (dpngram.lm.build.heldout_text) come from the cache
    after a corpus's first run, identical to writing them afresh; a changed corpus misses; an
    unusable cache directory falls back to the work directory."""
    from dpngram.config import RunConfig
    from dpngram.lm.build import heldout_text

    corpus = _corpus(tmp_path / "public.txt", 11, lines=200)
    config = RunConfig(
        dataset="d", input=str(corpus), out=str(tmp_path / "out"), public=str(corpus),
        warehouse=str(tmp_path / "wh" / "w.duckdb"),
    )  # fmt: skip
    fresh = tmp_path / "fresh.txt"
    assert open_model.write_heldout_text(str(corpus), fresh) == 200 // open_model.HELDOUT_EVERY
    work = tmp_path / "work"
    work.mkdir()
    first = heldout_text(config, work)
    assert first is not None and first.read_text(encoding="utf-8") == fresh.read_text(encoding="utf-8")
    assert first.is_relative_to(tmp_path / "wh" / "w.duckdb" / "cache" / "public" / "heldout")

    def refuse(*args, **kwargs):
        raise AssertionError("written again although cached")

    with monkeypatch.context() as m:
        m.setattr(open_model, "write_heldout_text", refuse)
        assert heldout_text(config, work) == first
    _corpus(corpus, 12, lines=200)  # same path, other content: a new entry
    changed = heldout_text(config, work)
    assert changed != first and changed.read_text(encoding="utf-8") != fresh.read_text(encoding="utf-8")
    assert len(list((tmp_path / "wh" / "w.duckdb" / "cache" / "public" / "heldout").iterdir())) == 2

    (tmp_path / "blocked").write_text("a file where the warehouse directory should be", encoding="utf-8")
    blocked = config.model_copy(update={"warehouse": str(tmp_path / "blocked" / "w.duckdb")})
    fallback = heldout_text(blocked, work)
    assert fallback == work / "heldout.txt"
    assert fallback.read_text(encoding="utf-8") == changed.read_text(encoding="utf-8")

    few = _corpus(tmp_path / "few.txt", 13, lines=open_model.HELDOUT_EVERY - 1)  # no held-out sentence
    assert heldout_text(config.model_copy(update={"public": str(few)}), work) is None


def test_vocabulary_digest_is_of_the_sorted_set_nul_terminated():
    """The key of a cached P: SHA-256 of the distinct words, sorted, each followed by a NUL byte
    (the cache entries of earlier versions keep their keys)."""
    import hashlib

    want = hashlib.sha256("Z\0a\0é\0日\0".encode()).hexdigest()
    assert public_cache.vocabulary_digest(["日", "a", "é", "Z", "a"]) == want
    assert public_cache.vocabulary_digest([]) == hashlib.sha256(b"").hexdigest()


def test_a_tokenizer_change_does_not_reuse_cached_public_tokens(monkeypatch) -> None:
    """Cache entries hold the public corpus's tokens: a new tokenizer version gives every entry a
    new key, so a warehouse warmed before an upgrade is not read with the old tokens."""
    from dpngram.lm import public_cache
    from dpngram.text import tokenizer

    before = public_cache.entry_key("digest", "part", 3)
    assert public_cache.entry_key("digest", "part", 3) == before  # a key is stable
    monkeypatch.setattr(tokenizer, "TOKENIZER_VERSION", tokenizer.TOKENIZER_VERSION + 1)
    assert public_cache.entry_key("digest", "part", 3) != before


# -- the shared copy (a deployment's run store) --------------------------------------------------
def test_the_shared_copy_reads_the_run_stores_variable():
    from dpngram.release.run_store import RUN_STORE_ENV

    assert public_cache.RUN_STORE_ENV == RUN_STORE_ENV


@pytest.fixture
def shared(tmp_path, monkeypatch) -> Path:
    """A run store on a local path (fsspec treats it as it treats s3://; tests/test_object_storage.py
    runs the same code against S3); returns the shared copy's folder."""
    store = tmp_path / "run-store"
    monkeypatch.setenv(public_cache.RUN_STORE_ENV, f"file://{store}")
    return store / "_cache" / "public"


def _counting(frame: pl.DataFrame, calls: list[str], worker: str):
    def compute():
        calls.append(worker)
        return {1: frame, 2: frame.with_columns(pl.col("count") * 2)}

    return compute


def test_a_worker_reads_what_another_computed_from_the_shared_copy(tmp_path, shared):
    frame = pl.DataFrame({"ngram": ["a", "b"], "count": [1.0, 2.0]})
    calls: list[str] = []
    first = public_cache.cached_tables(tmp_path / "a", "models", "k", _counting(frame, calls, "a"))
    assert sorted(p.name for p in (shared / "models" / "k").iterdir()) == [
        "meta.json",
        "order1.parquet",
        "order2.parquet",
    ]
    got = public_cache.cached_tables(tmp_path / "b", "models", "k", _counting(frame, calls, "b"))
    assert calls == ["a"]  # worker b downloaded instead of computing
    assert set(got) == {1, 2} and all(got[n].equals(first[n]) for n in got)
    assert (tmp_path / "b" / "models" / "k" / "meta.json").is_file()  # now in b's own cache too
    # a file entry travels the same way
    written: list[str] = []

    def write(path: Path) -> None:
        written.append(path.parent.parent.parent.name)
        path.write_text("held-out sentences\n", encoding="utf-8")

    a_file = public_cache.cached_file(tmp_path / "a", "heldout", "h", "heldout.txt", write)
    b_file = public_cache.cached_file(tmp_path / "b", "heldout", "h", "heldout.txt", write)
    assert written == ["a"] and b_file is not None and a_file is not None
    assert b_file.read_text(encoding="utf-8") == a_file.read_text(encoding="utf-8")
    assert b_file.is_relative_to(tmp_path / "b")


def test_a_runs_released_mixture_is_not_shared(tmp_path, shared):
    frame = pl.DataFrame({"ngram": ["a"], "count": [1.0]})
    calls: list[str] = []
    public_cache.cached_tables(tmp_path / "a", "mixtures", "m", _counting(frame, calls, "a"))
    public_cache.cached_tables(tmp_path / "b", "mixtures", "m", _counting(frame, calls, "b"))
    assert calls == ["a", "b"]
    assert not (shared / "mixtures").exists()


def test_an_entry_without_its_meta_file_is_missing_and_gets_completed(tmp_path, shared):
    """A worker killed while uploading leaves tables without meta.json (uploaded last): others
    compute the entry and complete the shared copy."""
    frame = pl.DataFrame({"ngram": ["a"], "count": [3.0]})
    calls: list[str] = []
    public_cache.cached_tables(tmp_path / "a", "counts", "c", _counting(frame, calls, "a"))
    (shared / "counts" / "c" / "meta.json").unlink()
    got = public_cache.cached_tables(tmp_path / "b", "counts", "c", _counting(frame, calls, "b"))
    assert calls == ["a", "b"] and got[1].equals(frame)
    assert (shared / "counts" / "c" / "meta.json").is_file()
    public_cache.cached_tables(tmp_path / "c", "counts", "c", _counting(frame, calls, "c"))
    assert calls == ["a", "b"]


def test_a_damaged_shared_entry_is_computed_and_replaced(tmp_path, shared):
    frame = pl.DataFrame({"ngram": ["a", "b"], "count": [1.0, 2.0]})
    calls: list[str] = []
    public_cache.cached_tables(tmp_path / "a", "structure", "s", _counting(frame, calls, "a"))
    part = shared / "structure" / "s" / "order1.parquet"
    part.write_bytes(part.read_bytes()[:20])
    got = public_cache.cached_tables(tmp_path / "b", "structure", "s", _counting(frame, calls, "b"))
    assert calls == ["a", "b"] and got[1].equals(frame)
    assert pl.read_parquet(part).equals(frame)  # the shared copy is whole again


def test_an_unreachable_shared_copy_changes_nothing(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the run store should be", encoding="utf-8")
    monkeypatch.setenv(public_cache.RUN_STORE_ENV, f"file://{blocker}/store")
    frame = pl.DataFrame({"ngram": ["a"], "count": [1.0]})
    calls: list[str] = []
    with caplog.at_level("WARNING", logger="dpngram.lm.public_cache"):
        got = public_cache.cached_tables(tmp_path / "a", "models", "k", _counting(frame, calls, "a"))
    assert calls == ["a"] and got[1].equals(frame)
    assert "could not add the models entry to the shared copy" in caplog.text
    assert (tmp_path / "a" / "models" / "k" / "meta.json").is_file()  # the local cache still works


def test_the_meta_file_is_uploaded_last(tmp_path, shared, monkeypatch):
    real = public_cache._filesystem
    uploaded: list[str] = []

    def recording(url: str):
        fs, path = real(url)  # fsspec hands out one cached instance: wrap its put_file once
        if not getattr(fs.put_file, "recording", False):
            put = fs.put_file

            def put_file(local, remote, **kwargs):
                uploaded.append(Path(remote).name)
                return put(local, remote, **kwargs)

            put_file.recording = True
            monkeypatch.setattr(fs, "put_file", put_file)
        return fs, path

    monkeypatch.setattr(public_cache, "_filesystem", recording)
    frame = pl.DataFrame({"ngram": ["a"], "count": [1.0]})
    public_cache.cached_tables(tmp_path / "a", "frequent", "f", _counting(frame, [], "a"))
    assert uploaded == ["order1.parquet", "order2.parquet", "meta.json"]


def _age(entry: Path, seconds_ago: float) -> None:
    """Date every file of a shared entry ``seconds_ago`` in the past."""
    import os
    import time

    stamp = time.time() - seconds_ago
    for file in entry.iterdir():
        os.utime(file, (stamp, stamp))


def test_the_shared_copy_keeps_its_most_recently_used_entries(tmp_path, shared, monkeypatch):
    """An upload prunes the kind's shared entries to SHARED_KEEP, least recently used first; a
    download marks its entry as used, so an old entry that workers still read is kept and the
    one nobody read is removed. The workers' own caches are not touched."""
    monkeypatch.setitem(public_cache.SHARED_KEEP, "counts", 2)
    frame = pl.DataFrame({"ngram": ["a"], "count": [1.0]})
    calls: list[str] = []
    kinds = shared / "counts"
    public_cache.cached_tables(tmp_path / "a", "counts", "old", _counting(frame, calls, "a"))
    public_cache.cached_tables(tmp_path / "a", "counts", "newer", _counting(frame, calls, "a"))
    _age(kinds / "old", 2000)
    _age(kinds / "newer", 1000)
    # worker b reads the old entry: now it is the most recently used
    public_cache.cached_tables(tmp_path / "b", "counts", "old", _counting(frame, calls, "b"))
    assert calls == ["a", "a"] and (kinds / "old" / public_cache.USED).is_file()
    # a third entry: the shared copy keeps two, and drops the one nobody read since
    public_cache.cached_tables(tmp_path / "c", "counts", "third", _counting(frame, calls, "c"))
    assert sorted(p.name for p in kinds.iterdir()) == ["old", "third"]
    assert sorted(p.name for p in (tmp_path / "a" / "counts").iterdir()) == ["newer", "old"]
    # a worker that wants the removed entry computes it and shares it again
    public_cache.cached_tables(tmp_path / "d", "counts", "newer", _counting(frame, calls, "d"))
    assert calls == ["a", "a", "c", "d"] and (kinds / "newer" / public_cache.META).is_file()
    assert len(list(kinds.iterdir())) == 2


def test_pruning_never_removes_more_than_the_kinds_surplus(tmp_path, shared):
    """Every kind keeps twice a worker's own count in the shared copy, and the prune only removes
    entries of the kind just uploaded."""
    frame = pl.DataFrame({"ngram": ["a"], "count": [1.0]})
    calls: list[str] = []
    assert public_cache.SHARED_KEEP == {k: 2 * public_cache.KEEP[k] for k in public_cache.SHARED_KINDS}
    keep = public_cache.SHARED_KEEP["counts"]
    for i in range(keep + 3):
        public_cache.cached_tables(tmp_path / "a", "counts", f"c{i:02d}", _counting(frame, calls, "a"))
        _age(shared / "counts" / f"c{i:02d}", 1000 - i)
    public_cache.cached_tables(tmp_path / "a", "models", "m", _counting(frame, calls, "a"))
    kept = sorted(p.name for p in (shared / "counts").iterdir())
    assert kept == [f"c{i:02d}" for i in range(3, keep + 3)]
    assert [p.name for p in (shared / "models").iterdir()] == ["m"]
