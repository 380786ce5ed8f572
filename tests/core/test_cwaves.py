"""The compiled ``waves`` loop (schedsim/sim/_cwaves.c) against the Python one (the reference): identical
timelines, bit for bit (start, end, ready and stream-reached times, solo durations, critical path, warnings,
and the same error when a schedule hangs), on every shipped schedule, on generated DAGs and on a large
pipeline; and the fallback to the Python loop when the extension is off.
"""

from __future__ import annotations

import glob
import itertools
import random

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedsim.errors import SchedsimError
from schedsim.graph.build import build_graph
from schedsim.graph.ops import Op
from schedsim.hardware.profile import load_profile
from schedsim.kinds import COLLECTIVE_KINDS
from schedsim.sim import loop
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_schedule
from schedsim.spec.overrides import parse_overrides
from tests.conftest import ROOT

try:
    from schedsim.sim import _cwaves  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install): only the fallback test runs
    _cwaves = None

needs_ext = pytest.mark.skipif(_cwaves is None, reason="schedsim.sim._cwaves is not built (pip install -e .)")
SHIPPED = sorted(glob.glob(str(ROOT / "schedules" / "*.yaml"))) + [str(ROOT / "tests" / "data" / "pp_unit.yaml")]


def outcome(G: nx.DiGraph, profile, **kw) -> object:  # type: ignore[no-untyped-def]
    """Everything a timeline says per op, or the error raised."""
    try:
        tl = simulate(G, profile, gpu_model="waves", **kw)
    except SchedsimError as e:
        return type(e).__name__, str(e)
    return ([(s.id, s.start_s, s.end_s, s.ready_s, s.stream_s, s.solo_s) for s in tl.spans], tl.critical_path,
            tl.meta.get("warnings"))


def both(monkeypatch: pytest.MonkeyPatch, G: nx.DiGraph, profile, **kw) -> tuple[object, object]:  # type: ignore[no-untyped-def]
    """(compiled, Python) outcomes of one simulation."""
    monkeypatch.setattr(loop, "_EXT", [_cwaves])
    fast = outcome(G, profile, **kw)
    monkeypatch.setattr(loop, "_EXT", [None])
    return fast, outcome(G, profile, **kw)


@needs_ext
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.rsplit("/", 1)[-1])
def test_compiled_loop_matches_python_on_every_shipped_schedule(monkeypatch, path):
    G = build_graph(load_schedule(path))
    small = G.number_of_nodes() < 2000  # the two Megatron schedules: one setting, to keep the test short
    for prof in ("h200", "h200x2") if small else ("h200x2",):
        for kw in ({}, {"launch": "cuda_graph"}, {"max_connections": 1}) if small else ({},):
            fast, ref = both(monkeypatch, G, load_profile(prof), **kw)
            assert isinstance(ref, tuple) and isinstance(ref[0], list) and ref[0], (prof, kw, ref)
            assert fast == ref, (prof, kw)


@needs_ext
def test_compiled_loop_matches_python_on_a_large_pipeline(monkeypatch):
    # interleaved 1F1B (lone send/recv, serialized per communicator) and 1F1B (batched exchanges), 16 stages
    for sched in ("interleaved_1f1b", "1f1b"):
        spec = load_schedule(ROOT / "schedules" / "pipeline_schedules.yaml",
                             parse_overrides(["p=16", "m=16", f"schedule={sched}"]))
        G = build_graph(spec)
        assert G.number_of_nodes() > 1500
        fast, ref = both(monkeypatch, G, load_profile("h200x2"))
        assert fast == ref


def compute_op(rng: random.Random, name: str, r: int, stream: str, seq: int, nb: float) -> Op:
    """A GEMM (batched, repeated), a memory-bound, FLOP-only or fixed-duration (0 s included) kernel, or a copy."""
    c, rep = rng.randint(0, 5), rng.choice((1, 1, 3))
    if c == 0:
        n, bt = rng.choice((128, 1024, 8192)), rng.choice((1, 4))
        return Op(name, r, "matmul", stream, seq, m=n, n=n, k=1024, batch=bt, dtype="bf16",
                  flops=2.0 * bt * n * n * 1024, repeat=rep, host_s=rng.choice((0.0, 1e-5)))
    if c == 1:
        return Op(name, r, "compute", stream, seq, nbytes=float(rng.choice((1 << 16, 1 << 26))), repeat=rep)
    if c == 2:
        return Op(name, r, "compute", stream, seq, duration_s=rng.choice((0.0, 1e-6, 5e-5)), repeat=rep)
    if c == 3:
        return Op(name, r, "compute", stream, seq, flops=rng.choice((0.0, 1e9)), dtype="fp32",
                  nbytes=rng.choice((0.0, 1e6)), repeat=rep)
    return Op(name, r, "memcpy", stream, seq, nbytes=nb / 4, direction=rng.choice(("h2d", "d2h", "d2d")))


