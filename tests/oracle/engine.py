"""Oracle: ``simulate`` as the engine ran it before it took one road, the ``waves`` model on per-op lists in the
Python loop (:mod:`tests.oracle.waves_loop`), fed from a networkx graph or a Program
(:func:`tests.oracle.graph_feed.compile_graph`). The package's :func:`schedsim.sim.engine.simulate` runs the
Program's columns in the compiled loop; :mod:`tests.oracle.test_differential` holds their timelines bit-identical.

Only the loop and the feed are the oracle's own: the timeline assembly, the power fixed point, the kernel gaps and
the imported-NCCL resource are the package's, called the way the engine calls them.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from schedsim._gc import paused_gc
from schedsim.errors import DeadlockError, ProfileError
from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile
from schedsim.lower.program import Program
from schedsim.sim import engine
from schedsim.sim.loop import _State
from schedsim.sim.timeline import Timeline
from tests.oracle.graph_feed import compile_graph
from tests.oracle.waves_loop import run_waves

__all__ = ["simulate_reference"]


def simulate_reference(G: nx.DiGraph | Program, profile: HardwareProfile, *, launch: str | None = None,
                       max_connections: int | None = None, model_executor: bool = False,
                       iteration_gap_s: float = 0.0, sustained_s: float | None = None) -> Timeline:
    """The ``waves`` timeline of ``G`` on ``profile`` from the Python loop (arguments as
    :func:`schedsim.sim.engine.simulate`'s, ``gpu_model`` fixed to ``waves``).

    Raises DeadlockError (a hang), GraphError (a rank outside the world, a bad solo time) and ProfileError
    (``max_connections`` outside 1-32), as the engine does.
    """
    info = G.graph_info(lazy_order=True) if isinstance(G, Program) else G.graph
    mode = launch or info.get("launch", "eager")
    conns = max_connections or info.get("max_connections")
    if conns is not None and not 1 <= int(conns) <= 32:
        raise ProfileError(f"CUDA_DEVICE_MAX_CONNECTIONS must be 1-32 (got {conns})", fix="pick a value in 1-32")
    assert math.isfinite(iteration_gap_s) and iteration_gap_s >= 0

    def once(p: HardwareProfile) -> Timeline:
        with paused_gc():
            c = compile_graph(G, p, mode)
            st, note = _run(G, p, mode, c, conns, model_executor)
            tl = engine._timeline(info, p, mode, c, st)
            if note:
                tl.meta["warnings"] = [note]
            return tl

    if profile.power is not None and profile.power.gemm_slowdown_by_duty:
        from schedsim.gpu.power import steady_state

        tl = steady_state(once, profile, iteration_gap_s, repeat=_per_op(G, lambda o: o.repeat, np.int64),
                          sustained_s=sustained_s)
    else:
        tl = once(profile)
    if mode == "eager":
        table = _per_op(G, lambda o: o.kind in ("matmul", "compute") and o.duration_s is None, bool)
        engine.kernel_gaps(tl, table, profile.launch.kernel_gap_s)
    engine.recorded_nccl_is_comm(tl)
    return tl


def _run(G: nx.DiGraph | Program, profile: HardwareProfile, mode: str, c, conns: int | None,  # type: ignore[no-untyped-def]
         model_executor: bool) -> tuple[_State, str]:
    """The Python ``waves`` run; if serializing lone send/recv on their communicator hangs, rerun without it."""
    try:
        return run_waves(c, profile, mode, max_connections=conns, model_executor=model_executor), ""
    except DeadlockError as e:
        if not profile.nccl.unbatched_p2p_serialized or not (len(G.p2p) if isinstance(G, Program)
                                                             else G.graph.get("p2p")):
            raise
        c = compile_graph(G, profile, mode)
        st = run_waves(c, profile, mode, max_connections=conns, model_executor=model_executor, p2p_serialized=False)
        return st, engine._p2p_hang_note(e)


def _per_op(G: nx.DiGraph | Program, field, dtype) -> np.ndarray:  # type: ignore[no-untyped-def]
    """``field(op)`` per op in the timeline's span order (shape (N,))."""
    ops: list[Op] = G.ops() if isinstance(G, Program) else [d["op"] for d in G._node.values()]
    return np.array([field(o) for o in ops], dtype) if ops else np.zeros(0, dtype)


def simulate_any(G: nx.DiGraph | Program, profile: HardwareProfile, *, gpu_model: str | None = None,
                 **kw) -> Timeline:  # type: ignore[no-untyped-def]
    """A Program through the package's :func:`~schedsim.sim.engine.simulate`; a networkx graph through the oracle
    (:func:`simulate_reference`, the ``waves`` model only), for tests that hold a rule on both."""
    if isinstance(G, Program):
        return engine.simulate(G, profile, gpu_model=gpu_model, **kw)
    assert (gpu_model or profile.gpu_model) == "waves", "the oracle runs the waves model only"
    return simulate_reference(G, profile, **kw)
