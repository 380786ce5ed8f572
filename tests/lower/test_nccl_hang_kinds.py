"""NCCL-hang checks (issue #33): schedules NCCL runs that schedsim refused, and schedules NCCL hangs on that
schedsim accepted."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedsim.api import load_text, predict
from schedsim.errors import DeadlockError

A2A = """\
schema_version: 1
name: moe
world_size: 4
params: {hot: 4}
ops:
  - name: a2a
    kind: all_to_all
    bytes: "{2**24 * (hot if rank == 2 else 1)}"
    stream: comm
"""


def _span(run, name: str, rank: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    s = next(s for s in run.timeline.spans if s.id == f"{name}@r{rank}")
    return s.start_s, s.end_s


@pytest.mark.parametrize("gpu_model", ["waves"])
def test_all_to_all_with_a_size_per_rank_runs_and_takes_its_largest_members_time(gpu_model: str) -> None:
    """MoE with a hot expert: rank 2 sends 64 MiB, the others 16 MiB. NCCL runs all_to_all as grouped
    send/recv with a count per peer, so this is no hang; the collective ends with its largest transfer: the same
    time as 64 MiB on every rank, longer than 16 MiB on every rank."""
    hot = predict(load_text(A2A, "moe.yaml"), "h200", gpu_model=gpu_model)
    all_small = predict(load_text(A2A, "moe.yaml", hot=1), "h200", gpu_model=gpu_model)
    every = predict(load_text(A2A.replace("(hot if rank == 2 else 1)", "hot"), "moe.yaml"), "h200",
                    gpu_model=gpu_model)
    d = [_span(hot, "a2a", r)[1] - _span(hot, "a2a", r)[0] for r in range(4)]
    big = _span(every, "a2a", 0)[1] - _span(every, "a2a", 0)[0]
    small = _span(all_small, "a2a", 0)[1] - _span(all_small, "a2a", 0)[0]
    assert d == pytest.approx([big] * 4) and big > 2 * small


def test_collectives_that_differ_in_kind_are_still_refused() -> None:
    text = A2A.replace("kind: all_to_all", "kind: \"{'all_to_all' if rank else 'all_gather'}\"")
    with pytest.raises(DeadlockError, match="NCCL would hang or corrupt data"):
        predict(load_text(text, "moe.yaml"), "h200")


def test_all_reduce_with_a_size_per_rank_is_still_refused() -> None:
    with pytest.raises(DeadlockError, match="NCCL would hang or corrupt data"):
        predict(load_text(A2A.replace("all_to_all", "all_reduce"), "moe.yaml"), "h200")


def _batch_schedule(counts: dict[tuple[int, int], int], world: int = 8) -> str:
    """One p2p batch per rank: ``counts[(i, j)]`` sends from rank i to rank j (and as many recvs on j)."""
    lines = ["schema_version: 1", "name: big_batch", f"world_size: {world}", "ops:"]
    for (i, j), c in sorted(counts.items()):
        lines += [f"  - foreach: {{k: range({c})}}", "    ops:",
                  f"      - {{name: \"s{i}_{j}_{{k}}\", kind: send, peer: {j}, bytes: 4096, p2p_batch: big, "
                  f"ranks: [{i}], stream: comm}}",
                  f"      - {{name: \"r{i}_{j}_{{k}}\", kind: recv, peer: {i}, bytes: 4096, p2p_batch: big, "
                  f"ranks: [{j}], stream: comm}}"]
    return "\n".join(lines) + "\n"


def test_one_batch_of_many_ops_that_ranks_shape_differently_warns() -> None:
    """pytorch#174288's kind: 8 ranks, one batch each of 250 to 450 send/recv ops with per-pair counts that
    differ (expert rebalancing), so NCCL can cut the ranks' groups into launches at different ops."""
    from schedsim.lower import lower

    counts = {(i, j): 15 + (i * 7 + j * 3) % 13 for i in range(8) for j in range(8) if i != j}
    prog = lower(load_text(_batch_schedule(counts), "b.yaml"))
    w = [x for x in prog.warnings if "NCCL may launch a group this large as several kernels" in x]
    assert len(w) == 1 and w[0].startswith("may hang: p2p batch of 's0_1_0' on rank 0 holds")
    assert "\n  fix: split the batch into batches of at most 256 ops" in w[0]


