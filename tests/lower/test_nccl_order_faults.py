"""Review of issue 9's NCCL ordering work: faults found by a breaker, each with the input that showed it."""

from __future__ import annotations

import pytest
from test_nccl_order import PIPE  # the batched interleaved 1F1B input of the issue

from schedsim.errors import DeadlockError
from schedsim.graph.build import build_graph
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text

RING = """schema_version: 1
name: ring_one_stream
world_size: 3
ops:
  - {name: s_next, kind: send, peer: "(rank + 1) % 3", bytes: 1048576, stream: p2p, ranks: [0, 1, 2], p2p_batch: x}
  - {name: s_prev, kind: send, peer: "(rank + 2) % 3", bytes: 1048576, stream: p2p, ranks: [0, 1, 2], p2p_batch: x}
  - {name: r_prev, kind: recv, peer: "(rank + 2) % 3", bytes: 1048576, stream: p2p, ranks: [0, 1, 2], p2p_batch: x}
  - {name: r_next, kind: recv, peer: "(rank + 1) % 3", bytes: 1048576, stream: p2p, ranks: [0, 1, 2], p2p_batch: x}
  - {name: after, kind: compute, duration_us: 10, stream: p2p, ranks: [0, 1, 2]}
"""


def test_rank_in_a_numeric_field_without_braces_instances_the_op_per_rank():
    """`peer: (rank + 1) % 3` is an expression (peer is numeric), so the op is instanced per rank."""
    G = build_graph(load_text(RING))
    assert {(G.nodes[f"s_next@r{r}"]["op"].peer, G.nodes[f"s_prev@r{r}"]["op"].peer) for r in range(3)} == {
        (1, 2), (2, 0), (0, 1)}


@pytest.mark.parametrize("model", ["waves"])
def test_a_batch_on_one_stream_is_one_launch_in_the_simulator(model):
    """Four members of one p2p_batch on one stream run as one group launch (no member waits for another);
    the op after the batch on that stream still waits for all of them."""
    G = build_graph(load_text(RING))
    assert not G.has_edge("s_next@r0", "s_prev@r0")  # members of one launch are not ordered
    assert all(G.has_edge(f"{x}@r0", "after@r0") for x in ("s_next", "s_prev", "r_prev", "r_next"))
    tl = simulate(lower(load_text(RING)), load_profile("h200"), gpu_model=model)
    sp = {s.id: s for s in tl.spans}
    for r in range(3):
        assert sp[f"after@r{r}"].start_s >= max(sp[f"{x}@r{r}"].end_s for x in ("s_next", "s_prev", "r_prev", "r_next"))




@pytest.mark.parametrize("p,v,m", [(3, 2, 6), (4, 2, 8), (4, 3, 4)])
def test_batched_interleaved_is_predicted_not_only_checked(p, v, m):
    """issue 9 §1's input passed `check` but `predict` hung: a steady-state batch holds two sends on stream
    pp_send, chained by stream order inside one kernel. Every F/I/W runs; makespan >= one rank's compute."""
    tl = simulate(lower(load_text(PIPE.format(p=p, v=v, m=m))), load_profile("h200"))
    computes = [s for s in tl.spans if s.kind == "compute"]
    assert len(computes) == 3 * p * v * m
    assert tl.makespan_s >= 3 * v * m * 100e-6


WHEN_GROUP = """schema_version: 1
name: when_rank_groups
world_size: 4
ops:
  - when: "rank < {upto}"
    ops:
      - {{name: ar, kind: all_reduce, bytes: 4096, stream: p, group: [0, 1]}}
      - {{name: x, kind: compute, duration_us: "{{1 + rank}}", stream: p, ranks: [1, 2]}}
  - foreach: {{i: range(2)}}
    when: "rank % 2 == 1"
    ops:
      - {{name: "odd{{i}}", kind: all_reduce, bytes: 64, stream: p, group: [1, 3]}}
  - {{name: mm, kind: compute, duration_us: 5, stream: p}}
"""


def test_when_with_rank_on_a_group_or_foreach_keeps_the_ops_on_the_ranks_that_take_it():
    G = build_graph(load_text(WHEN_GROUP.format(upto=2)))
    assert sorted(G.nodes) == ["ar@r0", "ar@r1", "mm@r0", "mm@r1", "mm@r2", "mm@r3",
                               "odd0@r1", "odd0@r3", "odd1@r1", "odd1@r3", "x@r1"]
    assert G.nodes["x@r1"]["op"].duration_s == pytest.approx(2e-6)
    assert G.has_edge("ar@r1", "x@r1") and G.has_edge("odd1@r1", "mm@r1")  # program order kept on the stream


def test_a_collective_in_a_when_group_only_some_ranks_take_is_a_hang():
    with pytest.raises(DeadlockError, match=r"issued on rank\(s\) \[0\] but never on rank\(s\) \[1\]"):
        build_graph(load_text(WHEN_GROUP.format(upto=1)))


