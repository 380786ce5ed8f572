"""The compiled event loop (schedsim/sim/_cwaves.c), which the package requires: a Ctrl-C reaches Python while it
runs; a stale or missing build is refused in one error line with its fix (no fallback); a GPU too large for its
rate table is a profile error; bad solo times are graph errors; and its static-check sweep (``acyclic``). Its
timelines against the Python loop (the oracle) are in ``tests/oracle/test_differential.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedsim.errors import BuildError, GraphError, ProfileError
from schedsim.hardware.profile import load_profile
from schedsim.lower import Program, lower
from schedsim.sim import _cwaves, loop  # type: ignore[attr-defined]
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_schedule, load_text
from tests.conftest import ROOT


def chain(n: int) -> Program:
    """``n`` fixed-duration kernels of 1 µs one after the other on one stream of one rank."""
    return lower(load_text(f"schema_version: 1\nname: chain\nworld_size: 1\nparams: {{n: {n}}}\nops:\n"
                           "  - foreach: {i: range(n)}\n    ops:\n"
                           "      - {name: 'a{i}', kind: compute, duration_us: 1, stream: s0}\n", "chain.yaml"))


def test_a_signal_reaches_python_while_the_compiled_loop_runs(monkeypatch):
    # Ctrl-C during a long predict: the loop runs without the GIL, and used to run Python's signal handlers only
    # once it had finished (seconds for 10M ops). Now it runs them every few thousand events, so a handler sees
    # the loop mid-way, and the exception it raises (KeyboardInterrupt) stops the run.
    import ctypes
    import functools
    import operator
    import signal

    n = 20_000
    G = chain(n)
    seen: list[int] = []
    real_run = _cwaves.run

    def run(ints, floats, arrays, *opt):  # type: ignore[no-untyped-def]
        end = arrays[-9]  # the `end` column (waves_columns._run_program_once), written by the loop as it goes
        assert len(end) == n

        def handler(signum, frame):  # type: ignore[no-untyped-def]
            seen.append(sum(1 for x in end if x >= 0.0))
            raise KeyboardInterrupt

        old = signal.signal(signal.SIGUSR1, handler)
        try:  # signal, then enter the loop, with no bytecode in between (where Python would run the handler;
            # libc's raise(), not os.kill or signal.pthread_kill, which run it at once)
            kill = functools.partial(getattr(ctypes.CDLL(None), "raise"), signal.SIGUSR1)
            return list(map(operator.call, [kill, functools.partial(real_run, ints, floats, arrays, *opt)]))[1]
        finally:
            signal.signal(signal.SIGUSR1, old)

    monkeypatch.setattr(_cwaves, "run", run)
    with pytest.raises(KeyboardInterrupt):
        simulate(G, load_profile("h200"), gpu_model="waves")
    assert len(seen) == 1 and 0 < seen[0] < n // 2, seen  # handled at the loop's first check: most ops left
    monkeypatch.setattr(_cwaves, "run", real_run)
    assert simulate(G, load_profile("h200"), gpu_model="waves").makespan_s > n * 1e-6  # and it runs again


def test_a_stale_build_of_the_extension_is_refused(monkeypatch):
    # an editable checkout keeps its built _cwaves*.so across `git pull`: one built from an older _cwaves.c reads
    # its arguments in an older layout (a TypeError from simulate, or wrong arrays if only the order changed)
    import sys
    import types

    import schedsim.sim

    assert _cwaves.LAYOUT == loop._LAYOUT  # the built one is current
    stale = types.ModuleType("schedsim.sim._cwaves")
    stale.run = lambda *a: 0  # type: ignore[attr-defined]  # an older build: no LAYOUT, or another one
    for layout in (None, loop._LAYOUT - 1):
        if layout is not None:
            stale.LAYOUT = layout  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "schedsim.sim._cwaves", stale)
        monkeypatch.setattr(schedsim.sim, "_cwaves", stale, raising=False)
        monkeypatch.setattr(loop, "_EXT", [])
        want = f"out of date \\(LAYOUT {layout}, this source needs {loop._LAYOUT}\\)"
        with pytest.raises(BuildError, match=want) as e:
            loop.compiled_loop()
        assert "pip install -e ." in (e.value.fix or "")
        with pytest.raises(BuildError):  # and the engine refuses to run rather than fall back
            simulate(chain(2), load_profile("h200"))
    monkeypatch.undo()
    assert loop.compiled_loop() is _cwaves


def test_without_the_extension_predict_exits_2_in_one_error_line(tmp_path):
    # the compiled module is required: with it missing (no C compiler at install), predict names it and the fix,
    # exit 2, no traceback, and no silent fallback to a slower loop
    code = ("import sys, runpy; sys.modules['schedsim.sim._cwaves'] = None; sys.argv[0] = 'schedsim'; "
            "runpy.run_module('schedsim', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code, "predict", str(ROOT / "schedules" / "tp_ffn.yaml"), "--no-gantt",
                        "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "SCHEDSIM_DEBUG": ""})
    assert r.returncode == 2, r.stderr
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    # the lowering's compiled helpers (its stream edges) are the first to find it missing, with the same fix
    assert len(errors) == 1 and "compiled helpers (schedsim.sim._cwaves) are not built" in errors[0], r.stderr
    assert "fix: reinstall with a C compiler present (pip install -e . in a checkout" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out" / "timeline.json").exists()


def test_a_gpu_whose_rate_table_is_too_large_is_a_profile_error():
    # the compiled loop reads a (sms + 1) x (sms // nccl_sms + 1) table: past MAX_TABLE entries (1,048,576) the
    # profile is refused, naming the fields, rather than run in a slower loop: 1024 SMs with 1 SM per NCCL kernel
    # is 1025 x 1025 = 1,050,625 entries; 1023 SMs is 1024 x 1024 = 1,048,576, which fits
    from schedsim.gpu import rates as gr
    from schedsim.gpu import rules as gm
    from schedsim.hardware.profile import HardwareProfile

    def with_sms(sms: int) -> HardwareProfile:
        d = load_profile("h200x2").model_dump()
        d["gpu"]["sms"], d["nccl"]["sms_per_collective"] = sms, 1
        return HardwareProfile.model_validate(d)

    prog = lower(load_schedule(ROOT / "schedules" / "tp_ffn.yaml"))
    assert gr.rate_tables(gm.GpuRules.from_profile(with_sms(1023))) is not None
    with pytest.raises(ProfileError, match=r"gpu.sms 1024 with 1 SM\(s\) per NCCL kernel is too large") as e:
        simulate(prog, with_sms(1024))
    assert "gpu.sms" in (e.value.fix or "")


@pytest.mark.parametrize("gpu_model", ["waves", "replay"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1e-6])
def test_a_non_finite_or_negative_duration_is_a_graph_error(monkeypatch, gpu_model, bad):
    # was: NaN/inf spread through the timeline silently; -1e-6 ended before it started, read as a deadlock of a
    # compute op "waiting for its peers" (a profile whose rates are not finite can give such a time)
    from schedsim.gpu.cost import CostModel

    prog = chain(1)
    monkeypatch.setattr(CostModel, "duration", lambda self, op: bad)
    with pytest.raises(GraphError, match=r"a0@r0.*solo duration"):
        simulate(prog, load_profile("h200"), gpu_model=gpu_model)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(1, 12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=30))
def test_compiled_acyclic_matches_the_python_sweep(n, pairs):
    # the static checks' Kahn sweep in C (_cwaves.acyclic) against the Python one and networkx, on random
    # graphs with and without cycles (self-loops and repeated edges included)
    import numpy as np

    from tests.oracle.numpy_helpers import acyclic as _acyclic_python

    e = np.array([(a % n, b % n) for a, b in pairs], np.int64).reshape(-1, 2)
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(e.tolist())
    want = nx.is_directed_acyclic_graph(G)
    assert _cwaves.acyclic(n, np.ascontiguousarray(e[:, 0]), np.ascontiguousarray(e[:, 1])) is want
    e32 = e.astype(np.int32)  # the checks pass int32 node numbers
    assert _cwaves.acyclic(n, np.ascontiguousarray(e32[:, 0]), np.ascontiguousarray(e32[:, 1])) is want
    assert _acyclic_python(n, e) is want


def test_compiled_acyclic_refuses_bad_input():
    import numpy as np

    with pytest.raises(ValueError, match="leaves 0..2"):
        _cwaves.acyclic(3, np.array([0, 3]), np.array([1, 1]))
    with pytest.raises(ValueError, match="differ in length"):
        _cwaves.acyclic(3, np.array([0, 1]), np.array([1]))
    with pytest.raises(TypeError, match="int32 or int64"):
        _cwaves.acyclic(3, np.array([0.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="leaves 0..2"):
        _cwaves.acyclic(3, np.array([0, -1], np.int32), np.array([1, 1], np.int32))
    with pytest.raises(ValueError, match="differ in length or type"):
        _cwaves.acyclic(3, np.array([0, 1], np.int32), np.array([1, 2], np.int64))


#: The loop's per-kernel buffers that have a compact form (``_cwaves.c``, ``W``): position in ``run``'s arrays ->
#: how the full form is made from the compact one, given N and K.
_KERN, _KPTR, _KIDX, _KTYPE, _KMEM, _KNEED, _KTAU, _KTAIL, _KTTAU, _KGAIN, _KWAIT = (
    9, 13, 14, 15, 17, 19, 21, 22, 23, 24, 45)
#: the ops' solo times (per template where the next buffer, each op's template, is given), the copy queues' links
_WORK, _OTMPL, _CQNEXT = 11, 12, 47
#: the groups' members and their ranks (empty: each member's own rank, read through the members)
_ORANK, _GMEM_PTR, _GMEM_IDX, _GRANKS_PTR, _GRANKS_IDX = 7, 27, 28, 33, 34
#: the successor CSR (rank 0's rows alone where every rank's are alike)
_SPTR, _SIDX = 4, 5


def _full_forms(arrays: tuple, N: int, K: int) -> list:
    """``run``'s arrays with every compact form written out: the identity maps as aranges, one-entry buffers
    repeated K times (copies of the rest: the loop writes some of them), and the entries of the buffers that only
    compute kernels read poisoned (NaN, or a memory-bound flag) for the other kernels."""
    import numpy as np

    out = [np.array(a, copy=True) for a in arrays]
    if not len(out[_KERN]):
        out[_KERN], out[_KIDX] = np.arange(N, dtype=np.int32), np.arange(N, dtype=np.int32)
        out[_KPTR] = np.arange(K + 1, dtype=np.int32)
    for k in (_KMEM, _KNEED, _KTAU, _KTAIL, _KTTAU, _KGAIN, _KWAIT):
        if len(out[k]) == 1:
            out[k] = np.repeat(out[k], K)
    if len(out[_OTMPL]):  # the solo times per op, no template index
        out[_WORK], out[_OTMPL] = out[_WORK][out[_OTMPL]], np.zeros(0, np.int32)
    out[_CQNEXT] = np.zeros(K, np.int32)
    if not len(out[_GRANKS_IDX]):
        out[_GRANKS_IDX] = out[_ORANK][out[_GMEM_IDX]]
    R = len(out[_SPTR]) - 1
    if R != N:  # rank 0's successor rows alone: every rank's, shifted by rank·R
        k = np.arange(N // R, dtype=np.int32)[:, None]
        m0 = int(out[_SPTR][R])
        out[_SPTR] = np.append((out[_SPTR][:R] + k * m0).reshape(-1), (N // R) * m0).astype(np.int32)
        out[_SIDX] = (out[_SIDX][:m0] + k * R).reshape(-1).astype(np.int32)
    other = out[_KTYPE] != 0  # not compute kernels: their kmem, ktail_tau, kgain and ktau are never read
    for k, poison in ((_KMEM, 3), (_KTAU, np.nan), (_KTTAU, np.nan), (_KGAIN, np.nan)):
        out[k][other] = poison
    return out


def test_the_loops_compact_buffers_run_as_their_full_forms(monkeypatch):
    # Memory (issue 38): where every op is its own kernel the kernel maps are the identity and are passed empty,
    # and per-kernel buffers of one value (memory flag, split-k tail and its time, fill gain, ops per kernel) as
    # one entry; the loop reads them as the full arrays. The same run with the full arrays written out gives the
    # same timeline, bit for bit. The Program's rank and stream columns (read-only) are read as they are.
    import numpy as np

    G = lower(load_schedule(ROOT / "benchmarks/data/overlap_gen.yaml", {"world_size": 4, "chunks": 16}))
    calls: list[tuple] = []
    real_run = _cwaves.run

    def run(ints, floats, arrays, *share):  # type: ignore[no-untyped-def]
        N, K = ints[0], ints[1]
        full = _full_forms(arrays, N, K)  # before the loop writes its state
        got = real_run(ints, floats, arrays, *share)
        calls.append((arrays, full, real_run(ints, floats, tuple(full), *share), got))
        return got

    monkeypatch.setattr(_cwaves, "run", run)
    tl = simulate(G, load_profile("h200"), gpu_model="waves")
    assert tl.makespan_s > 0 and calls
    arrays, full, jobs_full, jobs = calls[0]
    assert [len(arrays[k]) for k in (_KERN, _KPTR, _KIDX, _KNEED, _KWAIT)] == [0, 0, 0, 1, 1]  # compact here
    # the solo times per template (a GEMM's and an all_reduce's), each op's through its template; no copy queues
    assert len(arrays[_WORK]) == 2 and len(arrays[_OTMPL]) == len(arrays[7]) == 2 * 4 * 16 and len(arrays[_CQNEXT]) == 0
    assert len(arrays[_GRANKS_IDX]) == 0 and len(full[_GRANKS_IDX]) == len(arrays[_GMEM_IDX]) == 4 * 16
    assert len(arrays[_SPTR]) == 2 * 16 + 1 and len(full[_SPTR]) == 4 * 2 * 16 + 1  # one rank's of 4
    assert len(full[_SIDX]) == 4 * len(arrays[_SIDX])
    assert len(arrays[_KTAIL]) == 1 and len(arrays[_KTTAU]) == 1 and len(arrays[_KMEM]) == 1
    # the GEMMs' wave time and fill gain: one entry, though the all_reduces' kernels (never read) hold others
    assert len(arrays[_KTAU]) == 1 and len(arrays[_KGAIN]) == 1
    assert np.shares_memory(arrays[7], G.rank) and np.shares_memory(arrays[6], G.stream_id)  # read-only inputs
    assert jobs == jobs_full
    for k in range(38, 44):  # start, end, ready_t, deps_t, khand, binding
        assert np.array_equal(arrays[k].view(np.uint8), full[k].view(np.uint8)), k


def test_the_loop_refuses_inconsistent_compact_buffers(monkeypatch):
    import numpy as np

    G = lower(load_schedule(ROOT / "benchmarks/data/overlap_gen.yaml", {"world_size": 2, "chunks": 4}))
    bad_forms = {"one kernel map empty": lambda a, N, K: a.__setitem__(_KERN, np.arange(N, dtype=np.int32)),
                 "a one-entry ktail not 0": lambda a, N, K: a.__setitem__(_KTAIL, np.ones(1, np.int32)),
                 "a one-entry kneed not 1": lambda a, N, K: a.__setitem__(_KNEED, np.full(1, 2, np.int32)),
                 "a template index past the solo times": lambda a, N, K: a.__setitem__(_OTMPL, np.full(N, len(a[_WORK]),
                                                                                                       np.int32)),
                 "a template index for some ops": lambda a, N, K: a.__setitem__(_OTMPL, np.zeros(N - 1, np.int32)),
                 "no copy queue links for a copy": lambda a, N, K: a.__setitem__(_KTYPE, np.full(K, 2, np.int32)),
                 "group ranks by other pointers": lambda a, N, K: a.__setitem__(_GRANKS_PTR, a[_GRANKS_PTR][:-1]),
                 "a successor past rank 0's ops": lambda a, N, K: a.__setitem__(_SIDX, a[_SIDX] + N // 2),
                 "rank 0's rows for a rank of fewer ops": lambda a, N, K: a.__setitem__(_ORANK, np.where(
                     np.arange(N) == N // 2, 0, a[_ORANK]).astype(np.int32))}
    real_run = _cwaves.run
    for _why, spoil in bad_forms.items():
        def run(ints, floats, arrays, *share, spoil=spoil):  # type: ignore[no-untyped-def]
            a = list(arrays)
            spoil(a, ints[0], ints[1])
            return real_run(ints, floats, tuple(a), *share)

        monkeypatch.setattr(_cwaves, "run", run)
        refused = "kern, kops_ptr and kops_idx|identity kernel map|otmpl|cqnext|granks|successor CSR"
        with pytest.raises(ValueError, match=refused):
            simulate(G, load_profile("h200"), gpu_model="waves")
        monkeypatch.setattr(_cwaves, "run", real_run)