def test_large_batches_of_one_shape_on_every_rank_do_not_warn() -> None:
    """A ring exchange of 140 ops each way per neighbour (280 ops a rank): every rank's batch has the same
    shape, so NCCL cuts every rank's group at the same place. And a small asymmetric batch: one launch."""
    from schedsim.lower import lower

    ring = {(i, (i + d) % 8): 140 for i in range(8) for d in (1, 7)}
    assert not [x for x in lower(load_text(_batch_schedule(ring), "r.yaml")).warnings if "several kernels" in x]
    small = {(i, j): 1 + (i * 7 + j * 3) % 5 for i in range(8) for j in range(8) if i != j}
    assert not [x for x in lower(load_text(_batch_schedule(small), "s.yaml")).warnings if "several kernels" in x]


RIPPLE = """\
schema_version: 1
name: ripple
world_size: 4
{init}
ops:
  - {{name: s01, kind: send, peer: 1, bytes: 4096, ranks: [0], p2p_batch: b0, group: [0, 1, 2, 3]}}
  - {{name: r01, kind: recv, peer: 0, bytes: 4096, ranks: [1], p2p_batch: b0, group: [0, 1, 2, 3]}}
  - {{name: f1, kind: compute, duration_us: 10, ranks: [1], deps: [r01]}}
  - {{name: s12, kind: send, peer: 2, bytes: 4096, ranks: [1], deps: [f1]}}
  - {{name: r12, kind: recv, peer: 1, bytes: 4096, ranks: [2]}}
  - {{name: s23, kind: send, peer: 3, bytes: 4096, ranks: [2], p2p_batch: b1, deps: [r12], group: [0, 1, 2, 3]}}
  - {{name: r23, kind: recv, peer: 2, bytes: 4096, ranks: [3], p2p_batch: b1, group: [0, 1, 2, 3]}}
"""


def test_first_batched_call_that_waits_on_another_ranks_first_call_hangs_under_lazy_init() -> None:
    """pytorch#74701's kind: ranks 0 and 1 make their first call on the world communicator (a batch on the world's
    process group, written as its `group:`; without it each pipeline pair gets its own group), which a
    lazily initialised process group creates then and which waits for all four ranks; rank 2 makes its first
    call (the batch s23) only after its lone recv r12, whose send s12 follows rank 1's first batch: a cycle.
    Created eagerly (device_id), the communicator exists and the same program runs."""
    with pytest.raises(DeadlockError, match="lazily initialised process group creates then") as e:
        predict(load_text(RIPPLE.format(init=""), "ripple.yaml"), "h200")
    assert "nccl_init: eager" in str(e.value)
    run = predict(load_text(RIPPLE.format(init="nccl_init: eager"), "ripple.yaml"), "h200")
    assert run.makespan_s > 0


def test_a_rank_that_never_calls_a_lazily_created_communicator_hangs_the_others() -> None:
    """Ranks 0 and 1 exchange in a batch (the world communicator); ranks 2 and 3 never call it: lazily created,
    its ncclCommInitRank on ranks 0 and 1 waits for them forever."""
    text = RIPPLE.format(init="").split("  - {name: s12")[0]
    with pytest.raises(DeadlockError, match=r"rank\(s\) \[2, 3\] never call it"):
        predict(load_text(text, "pair.yaml"), "h200")
    assert predict(load_text(text.replace("world_size: 4\n", "world_size: 4\nnccl_init: eager\n"), "pair.yaml"),
                   "h200").makespan_s > 0


