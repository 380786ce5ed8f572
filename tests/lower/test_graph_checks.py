"""DAG construction and static checks (section 3): each error with its message."""

from __future__ import annotations

import pytest

from schedsim.errors import CycleError, DeadlockError, GraphError
from schedsim.graph.build import build_graph
from schedsim.graph.ops import format_op_id, parse_op_id
from schedsim.spec.loader import load_text

HEAD = "schema_version: 1\nname: t\nworld_size: 2\nops:\n"


def graph(ops: str):
    return build_graph(load_text(HEAD + ops, "g.yaml"))


def test_op_id_round_trip():
    for name, rank in [("mm3", 0), ("a.b-c[2]", 17), ("x@y", 1)]:
        assert parse_op_id(format_op_id(name, rank)) == (name, rank)
    with pytest.raises(ValueError, match="name@rN"):
        parse_op_id("mm3")


def test_edges_and_rendezvous():
    G = graph("  - {name: a, kind: compute, duration_us: 1}\n"
              "  - {name: b, kind: compute, duration_us: 1, stream: s2, deps: [a]}\n"
              "  - {name: c, kind: compute, duration_us: 1}\n"
              "  - {name: ar, kind: all_reduce, bytes: 64, deps: [b]}\n")
    assert G.edges["a@r0", "c@r0"]["kind"] == "stream"
    assert G.edges["a@r0", "b@r0"]["kind"] == "dep"
    assert list(G.graph["collectives"].values()) == [["ar@r0", "ar@r1"]]
    assert list(G.nodes)[:4] == ["a@r0", "b@r0", "c@r0", "ar@r0"]


def test_cycle_lists_ops():
    with pytest.raises(CycleError) as e:
        graph("  - {name: a, kind: compute, duration_us: 1, stream: x, deps: [b]}\n"
              "  - {name: b, kind: compute, duration_us: 1, stream: y, deps: [a]}\n")
    assert "a@r0" in str(e.value) and "b@r0" in str(e.value) and set(e.value.cycle) >= {"a@r0", "b@r0"}


def test_dependency_on_later_op_on_same_stream_is_a_cycle():
    with pytest.raises(CycleError, match="through stream order"):
        graph("  - {name: a, kind: compute, duration_us: 1, deps: [b]}\n"
              "  - {name: b, kind: compute, duration_us: 1}\n")


def test_missing_dependency():
    with pytest.raises(GraphError, match="depends on 'nope', which does not exist on rank 0"):
        graph("  - {name: a, kind: compute, duration_us: 1, deps: [nope]}\n")


def test_missing_dependency_suggests_spelling():
    with pytest.raises(GraphError, match="did you mean 'alpha'"):
        graph("  - {name: alpha, kind: compute, duration_us: 1}\n"
              "  - {name: b, kind: compute, duration_us: 1, deps: [alpah]}\n")


def test_cross_rank_dependency_explained():
    with pytest.raises(GraphError, match=r"exists only on rank\(s\) \[1\]"):
        graph("  - {name: a, kind: compute, duration_us: 1, ranks: [1]}\n"
              "  - {name: b, kind: compute, duration_us: 1, ranks: [0], deps: [a]}\n")


PER_RANK = """\
  - foreach: {r: [0, 1]}
    ops:
      - {name: x, kind: all_reduce, bytes: 8, ranks: ["{r}"], group: [0, 1], when: r == 0}
      - {name: y, kind: all_reduce, bytes: 8, ranks: ["{r}"], group: [0, 1]}
      - {name: x, kind: all_reduce, bytes: 8, ranks: ["{r}"], group: [0, 1], when: r == 1}
"""


def test_per_rank_collectives_in_swapped_order():
    with pytest.raises(DeadlockError) as e:
        graph(PER_RANK)
    msg = str(e.value)
    assert "rank 0 issues 'x' as its collective #0 but rank 1 issues 'y'" in msg and "group [0, 1]" in msg


def test_per_rank_collectives_in_same_order_form_one_collective():
    G = graph(PER_RANK.replace("when: r == 1", "when: false").replace("when: r == 0", "when: true"))
    assert sorted(G.graph["collectives"].values()) == [["x@r0", "x@r1"], ["y@r0", "y@r1"]]


def test_collective_missing_on_a_rank():
    with pytest.raises(DeadlockError, match=r"issued on rank\(s\) \[0\] but never on rank\(s\) \[1\]"):
        graph("  - {name: x, kind: all_reduce, bytes: 8, ranks: [0], group: [0, 1]}\n")


def test_rank_order_mismatch_detected():
    import networkx as nx

    from schedsim.graph.ops import Op
    from tests.oracle.graph_checks import check_collective_order

    G = nx.DiGraph()
    ops = [Op(name="x", rank=0, kind="all_reduce", stream="c", seq=0, group=(0, 1)),
           Op(name="y", rank=0, kind="all_reduce", stream="c", seq=1, group=(0, 1)),
           Op(name="y", rank=1, kind="all_reduce", stream="c", seq=0, group=(0, 1)),
           Op(name="x", rank=1, kind="all_reduce", stream="c", seq=1, group=(0, 1))]
    for o in ops:
        G.add_node(o.id, op=o)
    G.graph["collectives"] = {"x#0": ["x@r0", "x@r1"], "y#1": ["y@r0", "y@r1"]}
    with pytest.raises(DeadlockError) as e:
        check_collective_order(G)
    msg = str(e.value)
    assert "rank 0 issues 'x'" in msg and "rank 1 issues 'y'" in msg and "group [0, 1]" in msg


def test_unmatched_send_and_recv():
    with pytest.raises(DeadlockError, match=r"unmatched send s2@r0: rank 0 sends 2 message\(s\) to rank 1"):
        graph("  - {name: s1, kind: send, ranks: [0], peer: 1, bytes: 8}\n"
              "  - {name: s2, kind: send, ranks: [0], peer: 1, bytes: 8}\n"
              "  - {name: r1, kind: recv, ranks: [1], peer: 0, bytes: 8}\n")
    with pytest.raises(DeadlockError, match="unmatched recv r1@r1"):
        graph("  - {name: r1, kind: recv, ranks: [1], peer: 0, bytes: 8}\n")


def test_send_recv_size_mismatch():
    with pytest.raises(DeadlockError, match="sizes differ"):
        graph("  - {name: s, kind: send, ranks: [0], peer: 1, bytes: 8}\n"
              "  - {name: r, kind: recv, ranks: [1], peer: 0, bytes: 16}\n")


def test_cross_rank_wait_cycle():
    # both ranks receive first, on the same stream, then send: a classic p2p deadlock
    with pytest.raises(DeadlockError, match="wait on each other"):
        graph("  - {name: r_a, kind: recv, ranks: [0], peer: 1, bytes: 8}\n"
              "  - {name: s_a, kind: send, ranks: [0], peer: 1, bytes: 8}\n"
              "  - {name: r_b, kind: recv, ranks: [1], peer: 0, bytes: 8}\n"
              "  - {name: s_b, kind: send, ranks: [1], peer: 0, bytes: 8}\n")
