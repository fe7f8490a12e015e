"""The run's token dictionary (dpngram.text.token_ids): dense ids, grown batch by batch."""

from __future__ import annotations

import polars as pl

from dpngram.text.token_ids import TokenDictionary


def lists(rows: list[list[str | None]]) -> pl.Series:
    return pl.Series(rows, dtype=pl.List(pl.String))


def test_new_tokens_get_the_next_ids_in_sorted_order_and_known_ones_keep_theirs():
    d = TokenDictionary()
    tids, new = d.encode(lists([["b", "a", "b"], ["c"]]))
    assert tids.to_list() == [[2, 1, 2], [3]]
    assert new.rows() == [("a", 1), ("b", 2), ("c", 3)]
    tids, new = d.encode(lists([["d", "a"], ["b", "e"]]))
    assert tids.to_list() == [[4, 1], [2, 5]]
    assert new.rows() == [("d", 4), ("e", 5)]
    tids, new = d.encode(lists([["e", "c"]]))  # nothing new: the cast alone
    assert tids.to_list() == [[5, 3]] and new.height == 0
    assert len(d) == 5


def test_a_missing_token_stays_missing():
    tids, new = TokenDictionary().encode(lists([["x", None], []]))
    assert tids.to_list() == [[1, None], []]
    assert new.rows() == [("x", 1)]