def _tri(orders: dict[int, tuple[str, str]], same_stream: bool = False, init: str = "eager") -> str:
    groups = {"A": "[0, 1]", "B": "[1, 2]", "C": "[0, 2]"}
    out = f"schema_version: 1\nname: tri\nworld_size: 3\nnccl_init: {init}\nops:\n"
    for r, names in orders.items():
        for k, n in enumerate(names):
            st = "s" if same_stream else f"s{k}"
            out += f"  - {{name: {n}, kind: all_reduce, bytes: 1048576, stream: {st}, ranks: [{r}], group: {groups[n]}}}\n"
    return out


def test_three_communicators_in_a_cyclic_order_may_hang():
    """Pairwise each two communicators share one rank (rule 4 does not apply), but the orders form a cycle:
    created eagerly, a 'may hang' warning with the grid; one global order (A, B, C) gets none; on one stream it is
    a hang; created lazily (torch's default), these are each rank's first calls on them, which block its host
    until every rank of the communicator calls it: a hang (rule 6)."""
    cyc = {0: ("A", "C"), 1: ("B", "A"), 2: ("C", "B")}
    G = build_graph(load_text(_tri(cyc)))
    (w,) = [x for x in G.graph["warnings"] if "may hang" in x]
    assert "A[0,1] -> C[0,2] -> B[1,2] -> A[0,1]" in w and "fix:" in w and "*A" in w
    G = build_graph(load_text(_tri({0: ("A", "C"), 1: ("A", "B"), 2: ("B", "C")})))
    assert not [x for x in G.graph["warnings"] if "may hang" in x]
    with pytest.raises(DeadlockError):
        build_graph(load_text(_tri(cyc, same_stream=True)))
    with pytest.raises(DeadlockError, match="lazy creation"):
        build_graph(load_text(_tri(cyc, init="lazy")))


def _around(recv_batch: bool, sizes: tuple[int, int, int], rsizes: tuple[int, int, int]) -> str:
    """Rank 0: s1, s3 in one batch with a lone s2 written between them; rank 1: r1 r2 r3 (r1+r2 batched or not)."""
    b = ", p2p_batch: c" if recv_batch else ""
    out = "schema_version: 1\nname: around\nworld_size: 2\nops:\n"
    for k, (n, sz) in enumerate(zip(("s1", "s2", "s3"), sizes)):
        pb = ", p2p_batch: b" if k != 1 else ""
        out += f"  - {{name: {n}, kind: send, peer: 1, bytes: {sz}, stream: {'c' if k == 1 else 'a'}, ranks: [0]{pb}}}\n"
    for k, (n, sz) in enumerate(zip(("r1", "r2", "r3"), rsizes)):
        out += f"  - {{name: {n}, kind: recv, peer: 0, bytes: {sz}, stream: a, ranks: [1]{b if k < 2 else ''}}}\n"
    return out


def test_a_batch_is_paired_at_its_first_members_position():
    """NCCL meets the batch s1+s3 (posted at s1) before the lone s2 written between them."""
    with pytest.raises(DeadlockError, match="send s3@r0 .4096 B. is paired with recv r2@r1 .8192 B."):
        build_graph(load_text(_around(False, (4096, 8192, 4096), (4096, 8192, 4096))))  # accepted before
    G = build_graph(load_text(_around(True, (4096, 8192, 2048), (4096, 2048, 8192))))  # refused before
    assert sorted(G.graph["p2p"]) == [("s1@r0", "r1@r1"), ("s2@r0", "r3@r1"), ("s3@r0", "r2@r1")]


def test_a_dependency_inside_one_batch_is_refused():
    """check accepted it (the wait-for graph sees one unit), predict then hung on it and the executor ignored it."""
    from schedsim.errors import GraphError

    with pytest.raises(GraphError, match="both are in p2p_batch 'b'.*\\n  fix: remove the dependency"):
        build_graph(load_text("schema_version: 1\nname: bd\nworld_size: 2\nops:\n"
                              "  - {name: s, kind: send, peer: '{1 - rank}', bytes: 64, stream: a, p2p_batch: b}\n"
                              "  - {name: r, kind: recv, peer: '{1 - rank}', bytes: 64, stream: c, p2p_batch: b, deps: [s]}\n"))


