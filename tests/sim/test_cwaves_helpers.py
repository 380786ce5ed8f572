"""The compiled helpers beside the event loop (schedsim/sim/_cwaves.c): rule host-issue's issue times
(``issue_times``, with a GEMM's per-op ``gemm.call`` extra) and the first pass's bound (``end_bound``) against their
numpy forms (the oracle ``tests/oracle/numpy_helpers``) bit for bit, the critical path's ``walk`` against the Python
walk it replaced, and the loop refusing buffers of the wrong type instead of reading them as int32.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedsim.gpu import host as gh
from schedsim.gpu import rules as gm
from schedsim.hardware.profile import load_profile
from tests.oracle import numpy_helpers

try:
    from schedsim.sim import _cwaves  # type: ignore[attr-defined]
except ImportError:  # not built: nothing to compare
    _cwaves = None

pytestmark = pytest.mark.skipif(_cwaves is None, reason="schedsim.sim._cwaves is not built (pip install -e .)")

PROFILE = load_profile("h200")


def _issue(monkeypatch, oracle: bool, cols: tuple, mode: str, executor: bool,  # type: ignore[no-untyped-def,type-arg]
           call_extra: np.ndarray | None) -> tuple[bytes, bytes]:
    """host_issue_columns with the compiled ``issue_times`` (the package's) or its numpy oracle in its place."""
    with monkeypatch.context() as m:
        if oracle:
            m.setattr(gh, "_required", lambda name: getattr(numpy_helpers, name))
        issue, call0 = gh.host_issue_columns(*cols, PROFILE, mode, executor, call_extra)
    return issue.tobytes(), call0.tobytes()


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60), ranks=st.integers(1, 4), sorted_ranks=st.booleans(),
       one_host_s=st.booleans(), executor=st.booleans(), extra=st.sampled_from(["none", "zeros", "some"]),
       sparse=st.booleans())
def test_issue_times_equal_the_numpy_oracle(monkeypatch, seed, n, ranks, sorted_ranks, one_host_s, executor, extra,
                                            sparse):
    """Any mix of host classes, streams, batches (ids dense, or past the compiled table: 2**40, 2**62), declared
    host time (one value broadcast, or per op, with a -0.0 among them), repeats (one value broadcast, or per op),
    ranks in or out of order and a per-op call extra (none, all zero, or on some ops, as a GEMM shape's
    ``gemm.call`` row gives): the compiled pass equals the numpy oracle's to the bit, in eager and graph mode."""
    rng = np.random.default_rng(seed)
    rank = rng.integers(0, ranks, n)
    if sorted_ranks:
        rank.sort()
    stream = rng.integers(0, 3, n)
    hcls = rng.integers(0, 7, n)
    repeat = np.broadcast_to(np.int64(2), (n,)) if one_host_s else rng.integers(1, 4, n)
    host_s = np.broadcast_to(np.float64(2.5e-6), (n,)) if one_host_s else \
        np.where(rng.random(n) < 0.2, -0.0, rng.random(n) * 1e-5)
    ids = np.array([0, 2**40, 2**62]) if sparse else np.arange(3)
    batch = np.where(hcls == gh.H_BATCH_P2P, ids[rng.integers(0, 3, n)], -1)
    xdeps = rng.integers(0, 3, n)
    call_extra = None if extra == "none" else np.zeros(n) if extra == "zeros" else \
        np.where((hcls == gh.H_KERNEL) & (rng.random(n) < 0.5), rng.random(n) * 3e-6, 0.0)
    cols = (rank, stream, hcls, repeat, host_s, batch, xdeps)
    for mode in ("eager", "cuda_graph"):
        want = _issue(monkeypatch, True, cols, mode, executor, call_extra)
        assert _issue(monkeypatch, False, cols, mode, executor, call_extra) == want


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60), comms=st.integers(1, 4), batched=st.booleans())
def test_fifo_edges_are_the_numpy_edges(seed, n, comms, batched):
    """Ranks in order, ops in and out of communicators, batches of several ops one after another (more edges than
    ops): the compiled edges are numpy's (as a set: the successor lists do not keep their order); the count comes
    back when the room is short, and -1 when the ranks do not ascend."""
    rng = np.random.default_rng(seed)
    rank = np.sort(rng.integers(0, 3, n))
    comm = rng.integers(-1, comms, n)
    batch = np.where(rng.random(n) < 0.6, rng.integers(0, 2, n), -1) if batched else np.full(n, -1)
    u0, v0 = numpy_helpers.comm_fifo_columns(rank, comm, batch)
    out = np.empty((4 * n + 1, 2), np.int64)
    m = _cwaves.fifo_edges(rank, comm, batch, out)
    assert sorted(map(tuple, out[:m].tolist())) == sorted(zip(u0.tolist(), v0.tolist(), strict=True))
    if m:
        assert _cwaves.fifo_edges(rank, comm, batch, out[:m - 1]) == m
    if len(set(rank.tolist())) > 1:
        assert _cwaves.fifo_edges(rank[::-1].copy(), comm, batch, out) == -1


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), sorted_ranks=st.booleans(), sparse=st.booleans(),
       conns=st.integers(1, 4))