def test_first_batches_that_every_rank_posts_at_once_run_under_lazy_init() -> None:
    """Every rank's first call on the world communicator is posted with nothing before it (1F1B's first
    step): the creation completes."""
    text = """\
schema_version: 1
name: chain
world_size: 4
ops:
  - {name: s, kind: send, peer: "rank + 1", bytes: 4096, p2p_batch: b, ranks: [0, 1, 2]}
  - {name: r, kind: recv, peer: "rank - 1", bytes: 4096, p2p_batch: b, ranks: [1, 2, 3]}
"""
    assert predict(load_text(text, "chain.yaml"), "h200").makespan_s > 0


def _array_no_hang(text: str) -> bool:
    """The array form's wait-for sweep alone (:mod:`schedsim.lower.checks`), without the object-based build."""
    from schedsim.lower import lower
    from schedsim.lower.checks import _no_hang, _Templates, launch_heads

    prog = lower(load_text(text, "s.yaml"), check=False)
    tc = _Templates.of(prog)
    comm, head = launch_heads(prog, tc)
    return _no_hang(prog, comm, head, tc)


FIRST_CALLS = """\
schema_version: 1
name: first_calls
world_size: 3
{init}
ops:
  - {{name: a01, kind: all_reduce, bytes: 1048576, ranks: [0], group: [0, 1], stream: s0}}
  - {{name: a02, kind: all_reduce, bytes: 1048576, ranks: [0], group: [0, 2], stream: s1}}
  - {{name: {r1a}, kind: all_reduce, bytes: 1048576, ranks: [1], group: {g1a}, stream: s0}}
  - {{name: {r1b}, kind: all_reduce, bytes: 1048576, ranks: [1], group: {g1b}, stream: s1}}
  - {{name: a02, kind: all_reduce, bytes: 1048576, ranks: [2], group: [0, 2], stream: s0}}
  - {{name: a12, kind: all_reduce, bytes: 1048576, ranks: [2], group: [1, 2], stream: s1}}
"""
CYCLE = {"r1a": "a12", "g1a": "[1, 2]", "r1b": "a01", "g1b": "[0, 1]"}  # rank 1: {1,2} then {0,1}
ONE_ORDER = {"r1a": "a01", "g1a": "[0, 1]", "r1b": "a12", "g1b": "[1, 2]"}  # {0,1} < {0,2} < {1,2} on all


def test_first_calls_on_subgroup_communicators_in_a_cycle_hang_under_lazy_init() -> None:
    """Each rank's first call on a lazily created communicator blocks its host in ncclCommInitRank until every
    rank of it has called it (pytorch#74701; torch creates communicators at first use without ``device_id``), so
    later launches of that rank, on any stream, wait: rank 0 waits in {0,1} for rank 1, which waits in {1,2} for
    rank 2, which waits in {0,2} for rank 0. Both the array sweep and the object-based build refuse it."""
    text = FIRST_CALLS.format(init="", **CYCLE)
    assert not _array_no_hang(text)
    with pytest.raises(DeadlockError, match="host waits in the lazy creation") as e:
        predict(load_text(text, "cycle.yaml"), "h200")
    assert "a02@r0" in str(e.value) and "a01@r1" in str(e.value) and "a12@r2" in str(e.value)


def test_first_calls_in_one_order_or_eager_creation_run() -> None:
    """The same communicators created in one order on every rank ({0,1}, {0,2}, {1,2}) complete; with eager
    creation (``device_id``) the cyclic order makes no host wait (only NCCL's 'may hang' warning remains)."""
    ok = FIRST_CALLS.format(init="", **ONE_ORDER)
    assert _array_no_hang(ok)
    assert predict(load_text(ok, "ok.yaml"), "h200").makespan_s > 0
    eager = FIRST_CALLS.format(init="nccl_init: eager", **CYCLE)
    assert _array_no_hang(eager)
    run = predict(load_text(eager, "eager.yaml"), "h200")
    assert run.makespan_s > 0 and any("may hang" in w for w in run.program.warnings)


