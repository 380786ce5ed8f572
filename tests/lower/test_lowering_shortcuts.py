"""The lowering's array shortcuts against plain references: the grouping sort (``stable_order``), the first
member of each NCCL batch (``batch_heads``, with and without its no-sort path), the stream edges (one compiled
pass, against the op-by-op rule and the numpy form it replaced), and the canonical-notation test of custom
actions against its regular expression."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedsim.lower.link import _stream_edges
from schedsim.lower.pipeline_plan import _byte_tables, _canonical
from schedsim.lower.program import batch_heads, stable_order
from tests.oracle.numpy_helpers import stream_edges as numpy_edges


@pytest.mark.parametrize("space", [1, 7, 300, 70_000, 2**40])
def test_stable_order_is_the_stable_argsort(space):
    rng = np.random.default_rng(space)
    for n in (0, 1, 50, 3000):
        key = rng.integers(0, space, n) if n else np.zeros(0, np.int64)
        if n and space > 1000:  # few distinct values in a large space (the dense renumbering)
            key = rng.choice(rng.integers(0, space, 40), n)
        np.testing.assert_array_equal(stable_order(key, space), np.argsort(key, kind="stable"))


def _heads_by_hand(rank, batch, idx):
    first: dict[tuple[int, int], int] = {}
    out = []
    for r, b, i in zip(rank.tolist(), batch.tolist(), idx.tolist(), strict=True):
        out.append(i if b < 0 else first.setdefault((r, b), i))
    return np.array(out, np.int64)


@pytest.mark.parametrize("seed", range(40))
def test_batch_heads_is_the_first_member_of_each_batch_on_its_rank(seed):
    rng = random.Random(seed)
    rank, batch = [], []
    for r in range(rng.randint(1, 4)):
        b = 0
        for _ in range(rng.randint(0, 12)):
            if rng.random() < 0.3:
                rank.append(r)
                batch.append(-1)  # a lone op
                continue
            if seed % 2 or rng.random() < 0.6:  # even seeds: batch ids come back later (no run form)
                b += rng.randint(0, 1)
            else:
                b = rng.randint(0, 3)
            rank.append(r)
            batch.append(b)
    idx = np.array(sorted(rng.sample(range(200), len(rank))), np.int64)
    rk, bt = np.array(rank, np.int32), np.array(batch, np.int64)
    at, ascending = batch_heads(rk, bt, idx)
    want = _heads_by_hand(rk, bt, idx)
    np.testing.assert_array_equal(at, want)
    if ascending:  # the claim that lets the send/recv pairing skip its sort
        assert bool((np.diff(at) >= 0).all())


def _stream_edges_by_hand(rank, stream, batch, is_p2p):
    """The object-based build's rule (tests/oracle/object_build.py), op by op."""
    runs: dict[tuple[int, int], tuple[int | None, list[int], list[int]]] = {}
    edges = []
    for i, (r, s, b, p) in enumerate(zip(rank, stream, batch, is_p2p, strict=True)):
        bb = b if p and b >= 0 else None
        run = runs.get((r, s))
        if run is not None and bb is not None and run[0] == bb:
            edges += [(x, i) for x in run[1]]
            run[2].append(i)
        else:
            before = run[2] if run is not None else []
            edges += [(x, i) for x in before]
            runs[(r, s)] = (bb, before, [i])
    return np.array(edges, np.int64).reshape(-1, 2)