def test_stream_queues_compiled_equal_numpy(seed, n, sorted_ranks, sparse, conns):
    """Rule hardware-queues's queues (the compiled per-rank numbering, ranks sorted and codes made dense first when
    they are not) equal the numpy oracle's numbering mod ``conns``, ranks in or out of order, codes dense, sparse or
    negative."""
    rng = np.random.default_rng(seed)
    rank = rng.integers(0, 3, n)
    if sorted_ranks:
        rank.sort()
    stream = rng.integers(0, 7, n)
    want = np.empty(n, np.int64)
    assert numpy_helpers.rank_codes(rank, stream, want)
    if sparse:  # codes equal for equal names, past the C's table or below 0
        stream = np.array([-5, 2**40, 3, 2**62, -1, 9, 0])[stream]
    assert gm.stream_queue_columns(rank, stream, conns).tolist() == (want % conns).tolist()


def test_stream_numbering_missing_from_the_build_is_a_build_error(monkeypatch):  # type: ignore[no-untyped-def]
    """Rule hardware-queues's numbering has no package form but the compiled one: a build without ``rank_codes``
    (one from an older ``_cwaves.c``) stops with a BuildError naming it and the fix, rather than falling back."""
    import sys
    import types

    import schedsim.sim
    from schedsim.errors import BuildError

    stale = types.ModuleType("schedsim.sim._cwaves")
    monkeypatch.setitem(sys.modules, "schedsim.sim._cwaves", stale)
    monkeypatch.setattr(schedsim.sim, "_cwaves", stale, raising=False)
    with pytest.raises(BuildError, match="lack rank_codes") as e:
        gm.stream_queue_columns(np.array([1, 0]), np.array([0, 0]), 4)
    assert "pip install -e ." in (e.value.fix or "")


