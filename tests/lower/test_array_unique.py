"""``schedsim.arrays.unique``: what ``np.unique(key, return_index=True, return_inverse=True)`` gives, value for value
and dtype for dtype, on both of its paths (keys in a small range by a table, others by a stable sort)."""

from __future__ import annotations

import numpy as np
import pytest

from schedsim.arrays import first_table, repeats, unique


def _cases() -> list[np.ndarray]:
    rng = np.random.default_rng(38)
    out = [np.array([3, 1, 3, 0, 1], np.int64), np.array([0], np.int64), np.array([7, 7, 7], np.int32),
           np.array([5, -1, 5, -1, 2], np.int64),  # a negative key: the sort
           np.array([2**40, 3, 2**40], np.int64),  # a key past 4n + 64: the sort
           np.array([], np.int64), np.array([4, 0, 4], np.uint16), np.array([1.5, 0.5, 1.5])]
    for n, hi in ((1, 1), (50, 3), (1000, 4064), (1000, 5000), (20_000, 100), (20_000, 10**9)):
        out.append(rng.integers(0, hi, n).astype(np.int64))
        out.append(np.sort(rng.integers(0, hi, n)).astype(np.int32))
    return out


@pytest.mark.parametrize("key", _cases(), ids=lambda k: f"{k.dtype}-{len(k)}")
def test_unique_is_numpys(key: np.ndarray) -> None:
    want = np.unique(key, return_index=True, return_inverse=True)
    got = unique(key)
    for w, g in zip(want, got, strict=True):
        assert g.tolist() == w.reshape(-1).tolist()
    assert got[0].dtype == key.dtype and got[1].dtype == np.int64 and got[2].dtype == np.int64


def test_small_keys_take_the_table() -> None:
    key = np.array([9, 2, 9, 4], np.int64)
    assert first_table(key).tolist() == [4, 4, 1, 4, 3, 4, 4, 4, 4, 0]
    u, f, inv = unique(key)
    assert (u.tolist(), f.tolist(), inv.tolist()) == ([2, 4, 9], [1, 3, 0], [2, 0, 2, 1])
    assert first_table(np.array([5, 10**6], np.int64)) is None  # past 4n + 64


@pytest.mark.parametrize("key", [k for k in _cases() if k.dtype.kind in "iu" and (not len(k) or k.min() >= 0)],
                         ids=lambda k: f"{k.dtype}-{len(k)}")
def test_repeats_is_a_shorter_unique(key: np.ndarray) -> None:
    """``repeats`` (issue 38: the (name, rank) and (flow, link) checks) is "fewer distinct values than keys", by
    its table (a space near the keys') and by its sort (a space far larger), and leaves ``key`` as it was."""
    before = key.copy()
    want = len(np.unique(key)) < len(key)
    hi = int(key.max()) + 1 if len(key) else 1
    assert repeats(key, hi) is want
    assert repeats(key, 10 * hi + 4 * len(key) + 65536) is want  # past the table's bound: the sort
    assert key.tolist() == before.tolist()


def test_repeats_by_hand() -> None:
    """A value twice at the two ends, or not at all; one key or none never repeats."""
    assert repeats(np.array([5, 1, 2, 5], np.int64), 6) is True
    assert repeats(np.array([5, 1, 2, 0], np.int64), 6) is False
    assert repeats(np.array([2**40, 3, 2**40], np.int64), 2**41) is True
    assert repeats(np.array([7], np.int64), 8) is False and repeats(np.array([], np.int64), 1) is False