def random_dag(seed: int) -> nx.DiGraph:  # noqa: C901 (a table of cases)
    """1-5 ranks, up to 16 steps; each step is compute on some ranks (GEMMs of 1 to many waves, batched and
    repeated, memory-bound kernels, FLOP-only kernels, fixed-duration kernels of 0 s and more, copies in each
    direction, 0 bytes included) on random streams (up to 12 per rank: more than the hardware queues), with
    random extra dependencies on earlier ops of the rank and some host time; a collective of any kind over a
    random group (one rank included, 0 bytes included); a lone send/recv; or a batched exchange. Rendezvous ops
    are issued in one global order, except for crossed pairs (two ranks reach two collectives, or a lone
    send/recv pair each way, in opposite orders): those hang, and crossed lone send/recv are rerun without
    their communicator's order (engine._run_waves). Hardware queues and dependencies can also make it hang."""
    rng = random.Random(seed)
    world = rng.randint(1, 5)
    G = nx.DiGraph(name=f"gen{seed}", world_size=world, launch="eager")
    prog: list[list[str]] = [[] for _ in range(world)]
    last: dict[tuple[int, str], str] = {}
    colls: dict[str, list[str]] = {}
    p2p: list[tuple[str, str]] = []
    streams = [f"s{i}" for i in range(rng.choice((2, 3, 12)))]

    def add(op: Op, mate: str | None = None) -> str:
        """Add ``op`` after the rank's earlier ops; the second op of a batch (``mate`` = the first) gets the
        first's dependencies instead (a group launch posts its members together: no edge between them)."""
        G.add_node(op.id, op=op)
        if mate is not None:
            for d in G.predecessors(mate):
                G.add_edge(d, op.id, kind=G.edges[d, mate]["kind"])
            prog[op.rank].append(op.id)
            return op.id
        prev = last.get((op.rank, op.stream))
        if prev:
            G.add_edge(prev, op.id, kind="stream")
        last[(op.rank, op.stream)] = op.id
        earlier = prog[op.rank]
        for d in rng.sample(earlier, min(len(earlier), rng.choice((0, 0, 1, 2)))):
            G.add_edge(d, op.id, kind="dep")
        earlier.append(op.id)
        return op.id

    def coll(name: str, kind: str, group: tuple[int, ...], nb: float, stream: str, r: int) -> str:
        root = group[0] if kind in ("broadcast", "reduce", "scatter", "gather") else None
        op = Op(name, r, kind, stream, len(prog[r]), group=group, root=root, nbytes=nb, dtype="bf16",
                host_s=rng.choice((0.0, 0.0, 1e-5)))
        colls.setdefault(name, []).append(add(op))
        return op.id

    def lone(name: str, a: int, b: int, nb: float, stream: str) -> tuple[str, str]:
        snd = add(Op(name, a, "send", stream, len(prog[a]), group=(a, b), peer=b, nbytes=nb))
        return snd, add(Op(name, b, "recv", stream, len(prog[b]), group=(b, a), peer=a, nbytes=nb))

    def exchange(name: str, a: int, b: int, nb: float, roll: float) -> None:
        """Crossed lone send/recv (sends and recvs on two streams: hangs only if serialized per communicator),
        a lone send/recv, or batch_isend_irecv on both sides (a's send and recv are one kernel, b's too)."""
        if roll < 0.85:
            ab_s = add(Op(f"{name}f", a, "send", "p", len(prog[a]), group=(a, b), peer=b, nbytes=nb))
            ba_s = add(Op(f"{name}g", b, "send", "p", len(prog[b]), group=(b, a), peer=a, nbytes=nb))
            ba_r = add(Op(f"{name}g", a, "recv", "q", len(prog[a]), group=(a, b), peer=b, nbytes=nb))
            ab_r = add(Op(f"{name}f", b, "recv", "q", len(prog[b]), group=(b, a), peer=a, nbytes=nb))
            p2p.extend([(ab_s, ab_r), (ba_s, ba_r)])
            return
        stream = rng.choice(("c0", "p", streams[-1]))
        if rng.random() < 0.5:
            p2p.append(lone(name, a, b, nb, stream))
            return
        kw = {"nbytes": nb, "p2p_batch": f"x{name}"}
        s_a = add(Op(f"{name}s", a, "send", stream, len(prog[a]), group=(a, b), peer=b, **kw))
        r_a = add(Op(f"{name}r", a, "recv", stream, len(prog[a]), group=(a, b), peer=b, **kw), s_a)
        r_b = add(Op(f"{name}r", b, "recv", stream, len(prog[b]), group=(b, a), peer=a, **kw))
        s_b = add(Op(f"{name}s", b, "send", stream, len(prog[b]), group=(b, a), peer=a, **kw), r_b)
        p2p.extend([(s_a, r_b), (s_b, r_a)])

    for s in range(rng.randint(1, 16)):
        roll = rng.random()
        nb = float(rng.choice((0, 1 << 10, 1 << 24)))
        if roll < 0.5 or world == 1 and roll < 0.8:
            for r in rng.sample(range(world), rng.randint(1, world)):
                add(compute_op(rng, f"o{s}", r, rng.choice(streams), len(prog[r]), nb))
        elif roll < 0.75 or world == 1:
            group = tuple(sorted(rng.sample(range(world), rng.randint(1, world))))
            kind, stream = rng.choice(COLLECTIVE_KINDS), rng.choice(("c0", "c1", streams[0]))
            for r in group:
                coll(f"o{s}", kind, group, nb, stream, r)
        elif roll < 0.8:  # crossed: rank a reaches x then y, rank b y then x (same communicator): a hang
            a, b = sorted(rng.sample(range(world), 2))
            for r, names in ((a, ("x", "y")), (b, ("y", "x"))):
                for x in names:
                    coll(f"o{s}{x}", "all_reduce", (a, b), nb, "c0", r)
        else:
            exchange(f"o{s}", *rng.sample(range(world), 2), nb, roll)
    G.graph["collectives"] = colls
    G.graph["p2p"] = p2p
    return G