def test_fifo_edges_and_stream_reached_by_hand():
    """One rank, communicator 0: a lone op, a batch of two, a lone op; ops 1 and 2 wait for op 0, op 3 for both.
    Two queues of kernels: the second kernel of a queue is reached when the first was handed over."""
    out = np.empty((8, 2), np.int64)
    m = _cwaves.fifo_edges(np.zeros(5, np.int64), np.array([0, 0, 0, 0, -1]), np.array([-1, 3, 3, -1, -1]), out)
    assert sorted(map(tuple, out[:m].tolist())) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    qptr, qidx = np.array([0, 2, 3], np.int32), np.array([0, 2, 1], np.int32)  # queue 0: kernels 0, 2; queue 1: 1
    khand = np.array([5.0, 7.0, 9.0])
    deps = np.array([1.0, 1.0, 1.0, 8.0])
    _cwaves.stream_reached(qptr, qidx, khand, np.array([0, 1, 2, 2], np.int32), np.array([0.0, 3.0, 0.0, 0.0]),
                           deps)
    assert deps.tolist() == [1.0, 3.0, 5.0, 8.0]  # op 2 (kernel 2): after kernel 0's hand-over at 5
    with pytest.raises(ValueError, match="out of range"):
        _cwaves.stream_reached(qptr, qidx, khand, np.array([0, 1, 2, 3], np.int32), np.zeros(4), deps)
    out = np.empty(6, np.int64)  # two ranks: streams numbered by first appearance on each
    assert _cwaves.rank_codes(np.array([0, 0, 0, 1, 1, 1]), np.array([5, 2, 5, 2, 9, 5]), out)
    assert out.tolist() == [0, 1, 0, 0, 1, 2]
    assert not _cwaves.rank_codes(np.array([1, 0, 0, 0, 0, 0]), np.zeros(6, np.int64), out)


def test_issue_times_by_hand():
    """Two ranks, three ops (a kernel, a kernel of two repeats with a 4 s call extra on another stream after one
    event wait, a collective on rank 1): each op's call starts after its rank's earlier increments plus its own
    host time, event waits, executor extra and stream switch; it is issued after its call (class call × repeats
    + call extra) and its group's first-call cost."""
    i = lambda *a: np.array(a, np.int64)  # noqa: E731
    by_class = np.array([100.0, 0.0, 0.0, 0.0, 0.0, 300.0])
    per_repeat, first_group = np.array([1, 1, 0, 0, 0, 0], np.int32), np.array([0, -1, -1, 1, 1, 1], np.int32)
    first_cost = np.array([1000.0, 2000.0])
    args = (i(0, 0, 1), i(0, 1, 0), i(0, 0, 5), i(1, 2, 1), i(-1, -1, -1), i(0, 1, 0), np.array([1.0]), by_class,
            per_repeat, first_group, first_cost, gh.H_BATCH_P2P, (10.0, 0.5, 0.25, 7.0))
    issue, call0 = np.empty(3), np.empty(3)
    assert _cwaves.issue_times(*args, issue, call0, np.array([0.0, 4.0, 0.0]))
    # op 0: 1 + 0.5 = 1.5, +100 +1000 = 1101.5; op 1: 1101.5 + 1 + 10 + 0.5 + 0.25 = 1113.25, +2·100 + 4;
    # op 2 (rank 1): 1 + 0.5 = 1.5, +300 +2000
    assert call0.tolist() == [1.5, 1113.25, 1.5]
    assert issue.tolist() == [1101.5, 1317.25, 2301.5]
    assert _cwaves.issue_times(*args, issue, call0)  # no call extra: op 1 issued 4 s earlier
    assert issue.tolist() == [1101.5, 1313.25, 2301.5]
    assert not _cwaves.issue_times(i(1, 0, 0), *args[1:], issue, call0)  # ranks out of order: declined
    with pytest.raises(TypeError, match="int32 class tables"):
        _cwaves.issue_times(*args[:8], per_repeat.astype(np.int64), *args[9:], issue, call0)
    with pytest.raises(ValueError, match="wrong lengths"):
        _cwaves.issue_times(*args, issue, call0, np.zeros(2))


def _walk_python(binding: np.ndarray, ogrp: np.ndarray, i: int) -> list[int]:
    """The walk ``engine._timeline_program`` ran in Python before ``_cwaves.walk`` (last op first)."""
    path: list[int] = []
    seen: set[int] = set()
    while i >= 0 and i not in seen:
        seen.add(i)
        b = int(binding[i])
        if not (b >= 0 and ogrp[i] >= 0 and ogrp[b] == ogrp[i]):
            path.append(i)
        i = b
    return path


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40))
def test_walk_matches_the_python_walk(seed, n):
    """Random bindings (ops, the host -2, none -1, cycles included) and rendezvous groups."""
    rng = np.random.default_rng(seed)
    binding = rng.integers(-2, n, n).astype(np.int32)
    ogrp = np.where(rng.random(n) < 0.5, rng.integers(0, 3, n), -1).astype(np.int32)
    for start in {0, n - 1, int(rng.integers(0, n))}:
        out = np.empty(n, np.int32)
        k = _cwaves.walk(binding, ogrp, start, out)
        assert out[:k].tolist() == _walk_python(binding, ogrp, start)


