"""Review (break2) of the round-2 speed work: inputs that once crashed the compiled helpers or made them differ
from their numpy / Python references, each pinned against an independent path."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

try:
    from schedsim.sim import _cwaves as _ext  # type: ignore[attr-defined]
except ImportError:  # not built: nothing to compare
    _ext = None


def compiled(name: str) -> object:
    """The compiled helper ``name``, or None when the extension is not built."""
    return getattr(_ext, name, None)


def _survives(code: str) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter: a compiled helper that writes out of bounds kills it (a crash is a
    failure of this test, not of the whole run)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(compiled("torch_rows") is None, reason="compiled extension not built")
def test_torch_rows_refuses_negative_counts_and_adjustments() -> None:
    """counts [5, -3] sum to n = 2 but give rank 0 steps 0..4 (past the arrays); an adjustment past the steps
    overflows the sweep numbers. Both are bad input: ValueError, no heap corruption."""
    r = _survives(
        """
        import numpy as np
        from schedsim.sim import _cwaves as C
        i64 = np.int64
        z = lambda n: np.zeros(n, i64)
        for counts, prod, adj in (([5, -3], [-1, -1], [0, 0]), ([2], [-1, 0], [0, 2**63 - 1]),
                                  ([1, 1], [-1, 0], [0, -1])):
            try:
                C.torch_rows(np.array(counts, i64), z(2), z(2), z(2), np.array(prod, i64), np.array(adj, i64),
                             z(2), z(2), z(2), z(2), z(2), z(2), z(2), z(2), z(2))
                print("accepted")
            except ValueError as e:
                print("ValueError", e)
        """
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["ValueError torch_rows: inconsistent counts, lengths or indices"] * 3


@functools.cache
def _v3_text() -> str:
    """A version-3 timeline document (a simulated 2-rank pipeline: coded names and tags, based float columns)."""
    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_schedule
    from schedsim.spec.overrides import parse_overrides
    from tests.conftest import ROOT

    prog = lower(load_schedule(ROOT / "schedules" / "pipeline_schedules.yaml", parse_overrides(["p=2", "m=2"])))
    tl = simulate(prog, load_profile("h200"), gpu_model="waves")
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        tl.write_json(Path(tmp) / "t.json")
        return (Path(tmp) / "t.json").read_text()


@pytest.mark.parametrize("col", ["bytes", "flops", "ready_s", "solo_s", "stream_s"])
@pytest.mark.parametrize("form", ["based", "list"])
def test_an_infinite_float_column_value_is_a_trace_error_naming_the_column(tmp_path, col, form) -> None:  # type: ignore[no-untyped-def]
    """Python's json reads the Infinity token; no schedsim writer makes one (orjson writes inf as null) and the
    row layout refuses it (trace.validate). The column layouts must too, naming the column: an infinite
    ``bytes`` once reached ``schedsim analyze`` as an OverflowError traceback (int(inf))."""
    import json

    from schedsim.errors import TraceError
    from schedsim.sim.timeline import Timeline

    d = json.loads(_v3_text())
    n = d["n_ops"]
    vals = [float("inf") if i == 3 else (1.0 if col in ("bytes", "flops") else 0.5) for i in range(n)]
    d["columns"][col] = {"base": 1.0, "index": [3], "values": [float("inf")]} if form == "based" else vals
    path = tmp_path / "t.json"
    path.write_text(json.dumps(d))  # Infinity, as Python's json writes it
    with pytest.raises(TraceError, match=f"'{col}'"):
        Timeline.read_json(path)
    if col != "bytes":  # the CLI once (the reader is shared)
        return
    r = subprocess.run([sys.executable, "-m", "schedsim", "analyze", str(path)], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and col in r.stderr + r.stdout


def test_the_standard_library_writer_writes_inf_as_null_like_orjson() -> None:
    """dumps_json's fallback (an integer past 64 bits in a tag) writes a float array's NaN and ±inf as null, as
    orjson does, so what it writes the reader takes (it refuses the Infinity token)."""
    import json

    from schedsim.sim.timeline import dumps_json

    doc = {"big": 2**70, "a": np.array([1.5, np.inf, -np.inf, np.nan, -0.0]), "x": np.float64(np.inf)}
    assert json.loads(dumps_json(doc)) == {"big": 2**70, "a": [1.5, None, None, None, -0.0], "x": None}


EDGE_SCHEDULES = {
    # 300 ranks, most without ops; ops written out of rank order; collectives over subgroups; a p2p batch of
    # two sends to two ranks; a copy; declared streams never used (communicators created eagerly: lazily, the
    # batch's world communicator would wait for the 297 ranks that never call it)
    "many_ranks": """
