"""Inline custom actions read as columns (:func:`schedsim.lower.pipeline_plan._order_cols`): the fast reading of
single-spaced rows gives the same steps, counts and texts as splitting on white space, or declines alike."""

from __future__ import annotations

import numpy as np
import pytest

from schedsim.lower.pipeline_plan import _order_cols

ROWS = [
    "0F0 _ 0B0", "0F0 0B0", " 0F0  0B0 ", "0F0\t0B0", "_ _", ". 0F0 .", "", "0F0,0B0", "0F0, _, 0B0",
    "0F0 __ 0B0", "0F0 _0 0B0", "0F0 0B0_", "0F0 ._ 0B0", "10F11 _ 10B11 .", "0F0 \u00a00B0",
]


@pytest.mark.parametrize("row", ROWS)
def test_fast_rows_read_as_split_rows(row: str) -> None:
    """Each row against the same row re-spaced (split and joined with single spaces, taking the other path
    when the row is already single-spaced: a leading space sends it there)."""
    fast = _order_cols({0: row, 1: "1F0"}, 2)
    toks = row.replace(",", " ").split()
    slow = _order_cols({0: "  " + "  ".join(toks) + "  " if toks else " ", 1: "1F0"}, 2)
    if slow is None:
        assert fast is None
        return
    assert fast is not None
    assert fast.counts == slow.counts == [len(toks), 1]
    assert fast.texts == slow.texts == {0: [t for t in toks if t not in ("_", ".")], 1: ["1F0"]}
    for a, b in ((fast.typ, slow.typ), (fast.stage, slow.stage), (fast.mb, slow.mb), (fast.rank, slow.rank)):
        assert np.array_equal(a, b)


def test_idle_steps_counted() -> None:
    c = _order_cols({0: "0F0 _ 0B0 .", 1: "_ 1F0 1B0"}, 2)
    assert c is not None and c.counts == [4, 3] and c.typ.tolist() == [0, -1, 2, -1, -1, 0, 2]
    assert c.texts == {0: ["0F0", "0B0"], 1: ["1F0", "1B0"]}
