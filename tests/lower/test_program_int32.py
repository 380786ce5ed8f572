"""The Program's dependency CSR and edges are int32 where they fit (memory, issue 38), read correctly by what
uses them: the successor CSR (keys ``src·N + dst`` past 2**31), the compiled loop's ``succ_csr``; int64 is kept
past 2**31."""

from __future__ import annotations

import numpy as np

from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.lower.program import NARROW, _narrow
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text


def colliding(n: int) -> str:
    """``n + 2`` 1 µs kernels one after the other on one stream of one rank, op ``n`` also depending on op 0; with
    ``n = 65535`` the keys ``src·N + dst`` of the edges 0 → n and n → n + 1 are equal modulo 2**32."""
    return (f"schema_version: 1\nname: chain\nworld_size: 1\nparams: {{n: {n}}}\nops:\n"
            "  - foreach: {i: range(n)}\n    ops:\n"
            "      - {name: 'a{i}', kind: compute, duration_us: 1, stream: s0}\n"
            f"  - {{name: a{n}, kind: compute, duration_us: 1, stream: s0, deps: [a0]}}\n"
            f"  - {{name: a{n + 1}, kind: compute, duration_us: 1, stream: s0}}\n")


def test_edges_and_dependencies_are_int32_and_the_successors_right_past_2_31_keys():
    n = 65535
    N = n + 2
    prog = lower(load_text(colliding(n), "chain.yaml"))
    assert prog.N == N and (n * N + n + 1) % 2**32 == n  # the two keys, wrapped, are one
    assert [getattr(prog, f).dtype for f in NARROW] == [np.int32] * 4
    ptr, dst, kind = prog.succ
    want_ptr = np.concatenate([[0], np.arange(2, N + 1), [N]])  # op 0: two successors (1, n); then one each
    assert np.array_equal(ptr, want_ptr)
    assert dst[:2].tolist() == [1, n] and np.array_equal(dst[2:], np.arange(2, N))
    assert kind.tolist()[:2] == [0, 1] and not kind[2:].any()  # the stream edge first, then the dependency
    tl = simulate(prog, load_profile("h200"), gpu_model="waves")  # succ_csr reads the int32 pairs
    assert len(tl) == N and tl.makespan_s >= N * 1e-6


def test_index_arrays_past_2_31_stay_int64():
    a = np.arange(4, dtype=np.int64)
    assert _narrow(a, 2**31 - 1).dtype == np.int32
    assert _narrow(a, 2**31) is a


def test_single_instance_columns_are_int32_and_refuse_values_past_it():
    """``table._ints`` (the single instances' columns): int32, writable, the values as given; a value outside
    int32 raises OverflowError as ``np.array(..., np.int32)`` does."""
    import pytest

    from schedsim.lower.table import _ints

    v = [0, -1, 2**31 - 1, -(2**31), 7]
    got = _ints(v)
    assert got.dtype == np.int32 and got.tolist() == v and got.flags.writeable
    assert _ints([]).tolist() == [] and _ints([]).dtype == np.int32
    for bad in (2**31, -(2**31) - 1):
        with pytest.raises(OverflowError):
            _ints([1, bad])


def test_a_column_of_one_value_is_a_broadcast_and_reads_as_the_full_one():
    # no op has tags, a peer, a batch or a message tag: those columns are one shared value each (no memory per op);
    # a schedule with send/recv keeps its peer and message columns per op
    from schedsim.lower.program import SHARED

    text = ("schema_version: 1\nname: s\nworld_size: 2\nops:\n"
            "  - {name: mm, kind: matmul, m: 64, n: 64, k: 64, dtype: bf16, stream: c}\n"
            "  - {name: ar, kind: all_reduce, bytes: 1024, stream: m, deps: [mm]}\n")
    prog = lower(load_text(text, "s.yaml"))
    assert prog.N == 4
    for f in SHARED:
        a = getattr(prog, f)
        assert a.strides == (0,) and not a.flags.writeable and a.shape == (4,)
    assert prog.peer.tolist() == prog.batch.tolist() == prog.msg.tolist() == [-1] * 4
    assert prog.tags_id.tolist() == [0] * 4
    assert [o.peer for o in prog.ops()] == [None] * 4
    p2p = ("schema_version: 1\nname: p\nworld_size: 2\nops:\n"
           "  - {name: s, kind: send, ranks: [0], peer: 1, bytes: 1024, stream: m}\n"
           "  - {name: r, kind: recv, ranks: [1], peer: 0, bytes: 1024, stream: m}\n")
    prog = lower(load_text(p2p, "p.yaml"))
    assert prog.peer.strides == (4,) and prog.peer.tolist() == [1, 0]
    assert prog.batch.strides == (0,) and prog.batch.tolist() == [-1, -1]
    assert len(simulate(prog, load_profile("h200"))) == 2