@pytest.mark.parametrize("seed", range(30))
def test_stream_edges_follow_the_object_build(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    rank = np.sort(rng.integers(0, 3, n)).astype(np.int32)
    stream = rng.integers(0, 4, n).astype(np.int32)
    is_p2p = rng.random(n) < 0.6
    batch = np.where(rng.random(n) < (0.0 if seed % 3 == 0 else 0.7), rng.integers(0, 3, n), -1).astype(np.int32)
    cols = SimpleNamespace(c={"rank": rank, "stream": stream, "batch": batch}, is_p2p=is_p2p, N=n,
                           table=SimpleNamespace(streams=SimpleNamespace(items=list(range(4)))))
    got = _stream_edges(cols)
    assert got.dtype == np.int64
    want = _stream_edges_by_hand(rank.tolist(), stream.tolist(), batch.tolist(), is_p2p.tolist())
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(numpy_edges(rank, stream, batch, is_p2p, 4), want)


@pytest.mark.parametrize("seed", range(12))
def test_stream_edges_of_unsorted_and_sparse_ranks(seed):
    """Ranks in any order (hand-written entries instanced rank by rank) and far more ranks than ops (codes past
    the compiled pass's dense table, numbered densely first): the op-by-op rule's edges."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 80))
    rank = rng.integers(0, 3 if seed % 2 else 1_000_000, n).astype(np.int32)
    stream = rng.integers(0, 3, n).astype(np.int32)
    is_p2p = rng.random(n) < 0.7
    batch = np.where(rng.random(n) < 0.7, rng.integers(0, 2, n), -1).astype(np.int32)
    cols = SimpleNamespace(c={"rank": rank, "stream": stream, "batch": batch}, is_p2p=is_p2p, N=n,
                           table=SimpleNamespace(streams=SimpleNamespace(items=list(range(3)))))
    want = _stream_edges_by_hand(rank.tolist(), stream.tolist(), batch.tolist(), is_p2p.tolist())
    np.testing.assert_array_equal(_stream_edges(cols), want)
    np.testing.assert_array_equal(numpy_edges(rank, stream, batch, is_p2p, 3), want)


_NUM = r"(?:0|[1-9][0-9]*)"
_CANON = re.compile(rf"(?:(?:{_NUM}[FIBW]{_NUM}|[_.])(?: |$))*")


def test_canonical_actions_test_is_the_regular_expression():
    _kind, cls = _byte_tables()
    rng = random.Random(3)
    pieces = ["0F1", "12B03", "3W10", "_", ".", "0I0", "01F2", "1F", "F1", "1FF1", "1_", "10W0", "x", "é", "0", "7"]
    for _ in range(3000):
        if rng.random() < 0.5:
            toks = [rng.choice(pieces) for _ in range(rng.randint(0, 4))]
        else:
            toks = ["".join(rng.choice("0123456789FIBW_.x") for _ in range(rng.randint(1, 4)))
                    for _ in range(rng.randint(0, 3))]
        line = " ".join(toks)
        b = line.encode()
        want = line.isascii() and _CANON.fullmatch(line) is not None
        assert _canonical(np.frombuffer(b, np.uint8), np.frombuffer(b.translate(cls), np.uint8)) is want, line


@pytest.mark.parametrize("seq", [[()] * 5, [(("a", 1),)] * 3, ["x"], [], ["x", "y", "x"], [("k",), ("k",), ()],
                                 ["y", "x", "y"], ["a", "x", "b", "c"], ["a", "b"], ["x", "x", "a"]])
def test_intern_all_gives_the_ids_one_call_per_item_gives(seq):
    from schedsim.lower.table import _intern_all, _Interner

    fast, slow = _Interner(), _Interner()
    for it in (fast, slow):
        it("x")  # interned before
    got = _intern_all(fast, list(seq))
    assert got.dtype == np.int32 and got.tolist() == [slow(x) for x in seq]
    assert fast.items == slow.items


@pytest.mark.parametrize("seq", [["a", "b", "c"], ["b", "a", "b", "c"], ["x", "x"], [("k",), (), ("k",), "z"],
                                 ["n0", "n1", "n2", "n3", "n1"], ["only"]])
def test_intern_all_into_an_empty_interner_gives_the_ids_one_call_per_item_gives(seq):
    """Nothing interned yet: distinct items take ids 0, 1, ... in one pass; repeated ones as before."""
    from schedsim.lower.table import _intern_all, _Interner

    fast, slow = _Interner(), _Interner()
    got = _intern_all(fast, list(seq))
    assert got.dtype == np.int32 and got.tolist() == [slow(x) for x in seq]
    assert fast.items == slow.items and fast._ids == slow._ids
    assert fast("new") == slow("new") == len(slow.items) - 1


_NAN = float("nan")  # one object: found again by identity; a second NaN object is another item
_EQUAL_ACROSS_TYPES = [1, 1.0, True, 0, -0.0, 0.0, False, _NAN, float("nan"), None, "a", "é", "", ("a",), "r0"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(seqs=st.lists(st.lists(st.sampled_from(_EQUAL_ACROSS_TYPES), max_size=7), min_size=1, max_size=3),
       before=st.sampled_from(["none", "interned", "appended"]))
def test_intern_all_keeps_the_first_seen_object_of_equal_items(seqs, before):
    # items equal across types (1 == 1.0 == True, -0.0 == 0.0) are one item, kept as first seen, whichever path
    # _intern_all takes (the one-pass path of an empty interner, or the lookup path); an appended item fills an id
    # without a lookup entry, so the interner is not empty
    from schedsim.lower.table import _intern_all, _Interner

    fast, slow = _Interner(), _Interner()
    for it in (fast, slow):
        if before == "interned":
            it(1.0)
            it("a")
        elif before == "appended":
            it.append("a")
    for seq in seqs:
        got = _intern_all(fast, list(seq))
        assert got.dtype == np.int32 and got.tolist() == [slow(x) for x in seq]
        assert [(type(x), repr(x)) for x in fast.items] == [(type(x), repr(x)) for x in slow.items]
        assert [(type(k), repr(k), v) for k, v in fast._ids.items()] == \
            [(type(k), repr(k), v) for k, v in slow._ids.items()]