SKIP = """\
schema_version: 1
name: skip_connection
world_size: 4
ops:
  - {{name: f0, kind: compute, duration_us: 100, ranks: [0]}}
  - {{name: s01, kind: send, peer: 1, bytes: 1048576, ranks: [0], p2p_batch: {out0}, deps: [f0], stream: comm}}
  - {{name: s02, kind: send, peer: 2, bytes: 1048576, ranks: [0], p2p_batch: {out0b}, deps: [f0], stream: comm}}
  - {{name: r01, kind: recv, peer: 0, bytes: 1048576, ranks: [1], p2p_batch: in, stream: comm}}
  - {{name: f1, kind: compute, duration_us: 100, ranks: [1], deps: [{f1_dep}]}}
  - {{name: s12, kind: send, peer: 2, bytes: 1048576, ranks: [1], p2p_batch: out, deps: [f1], stream: comm}}
  - {{name: r02, kind: recv, peer: 0, bytes: 1048576, ranks: [2], p2p_batch: {in2}, stream: comm}}
  - {{name: r12, kind: recv, peer: 1, bytes: 1048576, ranks: [2], p2p_batch: in, stream: comm}}
  - {{name: f2, kind: compute, duration_us: 100, ranks: [2], deps: [r02, r12]}}
  - {{name: s23, kind: send, peer: 3, bytes: 1048576, ranks: [2], p2p_batch: out, deps: [f2], stream: comm}}
  - {{name: r23, kind: recv, peer: 2, bytes: 1048576, ranks: [3], p2p_batch: in, stream: comm}}
  - {{name: f3, kind: compute, duration_us: 100, ranks: [3], deps: [r23]}}
"""
PIPPY_969 = {"out0": "out", "out0b": "out", "in2": "in", "f1_dep": "r01"}  # as PiPPy batched in March 2024


def _skip(**change: str) -> str:
    return SKIP.format(**{**PIPPY_969, **change})


def _grouped_no_hang(text: str) -> bool:
    """The array form's wait-for sweep with rule 7 (multi-peer batches) alone."""
    from schedsim.lower import lower
    from schedsim.lower.checks import _no_hang, _Templates, launch_heads

    prog = lower(load_text(text, "s.yaml"), check=False)
    tc = _Templates.of(prog)
    comm, head = launch_heads(prog, tc)
    return _no_hang(prog, comm, head, tc, grouped=True)


def test_a_batch_over_several_peers_that_a_peer_answers_only_after_computing_may_hang() -> None:
    """pytorch/PiPPy#969 (4 stages, a skip connection from stage 0 to stage 2): stage 0 batches its sends to
    stages 1 and 2, stage 2 batches its recvs from 0 and 1, and stage 1 sends to 2 only after computing on what
    it received from 0. NCCL ran each batch as one kernel and hung: stage 2's batch waits for stage 1's send,
    which waits for stage 1's recv, which the batch of stage 0 (waiting on stage 2's) does not complete. schedsim
    warns "may hang", names the wait and the fix (batch per peer), and still predicts."""
    text = _skip()
    assert not _grouped_no_hang(text) and _array_no_hang(text)  # a hang only under rule 7
    run = predict(load_text(text, "skip.yaml"), "h200")
    (w,) = [x for x in run.program.warnings if "PiPPy#969" in x]
    assert w.startswith("may hang: a batch of send/recv with two or more peers (batch_isend_irecv) is one NCCL")
    assert "s12@r1" in w and "r01@r1" in w and "\n  fix: batch the send/recv per peer" in w
    assert "*s12" in w and "*r01" in w  # the issue grid marks the blocking ops
    assert run.makespan_s > 0


