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
from schedsim.sim import waves
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_schedule, parse_overrides
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
    monkeypatch.setattr(waves, "_EXT", [_cwaves])
    fast = outcome(G, profile, **kw)
    monkeypatch.setattr(waves, "_EXT", [None])
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


def random_dag(seed: int) -> nx.DiGraph:
    """1-4 ranks, up to 14 steps; each step is compute on some ranks (GEMMs of 1 to many waves, memory-bound
    kernels, fixed-duration kernels, copies) on random streams with random extra dependencies on earlier
    ops of the rank, a collective over a random group, a lone send/recv, or a batched exchange. Rendezvous
    ops are issued in one global order; hardware queues and dependencies can still make it hang."""
    rng = random.Random(seed)
    world = rng.randint(1, 4)
    G = nx.DiGraph(name=f"gen{seed}", world_size=world, launch="eager")
    prog: list[list[str]] = [[] for _ in range(world)]
    last: dict[tuple[int, str], str] = {}
    colls: dict[str, list[str]] = {}
    p2p: list[tuple[str, str]] = []

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

    for s in range(rng.randint(1, 14)):
        roll = rng.random()
        if roll < 0.5 or world == 1:
            for r in rng.sample(range(world), rng.randint(1, world)):
                stream, seq, c = rng.choice(("s0", "s1", "s2")), len(prog[r]), rng.randint(0, 4)
                if c == 0:
                    n = rng.choice((128, 1024, 8192))
                    op = Op(f"o{s}", r, "matmul", stream, seq, m=n, n=n, k=1024, dtype="bf16", flops=2.0 * n * n * 1024)
                elif c == 1:
                    op = Op(f"o{s}", r, "compute", stream, seq, nbytes=float(rng.choice((1 << 16, 1 << 26))))
                elif c == 2:
                    op = Op(f"o{s}", r, "compute", stream, seq, duration_s=rng.choice((1e-6, 5e-5)))
                else:
                    op = Op(f"o{s}", r, "memcpy", stream, seq, nbytes=float(1 << 22),
                            direction=rng.choice(("h2d", "d2h", "d2d")))
                add(op)
        elif roll < 0.75:
            group = tuple(sorted(rng.sample(range(world), rng.randint(2, world))))
            kind, nb = rng.choice(("all_reduce", "all_gather")), float(rng.choice((1 << 10, 1 << 24)))
            colls[f"o{s}"] = [add(Op(f"o{s}", r, kind, rng.choice(("c0", "c1")), len(prog[r]), group=group,
                                     nbytes=nb, dtype="bf16")) for r in group]
        else:
            a, b = rng.sample(range(world), 2)
            nb, stream = float(rng.choice((1 << 10, 1 << 24))), rng.choice(("c0", "p"))
            if rng.random() < 0.5:
                snd = add(Op(f"o{s}", a, "send", stream, len(prog[a]), group=(a, b), peer=b, nbytes=nb))
                p2p.append((snd, add(Op(f"o{s}", b, "recv", stream, len(prog[b]), group=(b, a), peer=a, nbytes=nb))))
            else:  # batch_isend_irecv on both sides: a's send and recv are one kernel, b's too
                kw = {"nbytes": nb, "p2p_batch": f"x{s}"}
                s_a = add(Op(f"o{s}s", a, "send", stream, len(prog[a]), group=(a, b), peer=b, **kw))
                r_a = add(Op(f"o{s}r", a, "recv", stream, len(prog[a]), group=(a, b), peer=b, **kw), s_a)
                r_b = add(Op(f"o{s}r", b, "recv", stream, len(prog[b]), group=(b, a), peer=a, **kw))
                s_b = add(Op(f"o{s}s", b, "send", stream, len(prog[b]), group=(b, a), peer=a, **kw), r_b)
                p2p += [(s_a, r_b), (s_b, r_a)]
    G.graph["collectives"] = colls
    G.graph["p2p"] = p2p
    return G


@needs_ext
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), prof=st.sampled_from(["h200", "h200x2", "pcie2"]),
       conns=st.sampled_from([None, 1, 2]), launch=st.sampled_from(["eager", "cuda_graph"]))
def test_compiled_loop_matches_python_on_generated_dags(monkeypatch, seed, prof, conns, launch):
    G = random_dag(seed)
    fast, ref = both(monkeypatch, G, load_profile(prof), max_connections=conns, launch=launch)
    assert fast == ref


def test_without_the_extension_the_python_loop_runs_and_says_so(monkeypatch, capsys):
    monkeypatch.setenv("SCHEDSIM_NO_EXT", "1")
    monkeypatch.setattr(waves, "_EXT", [])
    assert waves.compiled_loop() is None
    assert waves.compiled_loop() is None  # looked up once: one line per process
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Python event loop" in err and "SCHEDSIM_NO_EXT" in err
    # and it simulates: two wave-filling GEMMs on two streams run one after the other (test_gpu_model.py)
    G = build_graph(load_schedule(ROOT / "schedules" / "matmul_streams.yaml"))
    tl = simulate(G, load_profile("h200x2"), gpu_model="waves")
    assert tl.makespan_s > 0 and waves._EXT == [None]


def test_a_gpu_of_thousands_of_sms_runs_in_the_python_loop(monkeypatch):
    # the compiled loop reads a (sms + 1) x (sms // nccl_sms + 1) table: past MAX_TABLE entries it is not built
    from schedsim.sim import gpu_model as gm

    d = load_profile("h200x2").model_dump()
    d["gpu"]["sms"], d["nccl"]["sms_per_collective"] = 4096, 1
    from schedsim.hardware.profile import HardwareProfile

    big = HardwareProfile.model_validate(d)
    assert gm.rate_tables(gm.GpuRules.from_profile(big)) is None
    assert gm.rate_tables(gm.GpuRules.from_profile(load_profile("h200x2"))) is not None
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
        monkeypatch.setattr(waves, "_EXT", ext)
        with pytest.raises(GraphError, match=rf"a@r{rank}.*rank {rank}.*world_size is {world}"):
            simulate(one_op_graph(world, rank, 1e-6), load_profile("h200"), gpu_model=gpu_model)


@pytest.mark.parametrize("gpu_model", ["waves", "sharing"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1e-6])
def test_a_non_finite_or_negative_duration_is_a_graph_error(monkeypatch, gpu_model, bad):
    # was: NaN/inf spread through the timeline silently; -1e-6 ended before it started, read as a deadlock of a
    # compute op "waiting for its peers"
    from schedsim.errors import GraphError

    for ext in ([_cwaves], [None]):
        monkeypatch.setattr(waves, "_EXT", ext)
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

    monkeypatch.setattr(waves, "_EXT", [_cwaves])
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
        assert _cwaves.LAYOUT == waves._LAYOUT  # the built one is current
    stale = types.ModuleType("schedsim.sim._cwaves")
    stale.run = lambda *a: 0  # type: ignore[attr-defined]  # an older build: no LAYOUT, or another one
    for layout in (None, waves._LAYOUT - 1):
        if layout is not None:
            stale.LAYOUT = layout  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "schedsim.sim._cwaves", stale)
        monkeypatch.setattr(schedsim.sim, "_cwaves", stale, raising=False)
        monkeypatch.delenv("SCHEDSIM_NO_EXT", raising=False)
        monkeypatch.setattr(waves, "_EXT", [])
        assert waves.compiled_loop() is None
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Python event loop" in err and "out of date" in err and "build_ext" in err