PROFILES = ["h200", "h200x2", "pcie2", "rtx3090_pcie1x4", "h200_calibrated", str(ROOT / "tests/data/unit_profile.yaml")]


@needs_ext
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), prof=st.sampled_from(PROFILES), conns=st.sampled_from([None, 1, 2, 32]),
       launch=st.sampled_from(["eager", "cuda_graph"]), executor=st.booleans())
def test_compiled_loop_matches_python_on_generated_dags(monkeypatch, seed, prof, conns, launch, executor):
    G = random_dag(seed)
    fast, ref = both(monkeypatch, G, load_profile(prof), max_connections=conns, launch=launch,
                     model_executor=executor)
    assert fast == ref


def test_the_generated_dags_reach_every_outcome(monkeypatch):
    # the generator is worth its examples only if it reaches timelines, hangs (DeadlockError) and the rerun of
    # crossed lone send/recv without their communicator's order (a warning); counted over fixed seeds
    monkeypatch.setattr(loop, "_EXT", [None])
    seen = set()
    for seed in range(60):
        out = outcome(random_dag(seed), load_profile("h200"))
        seen.add(out[0] if isinstance(out[0], str) else "warning" if out[2] else "timeline")
    assert seen == {"timeline", "warning", "DeadlockError"}


def test_without_the_extension_the_python_loop_runs_and_says_so(monkeypatch, capsys):
    monkeypatch.setenv("SCHEDSIM_NO_EXT", "1")
    monkeypatch.setattr(loop, "_EXT", [])
    assert loop.compiled_loop() is None
    assert loop.compiled_loop() is None  # looked up once: one line per process
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Python event loop" in err and "SCHEDSIM_NO_EXT" in err
    # and it simulates: two wave-filling GEMMs on two streams run one after the other (test_gpu_model.py)
    G = build_graph(load_schedule(ROOT / "schedules" / "matmul_streams.yaml"))
    tl = simulate(G, load_profile("h200x2"), gpu_model="waves")
    assert tl.makespan_s > 0 and loop._EXT == [None]