schema_version: 1
name: many_ranks
world_size: 300
nccl_init: eager
streams: [compute, comm, copy, h2d, main, side, empty]
ops:
  - {name: late, kind: compute, duration_us: 5, ranks: [299, 3]}
  - {name: c0, kind: compute, duration_us: 3, ranks: [0, 150, 3], stream: side}
  - {name: ar, kind: all_reduce, bytes: 1048576, ranks: [3, 150], group: [3, 150]}
  - {name: ag, kind: all_gather, bytes: 65536, ranks: [0, 150, 299], group: [0, 150, 299], stream: side}
  - {name: s, kind: send, peer: 250, bytes: 4096, ranks: [7], p2p_batch: b1}
  - {name: s2, kind: send, peer: 251, bytes: 4096, ranks: [7], p2p_batch: b1}
  - {name: r, kind: recv, peer: 7, bytes: 4096, ranks: [250]}
  - {name: r2, kind: recv, peer: 7, bytes: 4096, ranks: [251]}
  - {name: cp, kind: memcpy, direction: h2d, bytes: 1048576, ranks: [42]}
  - {name: mm, kind: matmul, m: 256, n: 256, k: 256, dtype: bf16, ranks: [299, 3], deps: [late]}
""",
    # lone send/recv in a ring (even ranks send first) on a second stream, a collective, a batched exchange
    "lone_ring": """
schema_version: 1
name: lone_ring
world_size: 4
streams: [compute, comm]
ops:
  - {name: f, kind: compute, duration_us: 4}
  - {name: sa, kind: send, peer: "(rank + 1) % 4", bytes: 8192, stream: comm, when: rank % 2 == 0}
  - {name: ra, kind: recv, peer: "(rank + 3) % 4", bytes: 8192, stream: comm, when: rank % 2 == 1}
  - {name: sb, kind: send, peer: "(rank + 1) % 4", bytes: 8192, stream: comm, when: rank % 2 == 1}
  - {name: rb, kind: recv, peer: "(rank + 3) % 4", bytes: 8192, stream: comm, when: rank % 2 == 0}
  - {name: ar, kind: all_reduce, bytes: 4194304, deps: [f]}
  - {name: bx, kind: send, peer: "rank + 1 - 2 * (rank % 2)", bytes: 1024, p2p_batch: x}
  - {name: by, kind: recv, peer: "rank + 1 - 2 * (rank % 2)", bytes: 1024, p2p_batch: x}
  - {name: g, kind: compute, duration_us: 1, ranks: [2]}
