"""Rule graph-forks (a fork in a CUDA graph) on two ranks with a collective, a singleton collective and a send/recv
pair: every path (Program columns through the compiled loop, the Program and the networkx DAG through the Python
loop) charges ``launch.graph_cross_stream_edge_us`` to the compute ops with a dependent on another stream of
their rank, and nothing to collectives, p2p or ops whose dependents share their stream."""

from __future__ import annotations

import pytest

from schedsim.gpu.cost import CostModel
from schedsim.graph.build import graph_of
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text
from tests.oracle.engine import simulate_reference

SCHED = """
schema_version: 1
name: forks2
world_size: 2
launch: cuda_graph
ops:
  - {name: mm, kind: matmul, m: 1024, n: 1024, k: 1024, dtype: bf16, stream: main, ranks: [0, 1]}
  - {name: ar, kind: all_reduce, bytes: 1048576, stream: comm, deps: [mm], ranks: [0, 1]}
  - {name: one, kind: all_reduce, bytes: 1048576, stream: comm, deps: [ar], ranks: [0], group: [0]}
  - {name: post, kind: compute, bytes: 1048576, stream: main, deps: [one], ranks: [0]}
  - {name: s, kind: send, bytes: 1048576, stream: p2p, peer: 1, deps: [post], ranks: [0]}
  - {name: r, kind: recv, bytes: 1048576, stream: p2p, peer: 0, ranks: [1]}
  - {name: use, kind: compute, bytes: 1048576, stream: main, deps: [r], ranks: [1]}
"""


@pytest.mark.parametrize("path", ["program-compiled", "program-python", "networkx-python"])
def test_forks_on_two_ranks_by_hand(monkeypatch, path):
    prog = lower(load_text(SCHED))
    G = graph_of(prog) if path.startswith("networkx") else prog
    sim = simulate if path == "program-compiled" else simulate_reference
    prof = load_profile("h200x2").model_copy(update={"power": None})
    edge = prof.launch.graph_cross_stream_edge_us * 1e-6  # 1.18 us
    table = {o.id: CostModel(prof).duration(o) for o in prog.ops()}  # graph_per_op_us is 0 on h200x2
    # forks: mm on both ranks (ar on comm waits for it), post@r0 (s on p2p waits for it); ar, one, s, r are
    # collectives / p2p (left as they are); use@r1 has no dependent
    forks = {"mm@r0", "mm@r1", "post@r0"}
    solo = {s.id: s.solo_s for s in sim(G, prof).spans}
    assert solo == pytest.approx({k: t + (edge if k in forks else 0.0) for k, t in table.items()}, abs=1e-12)