def test_a_gpu_of_thousands_of_sms_runs_in_the_python_loop(monkeypatch):
    # the compiled loop reads a (sms + 1) x (sms // nccl_sms + 1) table: past MAX_TABLE entries it is not built
    from schedsim.gpu import rates as gr
    from schedsim.gpu import rules as gm

    d = load_profile("h200x2").model_dump()
    d["gpu"]["sms"], d["nccl"]["sms_per_collective"] = 4096, 1
    from schedsim.hardware.profile import HardwareProfile

    big = HardwareProfile.model_validate(d)
    assert gr.rate_tables(gm.GpuRules.from_profile(big)) is None
    assert gr.rate_tables(gm.GpuRules.from_profile(load_profile("h200x2"))) is not None
    G = build_graph(load_schedule(ROOT / "schedules" / "allgather_mm8.yaml"))
    fast, ref = both(monkeypatch, G, big)
    assert fast == ref and isinstance(ref, tuple) and ref[0]


@needs_ext
def test_compiled_loop_on_an_empty_graph(monkeypatch):
    G = nx.DiGraph(name="empty", world_size=2, launch="eager", collectives={}, p2p=[])
    fast, ref = both(monkeypatch, G, load_profile("h200"))
    assert fast == ref == ([], [], None)


def one_op_graph(world: int, rank: int, duration_s: float) -> nx.DiGraph:
    """A graph built through the API (no schema in between): one fixed-duration kernel on ``rank``."""
    G = nx.DiGraph(name="api", world_size=world, launch="eager", collectives={}, p2p=[])
    op = Op("a", rank, "compute", "s0", 0, duration_s=duration_s)
    G.add_node(op.id, op=op)
    return G


@pytest.mark.parametrize("gpu_model", ["waves", "sharing"])
@pytest.mark.parametrize(("world", "rank"), [(1, 3), (1, 1), (2, -1)])
def test_an_op_on_a_rank_outside_the_world_is_a_graph_error(monkeypatch, gpu_model, world, rank):
    # the compiled loop indexes per-rank arrays by rank: rank 3 of a world of 1 (or -1) wrote out of bounds
    # (a segfault), rank 1 of 1 ran, and the Python loop raised IndexError or wrapped -1 to the last rank
    from schedsim.errors import GraphError

    for ext in ([_cwaves], [None]):
        monkeypatch.setattr(loop, "_EXT", ext)
        with pytest.raises(GraphError, match=rf"a@r{rank}.*rank {rank}.*world_size is {world}"):
            simulate(one_op_graph(world, rank, 1e-6), load_profile("h200"), gpu_model=gpu_model)


@pytest.mark.parametrize("gpu_model", ["waves", "sharing"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1e-6])
def test_a_non_finite_or_negative_duration_is_a_graph_error(monkeypatch, gpu_model, bad):
    # was: NaN/inf spread through the timeline silently; -1e-6 ended before it started, read as a deadlock of a
    # compute op "waiting for its peers"
    from schedsim.errors import GraphError

    for ext in ([_cwaves], [None]):
        monkeypatch.setattr(loop, "_EXT", ext)
        with pytest.raises(GraphError, match=r"a@r0.*solo duration"):
            simulate(one_op_graph(1, 0, bad), load_profile("h200"), gpu_model=gpu_model)


def chain_graph(n: int) -> nx.DiGraph:
    """``n`` fixed-duration kernels one after the other on one stream of one rank."""
    G = nx.DiGraph(name="chain", world_size=1, launch="eager", collectives={}, p2p=[])
    ops = [Op(f"a{i}", 0, "compute", "s0", i, duration_s=1e-6) for i in range(n)]
    G.add_nodes_from((op.id, {"op": op}) for op in ops)
    G.add_edges_from(((a.id, b.id) for a, b in itertools.pairwise(ops)), kind="stream")
    return G