def test_predict_prints_the_may_hang_warning_that_check_prints(tmp_path) -> None:
    """The PiPPy#969 schedule: `check` printed "may hang", `predict` and the timeline it writes said nothing of it
    (the Program's warnings reached no output of predict). Both now carry it; the per-peer fix has none."""
    from tests.cli.test_cli import run

    for name, text, hangs in (("skip", _skip(), True), ("fixed", _skip(in2="in0"), False)):
        f = tmp_path / f"{name}.yaml"
        f.write_text(text)
        r = run("predict", str(f), "--no-gantt", "--no-trace", "-o", str(tmp_path / name))
        assert r.returncode == 0, r.stderr
        said = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: may hang: a batch of send/recv")]
        assert len(said) == (1 if hangs else 0), r.stderr
        meta = predict(load_text(text, f"{name}.yaml"), "h200").timeline.meta
        assert any("PiPPy#969" in w for w in meta.get("warnings", [])) == hangs


@pytest.mark.parametrize("change", [
    {"in2": "in0"},  # PiPPy PR #1000: stage 2 batches per peer (recv from 0 and recv from 1 apart)
    {"out0b": "out_skip", "in2": "in0"},  # every stage batches per peer
    {"s12": "in"},  # stage 1 posts its send to 2 in one batch with its recv from 0 (a third multi-peer batch)
])
def test_batches_over_several_peers_that_every_peer_answers_at_once_do_not_warn(change: dict[str, str]) -> None:
    """The same pipeline with per-peer batches on stage 2 (PiPPy's fix), or with stage 1's send posted with its
    recv, before anything waits: every op matched with a multi-peer batch is posted without waiting for one."""
    text = _skip(**{k: v for k, v in change.items() if k != "s12"})
    if change.get("s12"):
        text = text.replace("ranks: [1], p2p_batch: out, deps: [f1],", "ranks: [1], p2p_batch: in,")
    assert _grouped_no_hang(text)
    run = predict(load_text(text, "skip.yaml"), "h200")
    assert not [x for x in run.program.warnings if "may hang" in x]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(msgs=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 2), st.sampled_from(["", "a", "b"]),
                               st.sampled_from(["", "a", "b"]), st.booleans()), min_size=1, max_size=7))
def test_rule_7_in_arrays_and_in_the_object_based_graph_agree(msgs: list[tuple[int, int, str, str, bool]]) -> None:
    """Random send/recv on 3 ranks, each in a batch or alone, some sends after a compute on the rank's last recv:
    the array sweep with rule 7 and :func:`tests.oracle.nccl_graph.find_hang` with ``grouped`` give one verdict, and on
    a hang name the same cycle in the same words (the arrays word the warning; the object form is the oracle)."""
    from schedsim.errors import SchedsimError
    from schedsim.lower import lower
    from schedsim.lower.checks import _no_hang, _Templates, launch_heads
    from tests.oracle.nccl_graph import find_hang, issue_order
    from tests.oracle.object_build import graph_from_ops

    lines = ["schema_version: 1", "name: r", "world_size: 3", "nccl_init: eager", "ops:"]
    last_recv: dict[int, str] = {}
    for i, (src, d, bs, br, wait) in enumerate(msgs):
        dst = (src + d) % 3
        if wait and src in last_recv:
            lines.append(f"  - {{name: c{i}, kind: compute, duration_us: 1, ranks: [{src}], deps: [{last_recv[src]}]}}")
            deps = f", deps: [c{i}]"
        else:
            deps = ""
        bsend = f", p2p_batch: {bs}{i if bs and wait else ''}" if bs else ""
        lines.append(f"  - {{name: s{i}, kind: send, peer: {dst}, bytes: 4096, ranks: [{src}]{bsend}{deps}}}")
        lines.append(f"  - {{name: r{i}, kind: recv, peer: {src}, bytes: 4096, ranks: [{dst}]"
                     f"{f', p2p_batch: {br}' if br else ''}}}")
        last_recv[dst] = f"r{i}"
    try:
        prog = lower(load_text("\n".join(lines) + "\n", "r.yaml"), check=False)
        tc = _Templates.of(prog)
        comm, head = launch_heads(prog, tc)
        arrays = _no_hang(prog, comm, head, tc, grouped=True)
        G = graph_from_ops(prog.ops(), prog.graph_info(), "r.yaml", check=False)
    except SchedsimError:
        return  # a schedule the language refuses (a batch member waiting for an op written after the batch)
    G.graph["issue_order"] = issue_order(G)
    cyc = find_hang(G, grouped=True)
    assert arrays == (cyc is None), lines
    if cyc is not None:
        from schedsim.lower.check_errors import _hang
        from tests.oracle.graph_checks import _explain_hang

        mine, ref = _hang(prog, grouped=True), _explain_hang(G, cyc)
        assert mine is not None
        assert (str(mine[0]), mine[0].ops, mine[0].cycle) == (str(ref), ref.ops, ref.cycle), lines