""",
    "one_op": "schema_version: 1\nname: one_op\nworld_size: 1\nops:\n  - {name: x, kind: compute, duration_us: 2}\n",
}

_HELPERS = ("issue_times", "fifo_edges", "rank_codes", "stream_reached", "succ_csr", "kernels")


@pytest.mark.skipif(compiled("succ_csr") is None, reason="compiled extension not built")
@pytest.mark.parametrize("name", sorted(EDGE_SCHEDULES))
def test_program_runs_equal_with_and_without_the_compiled_helpers(monkeypatch, tmp_path, name) -> None:  # type: ignore[no-untyped-def]
    """A Program's run with every compiled helper, with the compiled loop but the helpers' numpy forms (their
    references), and the Python loop on the Op list: one timeline, bit for bit, on edge cases of the helpers."""
    import types

    from schedsim.gpu import host as gh
    from schedsim.graph.build import graph_of
    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.sim import _cwaves, loop
    from schedsim.spec.loader import load_schedule
    from tests.oracle.test_waves_columns import outcome

    path = tmp_path / f"{name}.yaml"
    path.write_text(EDGE_SCHEDULES[name])
    prog = lower(load_schedule(path))
    from tests.oracle import numpy_helpers as nh

    # the loop with the numpy forms of its helpers (the oracle's)
    loop_only = types.SimpleNamespace(**{k: getattr(_cwaves, k) for k in dir(_cwaves)
                                         if not k.startswith("_") and k not in _HELPERS},
                                      succ_csr=nh.succ_csr, kernels=nh.kernels, stream_reached=nh.stream_reached,
                                      fifo_edges=nh.fifo_edges, issue_times=nh.issue_times)
    for prof, kw in (("h200", {}), ("h200", {"max_connections": 1}), ("h200x2", {"max_connections": 32}),
                     ("pcie2", {"launch": "cuda_graph"}), ("h200", {"model_executor": True})):
        got = []
        for mod in (_cwaves, loop_only, None):
            monkeypatch.setattr(loop, "_EXT", [mod])
            # the host's issue times follow the loop's helpers (the oracle's with the Python loop)
            monkeypatch.setattr(gh, "_required", lambda name, mod=mod: getattr(nh if mod is None else mod, name))
            got.append(outcome(prog if mod is not None else graph_of(prog), load_profile(prof), **kw))
        assert got[0] == got[1] == got[2], (name, prof, kw)
        assert not isinstance(got[0][0], str) and len(got[0][0]) == prog.N  # a timeline, every op in it


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2, 299, 20000, 70000]), st.sampled_from(
    ["compute", "comm", "copy", "host", "other"]), st.sampled_from([0.0, 1.0, 2.5, 3.0]),
    st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.0]), st.one_of(st.none(), st.sampled_from([0.0, 0.25, 4.0]))),
    max_size=30))
def test_metrics_equal_a_recomputation_from_the_spans(rows) -> None:  # type: ignore[no-untyped-def]
    """compute_metrics' grouping (a radix sort below 2**16 keys, rank × 4 + resource class; an argsort past it:
    ranks 20000 and 70000) against the definitions recomputed from the spans with plain interval lists:
    overlapping, zero-length, unsorted and tied starts, resources other than compute/comm/copy (in no union)."""
    from schedsim.sim.metrics import compute_metrics
    from schedsim.sim.timeline import Span, Timeline

    spans = [Span(f"o{i}@r{r}", f"o{i}", r, "s", "k", res, a, a + d, None, None if w is None else max(0.0, a - w))
             for i, (r, res, a, d, w) in enumerate(rows)]
    tl = Timeline("x", "predict", 70001, spans=spans)

    def union(iv):  # type: ignore[no-untyped-def]
        out: list[list[float]] = []
        for a, b in sorted(x for x in iv if x[1] > x[0]):
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return out

    def size(iv):  # type: ignore[no-untyped-def]
        return sum(b - a for a, b in iv)

    # makespan: the latest end, counted from time 0 or from the earliest start when that is before it
    ms = max((s.end_s for s in spans), default=0.0) - min([0.0, *(s.start_s for s in spans)])
    got = compute_metrics(tl)
    assert got["makespan_s"] == pytest.approx(ms)
    assert sorted(got["ranks"]) == sorted({s.rank for s in spans})
    for r, m in got["ranks"].items():
        by = {k: union([(s.start_s, s.end_s) for s in spans if s.rank == r and s.resource == k])
              for k in ("compute", "comm", "copy")}
        comm, comp = by["comm"], by["compute"]
        ov = sum(max(0.0, min(b, d) - max(a, c)) for a, b in comm for c, d in comp)
        kv = union([(s.ready_s if s.ready_s is not None else s.start_s, s.end_s) for s in spans
                    if s.rank == r and s.resource == "comm"])
        want = {"busy_compute_s": size(comp), "busy_comm_s": size(comm), "busy_copy_s": size(by["copy"]),
                "idle_s": ms - size(union(comp + comm + by["copy"])), "exposed_comm_s": size(comm) - ov,
                "overlap_ratio": ov / size(comm) if size(comm) > 0 else 0.0,
                "comm_share": size(comm) / ms if ms > 0 else 0.0,
                "comm_share_kernel_view": size(kv) / ms if ms > 0 else 0.0}
        for k, v in want.items():
            assert m[k] == pytest.approx(v, abs=1e-12), (r, k)


@pytest.mark.parametrize("edit, words", [
    # a base column of another length than the rows: once an IndexError from numpy naming no column
    (lambda c, n: (c.__setitem__("start_s", c["start_s"][:-1]),
                   c.__setitem__("ready_s", {"base": "start_s", "index": [n - 1], "values": [0.0]})),
     ["'ready_s'", "'start_s'"]),
    # a base number past float range: once "OverflowError: int too large to convert to float", no column
    (lambda c, n: c.__setitem__("solo_s", {"base": 10**400, "index": [], "values": []}), ["'solo_s'"]),
])
def test_a_based_column_that_cannot_be_built_names_itself(tmp_path, edit, words) -> None:  # type: ignore[no-untyped-def]
    import json

    from schedsim.errors import TraceError
    from schedsim.sim.timeline import Timeline

    d = json.loads(_v3_text())
    edit(d["columns"], d["n_ops"])
    path = tmp_path / "t.json"
    path.write_text(json.dumps(d))
    with pytest.raises(TraceError) as e:
        Timeline.read_json(path)
    for w in words:
        assert w in str(e.value), str(e.value)


@pytest.mark.skipif(compiled("kernels") is None, reason="compiled extension not built")
def test_kernels_and_first_set_refuse_sizes_whose_tables_overflow() -> None:
    """kernels sizes its (rank, batch) and (rank, queue) tables world × nb and world × C: 2**32 × 2**32 wrapped
    to an empty table and rank 1's slot was written past it (a segfault). first_set's K × 3 wrapped likewise
    (K = 6148914691236517206: 3K = 2 mod 2**64, candidates read past the table). ValueError for both."""
    r = _survives(
        """
        import numpy as np
        from schedsim.sim import _cwaves as C
        i32 = lambda *a: np.array(a, np.int32)
        i64 = lambda *a: np.array(a, np.int64)
        f = lambda *a: np.array(a, np.float64)
        outs = [np.zeros(2, np.float64 if k == 7 else np.int32) for k in range(12)]
        for sizes, batch in (((1, 2**32, 2**32, 1), 0), ((1, 2**32, 0, 2**32), -1)):
            try:
                C.kernels(sizes, i32(1), i32(batch), i32(0), i32(0), f(1.0), i32(0), i32(1), f(1.0), i32(0), *outs)
                print("accepted")
            except ValueError as e:
                print("ValueError", str(e).split(":")[0])
        try:
            C.first_set(i64(0), i64(0), i64(0), i64(0), i64(0), i64(5), i64(0, 0, 0, 0), 6148914691236517206, 1, 1,
                        i64(-7))
            print("accepted")
        except ValueError as e:
            print("ValueError", str(e).split(":")[0])
        """
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["ValueError kernels"] * 2 + ["ValueError first_set"]


@pytest.mark.skipif(compiled("rank_codes") is None, reason="compiled extension not built")
def test_sparse_codes_run_the_numpy_form_not_past_the_compiled_tables() -> None:
    """rank_codes, fifo_edges and issue_times size a table by the largest key (stream code, communicator code,
    batch id) + 1: a code near 2**62 wrapped the allocation to a few bytes and the key's slot was written past it
    (heap corruption; stream_queue_columns takes "any code equal for equal names"). The C now declines such codes
    (False / -1) and its Python caller renumbers them densely first: stream_queue_columns with sparse codes equals
    it on dense codes."""
    r = _survives(
        """
        import numpy as np
        from schedsim.sim import _cwaves as C
        from schedsim.gpu import rules as gm
        i = lambda *a: np.array(a, np.int64)
        big = [2**63 - 1, 2**62, 2**40]
        print([C.fifo_edges(i(0, 0), i(b, b), i(-1, -1), np.zeros(4, np.int64)) for b in big])
        print([C.rank_codes(i(0, 0), i(b, 5), np.zeros(2, np.int64)) for b in big])
        print([C.issue_times(i(0), i(0), i(0), i(1), i(b), i(0), np.zeros(1), np.zeros(1), np.zeros(1, np.int32),
                             np.full(1, -1, np.int32), np.zeros(0), 0, (1.0, 1.0, 1.0, 1.0), np.zeros(1), np.zeros(1))
               for b in big])
        rank, dense = i(0, 0, 0, 1, 1, 2), i(0, 1, 0, 1, 2, 2)
        sparse = np.array([2**62, 7, 2**40])[dense]
        print(gm.stream_queue_columns(rank, sparse, 2).tolist(), gm.stream_queue_columns(rank, dense, 2).tolist())
        """
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["[-1, -1, -1]", "[False, False, False]", "[False, False, False]",
                                     "[0, 1, 0, 0, 1, 0] [0, 1, 0, 0, 1, 0]"]


@pytest.mark.skipif(compiled("torch_rows") is None, reason="compiled extension not built")
def test_torch_rows_refuses_a_send_code_other_than_send_f_or_send_b() -> None:
    """send[k] is 0, 4 (SEND_F) or 6 (SEND_B); its recv row is send + 1. Any other code (2**63 - 1: send + 1
    overflowed) is bad input."""
    i64 = np.int64
    z = lambda n: np.zeros(n, i64)  # noqa: E731
    torch_rows = compiled("torch_rows")
    for code in (5, 2**63 - 1, -4):
        with pytest.raises(ValueError, match="torch_rows"):
            torch_rows(np.array([1, 1], i64), z(2), z(2), z(2), np.array([-1, -1], i64), z(2), np.array([code, 0], i64),
                       np.array([1, 0], i64), np.array([1, 0], i64), z(2), *(z(4) for _ in range(5)))