@needs_ext
def test_a_signal_reaches_python_while_the_compiled_loop_runs(monkeypatch):
    # Ctrl-C during a long predict: the loop runs without the GIL, and used to run Python's signal handlers only
    # once it had finished (seconds for 10M ops). Now it runs them every few thousand events, so a handler sees
    # the loop mid-way, and the exception it raises (KeyboardInterrupt) stops the run.
    import ctypes
    import functools
    import operator
    import signal

    monkeypatch.setattr(loop, "_EXT", [_cwaves])
    n = 20_000
    G = chain_graph(n)
    seen: list[int] = []
    real_run = _cwaves.run

    def run(ints, floats, arrays):  # type: ignore[no-untyped-def]
        end = arrays[-9]  # the `end` column (see _run_compiled), written by the loop as it goes
        assert len(end) == n

        def handler(signum, frame):  # type: ignore[no-untyped-def]
            seen.append(sum(1 for x in end if x >= 0.0))
            raise KeyboardInterrupt

        old = signal.signal(signal.SIGUSR1, handler)
        try:  # signal, then enter the loop, with no bytecode in between (where Python would run the handler;
            # libc's raise(), not os.kill or signal.pthread_kill, which run it at once)
            kill = functools.partial(getattr(ctypes.CDLL(None), "raise"), signal.SIGUSR1)
            return list(map(operator.call, [kill, functools.partial(real_run, ints, floats, arrays)]))[1]
        finally:
            signal.signal(signal.SIGUSR1, old)

    monkeypatch.setattr(_cwaves, "run", run)
    with pytest.raises(KeyboardInterrupt):
        simulate(G, load_profile("h200"), gpu_model="waves")
    assert len(seen) == 1 and 0 < seen[0] < n // 2, seen  # handled at the loop's first check: most ops left
    monkeypatch.setattr(_cwaves, "run", real_run)
    assert simulate(G, load_profile("h200"), gpu_model="waves").makespan_s > n * 1e-6  # and it runs again


def test_a_stale_build_of_the_extension_is_not_used(monkeypatch, capsys):
    # an editable checkout keeps its built _cwaves*.so across `git pull`: one built from an older _cwaves.c reads
    # its arguments in an older layout (a TypeError from simulate, or wrong arrays if only the order changed)
    import sys
    import types

    import schedsim.sim

    if _cwaves is not None:
        assert _cwaves.LAYOUT == loop._LAYOUT  # the built one is current
    stale = types.ModuleType("schedsim.sim._cwaves")
    stale.run = lambda *a: 0  # type: ignore[attr-defined]  # an older build: no LAYOUT, or another one
    for layout in (None, loop._LAYOUT - 1):
        if layout is not None:
            stale.LAYOUT = layout  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "schedsim.sim._cwaves", stale)
        monkeypatch.setattr(schedsim.sim, "_cwaves", stale, raising=False)
        monkeypatch.delenv("SCHEDSIM_NO_EXT", raising=False)
        monkeypatch.setattr(loop, "_EXT", [])
        assert loop.compiled_loop() is None
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Python event loop" in err and "out of date" in err and "build_ext" in err


@needs_ext
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=30))
def test_compiled_acyclic_matches_the_python_sweep(n, pairs):
    # the static checks' Kahn sweep in C (_cwaves.acyclic) against the Python one and networkx, on random
    # graphs with and without cycles (self-loops and repeated edges included)
    import numpy as np

    from schedsim.lower.checks import _acyclic_python

    e = np.array([(a % n, b % n) for a, b in pairs], np.int64).reshape(-1, 2)
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from(e.tolist())
    want = nx.is_directed_acyclic_graph(G)
    assert _cwaves.acyclic(n, np.ascontiguousarray(e[:, 0]), np.ascontiguousarray(e[:, 1])) is want
    e32 = e.astype(np.int32)  # the checks pass int32 node numbers
    assert _cwaves.acyclic(n, np.ascontiguousarray(e32[:, 0]), np.ascontiguousarray(e32[:, 1])) is want
    assert _acyclic_python(n, e) is want


@needs_ext
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


@needs_ext
def test_compiled_loop_matches_python_with_many_ranks_in_step(monkeypatch, tmp_path):
    # 96 ranks each running GEMMs of several CTA waves beside all_reduces over all of them: the batch ends come
    # in ascending key order (the compiled loop's lanes) while the transfers' rerated ends and the host's ready
    # times go out of order (its heap); the events must still come in the Python loop's order
    path = tmp_path / "dp.yaml"
    path.write_text("schema_version: 1\nname: dp\nworld_size: 96\nparams: {chunks: 3}\nops:\n"
                    "  - foreach: {i: range(chunks)}\n    ops:\n"
                    "      - {name: 'mm{i}', kind: matmul, m: 4096, n: 4096, k: 2048, dtype: bf16, stream: compute}\n"
                    "      - {name: 'ar{i}', kind: all_reduce, bytes: 8*2**20, stream: comm, deps: ['mm{i}']}\n")
    G = build_graph(load_schedule(path))
    fast, ref = both(monkeypatch, G, load_profile("h200x2"))
    assert isinstance(ref, tuple) and isinstance(ref[0], list) and len(ref[0]) == 96 * 6
    assert fast == ref