def test_walk_skips_a_rendezvous_peer_and_stops_at_the_host():
    """Op 3 was released by op 2, its group's peer (op 2 stands for it: op 3 is left out); op 2 by op 0, not of
    its group (op 2 kept); op 0 by the host (-2, kept, the walk ends): from op 3 the path is 2, 0."""
    binding = np.array([-2, -1, 0, 2], np.int32)
    ogrp = np.array([-1, -1, 7, 7], np.int32)
    out = np.empty(4, np.int32)
    k = _cwaves.walk(binding, ogrp, 3, out)
    assert out[:k].tolist() == [2, 0]
    with pytest.raises(TypeError, match="int32"):
        _cwaves.walk(binding.astype(np.int64), ogrp, 3, out)
    with pytest.raises(ValueError, match="outside"):
        _cwaves.walk(binding, ogrp, 4, out)


def test_the_loop_refuses_an_int64_index_buffer():
    """Every index buffer of run() is int32 since LAYOUT 2: an int64 one (the old layout) is a TypeError that
    names its slot, not memory read at the wrong width."""
    kinds = "ddd" "iiiiiiiddi" "iiiiiiiid" "idd" "ii" "iiiiiiiiiid" "ddddd" "i" "iiii"
    arrays = [np.zeros(1, np.float64 if k == "d" else np.int32) for k in kinds]
    arrays[4] = np.zeros(1, np.int64)  # succ_ptr
    with pytest.raises(TypeError, match="array 4 must be a contiguous int32 buffer"):
        _cwaves.run((0, 0, 0, 1, 132, 16), (1.0, 0.0, 1.0), tuple(arrays))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 80), keys=st.integers(1, 6), zeros=st.floats(0.0, 1.0))
def test_end_bound_equals_the_numpy_walk(seed, n, keys, zeros):
    """Runs of (rank, stream) codes of any length, least durations zero on some ops (whole runs of zeros too) and
    releases anywhere, negative ones among them: the compiled walk's bound is the numpy walk's to the bit (-inf
    where no run has a nonzero duration)."""
    rng = np.random.default_rng(seed)
    key = np.sort(rng.integers(0, keys, n)).astype(np.int64) * 7
    d = np.where(rng.random(n) < zeros, 0.0, rng.random(n) * 1e-4)
    rel = (rng.random(n) - 0.2) * 1e-3
    want = numpy_helpers.end_bound(key, d, rel)
    assert repr(_cwaves.end_bound(key, d, rel)) == repr(want)


def test_end_bound_by_hand():
    """Two streams: a chain 3, 4 released at 0 and 10 (ends 3, then max(3, 10) + 4 = 14); the other's kernels 5
    from release 1 and a zero-duration op released at 100 (counted nothing: d = 0) -> 14. Lengths that differ are a
    ValueError, an int32 key a TypeError."""
    key = np.array([0, 0, 1, 1], np.int64)
    d = np.array([3.0, 4.0, 5.0, 0.0])
    rel = np.array([0.0, 10.0, 1.0, 100.0])
    assert _cwaves.end_bound(key, d, rel) == 14.0 == numpy_helpers.end_bound(key, d, rel)
    assert _cwaves.end_bound(key[:0], d[:0], rel[:0]) == -np.inf
    with pytest.raises(ValueError):
        _cwaves.end_bound(key, d[:3], rel)
    with pytest.raises(TypeError):
        _cwaves.end_bound(key.astype(np.int32), d, rel)