# torch's runtime order for ZBVZeroBubble, p=2, m=2, as get_schedule_ops(..., with_comms=True) writes it (torch 2.13)
ZBV_TORCH_CSV = (
    "0UNSHARD,3UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,3RECV_F0,3F0,3I0,3SEND_B0,3RECV_F1,3W0,3F1,3I1,3SEND_B1,0RECV_B0,"
    "3W1,3REDUCE_GRAD,3RESHARD,0I0,0W0,0RECV_B1,0I1,0W1,0REDUCE_GRAD,0RESHARD\n"
    "1UNSHARD,2UNSHARD,1RECV_F0,1F0,1RECV_F1,2F0,2SEND_F0,1F1,2RECV_B0,2F1,2SEND_F1,2I0,2W0,2RECV_B1,1I0,1SEND_B0,"
    "1W0,2I1,2W1,2REDUCE_GRAD,2RESHARD,1I1,1SEND_B1,1W1,1REDUCE_GRAD,1RESHARD\n")


def test_a_torch_runtime_csv_with_unshard_reshard_reduce_grad_runs(tmp_path):
    """The bookkeeping actions (no microbatch) were expanded as a full backward 'B<stage>.None': a GraphError."""
    (tmp_path / "zbv.csv").write_text(ZBV_TORCH_CSV)
    y = tmp_path / "s.yaml"
    y.write_text("schema_version: 1\nname: zbv_csv\nworld_size: 2\npipeline:\n  schedule: custom\n  p: 2\n  m: 2\n"
                 "  csv: zbv.csv\n  placement: v\n  activation_bytes: 1024\n  stage:\n"
                 "    forward: [{name: f, kind: compute, duration_us: 10}]\n"
                 "    backward_input: [{name: i, kind: compute, duration_us: 10}]\n"
                 "    backward_weight: [{name: w, kind: compute, duration_us: 10}]\n")
    from schedsim.spec.loader import load_schedule

    G = build_graph(load_schedule(y, {}))
    assert len(G.graph["p2p"]) == 8  # SEND_F of stages 0 and 2, SEND_B of stages 1 and 3, 2 microbatches each
    assert sum(1 for n in G.nodes if ".None" in n) == 0
    assert len([n for n in G.nodes if G.nodes[n]["op"].kind == "compute"]) == 4 * 2 * 3
    simulate(lower(load_schedule(y, {})), load_profile("h200"))


def _custom(tmp_path, csv_text: str | None = None, actions: str | None = None):
    from schedsim.spec.loader import load_schedule

    src = "  csv: o.csv\n" if csv_text is not None else f"  actions: {actions}\n"
    if csv_text is not None:
        (tmp_path / "o.csv").write_text(csv_text)
    y = tmp_path / "s.yaml"
    y.write_text("schema_version: 1\nname: c\nworld_size: 2\npipeline:\n  schedule: custom\n  p: 2\n  m: 1\n" + src
                 + "  activation_bytes: 64\n  stage:\n    forward: [{name: f, kind: compute, duration_us: 1}]\n")
    return build_graph(load_schedule(y, {}))


def test_custom_stages_that_do_not_split_over_p_are_a_spec_error(tmp_path):
    """5 stages on p = 2 raised KeyError: 4 (a traceback through the CLI)."""
    from schedsim.errors import SpecError

    with pytest.raises(SpecError, match="5 stages, which do not split evenly over p=2") as e:
        _custom(tmp_path, actions='{0: "0F0 2F0 4F0 4B0 2B0 0B0", 1: "1F0 3F0 3B0 1B0"}')
    assert "fix: give the actions 4 or 6 stages" in str(e.value)


def test_a_csv_whose_rank_waits_on_itself_has_one_fix_line(tmp_path):
    from schedsim.errors import SchedsimError

    with pytest.raises(SchedsimError) as e:
        _custom(tmp_path, csv_text="0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n")
    msg = str(e.value)
    assert msg.count("fix:") == 1 and "\n  fix: move the producer or recv before its consumer" in msg
    assert "(fix:" not in msg and "<-- ERROR HERE" in msg


def test_lone_p2p_against_a_collective_in_opposite_orders_may_hang_with_eager_init():
    """Two ranks: send then all_reduce on rank 0, all_reduce then recv on rank 1, on two streams. Lazily
    initialised the pair has its own communicator (no hang); eagerly (schedsim execute on NCCL) the send and the
    all_reduce share one and run in issue order: a hang. predict already warned; check said ok."""
    y = ("  - {name: snd, kind: send, peer: 1, bytes: 4096, stream: a, ranks: [0]}\n"
         "  - {name: ar, kind: all_reduce, bytes: 4096, stream: b, ranks: [0]}\n"
         "  - {name: ar, kind: all_reduce, bytes: 4096, stream: b, ranks: [1]}\n"
         "  - {name: rcv, kind: recv, peer: 0, bytes: 4096, stream: a, ranks: [1]}\n")
    G = build_graph(load_text("schema_version: 1\nname: e\nworld_size: 2\nops:\n" + y))
    (w,) = [x for x in G.graph["warnings"] if "may hang" in x]
    assert "device_id" in w and "ar@r0 cannot start before snd@r0 completes" in w and "\n  fix: " in w
    assert "*snd" in w and "*rcv" in w
    lines = y.splitlines(keepends=True)
    same_order = "".join([lines[0], lines[1], lines[3], lines[2]])  # rank 1: recv, then all_reduce
    G = build_graph(load_text("schema_version: 1\nname: e\nworld_size: 2\nops:\n" + same_order))
    assert not [x for x in G.graph["warnings"] if "may hang" in x]