RING_AT = """\
schema_version: 1
name: ring_at
world_size: 4
{init}
ops:
  - {{name: g, kind: matmul, m: 64, n: 64, k: 64, dtype: bf16, stream: compute}}
  - {{name: a, kind: all_reduce, bytes: 4096, stream: comm, deps: [g]}}
  - {{name: s, kind: send, peer: "(rank + 1) % 4", bytes: 1024, stream: p2p, p2p_batch: b}}
  - {{name: r, kind: recv, peer: "(rank - 1) % 4", bytes: 1024, stream: p2p, p2p_batch: b}}
  - {{name: z, kind: all_reduce, bytes: 4096, stream: comm, deps: [r]}}
{more}"""
SUBGROUP = """\
  - {name: p, kind: all_reduce, bytes: 4096, stream: comm, group: [0, 1], ranks: [0, 1]}
  - {name: q, kind: all_reduce, bytes: 4096, stream: comm}
"""
LATE = "  - {name: x, kind: all_reduce, bytes: 4096, stream: comm, group: [2, 3], ranks: [2, 3]}\n"
PAIR = """\
{late}  - {{name: s1, kind: send, peer: 1, bytes: 1024, stream: p2p, ranks: [{src}]}}
  - {{name: r1, kind: recv, peer: {src}, bytes: 1024, stream: p2p, ranks: [1]}}
"""


@pytest.mark.parametrize("init", ["", "nccl_init: lazy"])
@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize(("text", "forward"), [
    (RING_AT.format(init="{init}", more=""), True),  # SPMD: every part forward
    (RING_AT.format(init="{init}", more=SUBGROUP), False),  # q: a hub later than its rank 2 and 3 members' done
    (RING_AT.format(init="{init}", more=PAIR.format(src=2, late="")), True),
    (RING_AT.format(init="{init}", more=PAIR.format(src=2, late=LATE)), False),  # s1 after r1's position
    (FIRST_CALLS.format(init="{init}", **CYCLE), False), (FIRST_CALLS.format(init="{init}", **ONE_ORDER), None),
    (_skip(), None), (_skip(out0b="solo"), None)])
def test_the_forward_check_reads_no_part_that_goes_forward_by_construction(text, forward, init, grouped):
    # with each part's reason the p2p parts and each member -> hub part are not read (forward once the sends sit
    # at their recvs' positions, which is tested first): the same verdict as reading every part
    from schedsim.lower import lower
    from schedsim.lower.checks import _ordered_by_position, _Templates, _wait_for_edges, launch_heads

    prog = lower(load_text(text.replace("{init}", init), "s.yaml"), check=False)
    tc = _Templates.of(prog)
    comm, head = launch_heads(prog, tc)
    for eager in (False, True):
        why: list[str] = []
        n, parts, useq, u, lazy = _wait_for_edges(prog, comm, head, eager, tc, grouped, why)
        assert len(why) == len(parts)
        got = _ordered_by_position(n, parts, useq, prog, u, lazy, why)
        assert got == _ordered_by_position(n, parts, useq, prog, u, lazy) and forward in (None, got)