def test_a_dependency_on_an_op_written_later_is_refused():
    """A on stream s1 waiting for B written after it on s2: the simulator honoured the wait, the executor (which
    launches in the order written) waited on an event not yet recorded, i.e. not at all."""
    from schedsim.errors import CycleError, GraphError

    head = "schema_version: 1\nname: f\nworld_size: 1\nops:\n"
    with pytest.raises(GraphError, match="depends on 'B', which is written after it.*\n  fix: move 'B' above 'A'"):
        build_graph(load_text(head + "  - {name: A, kind: compute, duration_us: 5, stream: s1, deps: [B]}\n"
                                     "  - {name: B, kind: compute, duration_us: 50, stream: s2}\n"))
    with pytest.raises(CycleError):  # a real cycle still reads as one
        build_graph(load_text(head + "  - {name: A, kind: compute, duration_us: 5, stream: s1, deps: [B]}\n"
                                     "  - {name: B, kind: compute, duration_us: 50, stream: s2, deps: [A]}\n"))


def test_collective_mismatch_and_missing_member_show_the_issue_grid():
    """Both rejections named the ops and a fix but printed no rank x step grid."""
    head = "schema_version: 1\nname: g\nworld_size: 2\nops:\n"
    with pytest.raises(DeadlockError) as e:
        build_graph(load_text(head + "  - {name: ar, kind: all_reduce, bytes: 4096, ranks: [0]}\n"
                                     "  - {name: ar, kind: all_gather, bytes: 4096, ranks: [1]}\n"))
    msg = str(e.value)
    assert "is an all_gather of 4096 B" in msg and "\n  fix: " in msg
    assert "Rank 0  Rank 1" in msg and "Step 000: *ar     *ar" in msg
    with pytest.raises(DeadlockError) as e:
        build_graph(load_text(WHEN_GROUP.format(upto=1)))
    assert "Rank 0  Rank 1" in str(e.value) and "Step 000: *ar" in str(e.value)


@pytest.mark.parametrize("ops", [
    "  - {name: 'ar{rank}', kind: all_reduce, bytes: 4194304}\n",  # `rank` in the name: one name per rank
    "  - {name: ar_a, kind: all_reduce, bytes: 4194304, ranks: [0]}\n"
    "  - {name: ar_b, kind: all_reduce, bytes: 4194304, ranks: [1]}\n",
])
def test_a_collective_entry_on_one_rank_without_group_is_refused(ops):
    """Each became a 1-rank all_reduce (5 us for 4 MiB), where the program runs one 2-rank all_reduce."""
    from schedsim.errors import GraphError

    with pytest.raises(GraphError, match=r"runs on rank 0 alone.*\n  fix: give it `group:` .*group: \[0, 1\]"):
        build_graph(load_text("schema_version: 1\nname: one\nworld_size: 2\nops:\n" + ops))
    one = build_graph(load_text("schema_version: 1\nname: one\nworld_size: 2\nops:\n"
                                "  - {name: solo, kind: all_reduce, bytes: 64, ranks: [0], group: [0]}\n"))
    assert one.graph["collectives"] == {"solo#0": ["solo@r0"]}  # written explicitly: kept


@pytest.mark.parametrize("recv", ["stream: d, p2p_batch: b, deps: [X]", "stream: c, p2p_batch: b"])
def test_a_batch_member_waiting_for_an_op_written_after_the_batch_starts_is_refused(recv):
    """The executor posts the batch at s1, before X ran (its wait on X's event was a no-op); check accepted it."""
    from schedsim.errors import GraphError

    y = ("schema_version: 1\nname: bi\nworld_size: 2\nops:\n"
         "  - {name: s1, kind: send, peer: '{1 - rank}', bytes: 4096, stream: a, p2p_batch: b}\n"
         "  - {name: X, kind: compute, duration_us: 50, stream: c}\n"
         f"  - {{name: s3, kind: recv, peer: '{{1 - rank}}', bytes: 4096, {recv}}}\n")
    with pytest.raises(GraphError, match="posts whole at its first member 's1', but it waits for 'X'.*\n  fix: move 'X'"):
        build_graph(load_text(y))
    ok = y.replace("  - {name: X, kind: compute, duration_us: 50, stream: c}\n", "")
    ok = ok.replace("ops:\n", "ops:\n  - {name: X, kind: compute, duration_us: 50, stream: c}\n")
    assert len(build_graph(load_text(ok)).graph["p2p"]) == 2
