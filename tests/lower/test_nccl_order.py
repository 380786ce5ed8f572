"""NCCL's ordering rules in the static checks: each kind of fault and its variants."""

from __future__ import annotations

from collections import defaultdict

import pytest

from schedsim.errors import DeadlockError, SchedsimError, SpecError
from schedsim.graph.build import build_graph
from schedsim.pipeline.actions import Action
from schedsim.pipeline.comms import megatron_interleaved_batched
from schedsim.pipeline.schedules_1f1b import interleaved_1f1b
from schedsim.spec.loader import load_text

HEAD = "schema_version: 1\nname: t\nworld_size: {w}\nops:\n"


def graph(ops: str, w: int = 2):
    return build_graph(load_text(HEAD.format(w=w) + ops))


def p2p(first: str, second: str, *, batch: bool = False) -> str:
    """Both ranks post `first` then `second` (send/recv) to each other on two streams, 1 KiB."""
    b = ", p2p_batch: step" if batch else ""
    out = ""
    for r in (0, 1):
        for k, kind in enumerate((first, second)):
            out += f"  - {{name: {kind}{r}, kind: {kind}, peer: {1 - r}, bytes: 1024, stream: s{k}, ranks: [{r}]{b}}}\n"
    return out


@pytest.mark.parametrize("first,second", [("send", "recv"), ("recv", "send")])
def test_same_direction_first_on_two_streams_hangs(first, second):
    with pytest.raises(DeadlockError, match="one communicator's ops in issue order") as e:
        graph(p2p(first, second))
    assert "*" in str(e.value) and "Rank 0" in str(e.value) and "fix:" in str(e.value)


def test_batched_or_even_odd_order_is_accepted():
    G = graph(p2p("send", "recv", batch=True))
    assert [len(x) for x in G.graph["issue_order"][0]] == [2]  # one batch_isend_irecv of two ops
    even_odd = ("  - {name: s0, kind: send, peer: 1, bytes: 1024, stream: a, ranks: [0]}\n"
                "  - {name: r0, kind: recv, peer: 1, bytes: 1024, stream: b, ranks: [0]}\n"
                "  - {name: r1, kind: recv, peer: 0, bytes: 1024, stream: a, ranks: [1]}\n"
                "  - {name: s1, kind: send, peer: 0, bytes: 1024, stream: b, ranks: [1]}\n")
    assert sorted(graph(even_odd).graph["p2p"]) == [("s0@r0", "r1@r1"), ("s1@r1", "r0@r0")]


def test_tags_do_not_reorder_nccl_pairing():
    ops = ("  - {name: send_grad, kind: send, peer: 1, bytes: 4096, stream: a, ranks: [0], tag: grad}\n"
           "  - {name: send_act, kind: send, peer: 1, bytes: 8192, stream: b, ranks: [0], tag: act}\n"
           "  - {name: recv_act, kind: recv, peer: 0, bytes: 8192, stream: a, ranks: [1], tag: act}\n"
           "  - {name: recv_grad, kind: recv, peer: 0, bytes: 4096, stream: b, ranks: [1], tag: grad}\n")
    with pytest.raises(DeadlockError, match="no tags") as e:
        graph(ops)
    assert "sizes differ (4096 B vs 8192 B)" in str(e.value)
    with pytest.raises(DeadlockError, match="tag 'grad'.*tag 'act'"):  # equal sizes: still the wrong tensor
        graph(ops.replace("8192", "4096"))


def test_names_that_suggest_another_pairing_warn():
    ops = ("  - {name: send_grad_shape, kind: send, peer: 1, bytes: 64, ranks: [0]}\n"
           "  - {name: send_act_shape, kind: send, peer: 1, bytes: 64, ranks: [0]}\n"
           "  - {name: recv_act_shape, kind: recv, peer: 0, bytes: 64, ranks: [1]}\n"
           "  - {name: recv_grad_shape, kind: recv, peer: 0, bytes: 64, ranks: [1]}\n")
    w = graph(ops).graph["warnings"]
    assert len(w) == 2 and "meant for recv_grad_shape@r1" in w[0]
    assert graph(ops.replace("recv_act_shape", "tmp").replace("recv_grad_shape", "recv_act_shape")
                 .replace("tmp", "recv_grad_shape")).graph["warnings"] == []


def test_without_warn_the_name_warnings_are_not_worked_out():
    """``lower(spec, warn=False)`` (``schedsim search``): the Program of the case above, array for array, without
    its two name warnings."""
    import numpy as np

    from schedsim.lower import lower

    ops = ("  - {name: send_grad_shape, kind: send, peer: 1, bytes: 64, ranks: [0]}\n"
           "  - {name: send_act_shape, kind: send, peer: 1, bytes: 64, ranks: [0]}\n"
           "  - {name: recv_act_shape, kind: recv, peer: 0, bytes: 64, ranks: [1]}\n"
           "  - {name: recv_grad_shape, kind: recv, peer: 0, bytes: 64, ranks: [1]}\n")
    spec = load_text(HEAD.format(w=2) + ops)
    loud, quiet = lower(spec), lower(spec, warn=False)
    assert len(loud.warnings) == 2 and quiet.warnings == ()
    for k in ("tmpl", "rank", "name", "dep_idx", "stream_edges", "dep_edges", "p2p"):
        assert np.array_equal(getattr(loud, k), getattr(quiet, k)), k


def test_name_check_reads_each_name_a_bounded_number_of_times():
    """Sends and recvs whose names never pair (``s{k}`` / ``r{k}``): the naming check looks each recv's name up
    in a per-(src, dst) table, so it reads every op's message name a bounded number of times (a scan of all
    recvs per send read n² of them: 134 s at 96k ops): each distinct name's once, and the regex of
    :func:`message_name` only for names that hold a send/recv word's letters (none here). No warning, since no recv
    is named like a send."""
    import sys

    calls = 0

    def count(frame, event, _arg):
        nonlocal calls
        if event == "call" and frame.f_code.co_name == "message_name":
            calls += 1

    n = 400
    ops = (f"  - foreach: {{k: range({n})}}\n    ops:\n"
           "      - {name: 's{k}', kind: send, peer: 1, bytes: 64, ranks: [0]}\n"
           "      - {name: 'r{k}', kind: recv, peer: 0, bytes: 64, ranks: [1]}\n")
    sys.setprofile(count)
    try:
        w = graph(ops).graph["warnings"]
    finally:
        sys.setprofile(None)
    assert w == []
    assert calls == 0
    calls = 0
    sys.setprofile(count)
    try:  # names with the words: each distinct one read once
        w = graph(ops.replace("'s{k}'", "'send_x{k}'").replace("'r{k}'", "'recv_y{k}'")).graph["warnings"]
    finally:
        sys.setprofile(None)
    assert w == [] and calls == 2 * n


def test_message_names_in_bulk_are_message_name_of_each():
    from schedsim.lower.p2p import message_name, message_names

    names = ["send_grad", "grad_send", "isend", "x_irecv_y", "TX_a", "a_rx", "s1", "r1", "_a_", "", "Sendx",
             "xsnd", "rcv", "tx", "fwd_act", "recv_send", "a\0send", "ß_RECV"]
    assert message_names(names) == [message_name(n) for n in names]
    assert message_names([n for n in names if "\0" not in n]) == [message_name(n) for n in names if "\0" not in n]
    inner = ["s1", "R2", "fwd_act", "a_send_b", "Sendx", "x_rx", "ß"]  # no name begins or ends with `_`: none stripped
    assert message_names(inner) == [message_name(n) for n in inner] == ["s1", "r2", "fwd_act", "a_b", "x", "x", "ß"]


def test_message_names_in_bulk_as_one_by_one():
    """:func:`message_names` of many names is the one-name form's of each: words at a name's start or end, after
    ``_`` only inside a name (the look-behind does not reach the name before), names holding a line break too."""
    from schedsim.lower.p2p import _P2P_WORDS, message_names

    names = ["send_grad", "x_recv", "grad_isend_a", "sendrecv", "tx", "rx_tx", "a_tx_b", "_tx", "Send_ACT", "recv",
             "ab_snd", "snd_", "a\nsend", "isend", "mid_rcv_x", "b.recv[0]", "txt", "max"]
    one = [_P2P_WORDS.sub("", nm.lower()).strip("_") for nm in names]
    assert one[:4] == ["grad", "x", "grad_a", ""]
    assert message_names(names) == one
    plain = [k for k, nm in enumerate(names) if "\n" not in nm]
    assert message_names([names[k] for k in plain]) == [one[k] for k in plain]


def test_per_rank_collective_without_group_is_one_collective():
    ops = ("  - {name: ar_A, kind: all_reduce, bytes: 4194304, stream: sA, ranks: [0]}\n"
           "  - {name: ar_B, kind: all_reduce, bytes: 4194304, stream: sB, ranks: [0]}\n"
           "  - {name: ar_A, kind: all_reduce, bytes: 4194304, stream: sA, ranks: [1]}\n"
           "  - {name: ar_B, kind: all_reduce, bytes: 4194304, stream: sB, ranks: [1]}\n")
    G = graph(ops)
    assert sorted(G.graph["collectives"]) == ["ar_A#0,1", "ar_B#0,1"]
    assert G.nodes["ar_A@r0"]["op"].group == (0, 1)
    reversed_ = ops.replace("ar_A, kind: all_reduce, bytes: 4194304, stream: sA, ranks: [1]", "X").replace(
        "ar_B, kind: all_reduce, bytes: 4194304, stream: sB, ranks: [1]",
        "ar_A, kind: all_reduce, bytes: 4194304, stream: sA, ranks: [1]").replace(
        "X", "ar_B, kind: all_reduce, bytes: 4194304, stream: sB, ranks: [1]")
    with pytest.raises(DeadlockError):
        graph(reversed_)


def test_collectives_on_communicators_sharing_ranks_keep_one_order():
    ops = ("  - {name: big, kind: all_reduce, bytes: 1024, stream: a, ranks: [0, 1, 2]}\n"
           "  - {name: small_r0, kind: all_reduce, bytes: 1024, stream: b, ranks: [0], group: [0, 1]}\n"
           "  - {name: small_r0, kind: all_reduce, bytes: 1024, stream: b, ranks: [1], group: [0, 1]}\n")
    graph(ops, 3)  # same relative order on ranks 0 and 1: fine
    swapped = ("  - {name: small, kind: all_reduce, bytes: 1024, stream: b, ranks: [1], group: [0, 1]}\n"
               "  - {name: big, kind: all_reduce, bytes: 1024, stream: a, ranks: [0, 1, 2]}\n"
               "  - {name: small, kind: all_reduce, bytes: 1024, stream: b, ranks: [0], group: [0, 1]}\n")
    with pytest.raises(DeadlockError, match="communicators that share two or more ranks"):
        graph(swapped, 3)
    # groups sharing one rank only are independent communicators
    graph(swapped.replace("[0, 1, 2]", "[1, 2]").replace("world_size: 3", "world_size: 3"), 3)


PIPE = """schema_version: 1
name: bi
world_size: {p}
pipeline:
  schedule: interleaved_1f1b
  p: {p}
  v: {v}
  m: {m}
  p2p: batched
  activation_bytes: 65536
  stage:
    forward: [{{name: fwd, kind: compute, duration_us: 100}}]
    backward_input: [{{name: dgrad, kind: compute, duration_us: 100}}]
    backward_weight: [{{name: wgrad, kind: compute, duration_us: 100}}]
"""


@pytest.mark.parametrize("p,v,m", [(3, 2, 3), (3, 2, 6), (3, 3, 9), (4, 2, 8), (4, 3, 12), (4, 2, 4)])
def test_batched_interleaved_is_accepted_where_megatron_runs_it(p, v, m):
    G = build_graph(load_text(PIPE.format(p=p, v=v, m=m)))
    batches = [x for launches in G.graph["issue_order"].values() for x in launches]
    assert max(len(x) for x in batches) >= 2  # steady state sends and receives in one batch_isend_irecv


def test_batched_interleaved_p2_is_refused_like_megatron():
    with pytest.raises(SpecError, match="p >= 3"):
        build_graph(load_text(PIPE.format(p=2, v=2, m=4)))


@pytest.mark.parametrize("p,v,m,g", [(3, 2, 6, None), (4, 2, 8, None), (4, 3, 8, None), (3, 2, 7, 4), (4, 2, 10, 5)])
def test_megatron_batched_order_parity(p, v, m, g):
    """The compute order is Megatron's interleaved 1F1B; NCCL's by-order pairing delivers every message."""
    o = megatron_interleaved_batched(p, m, v, g)
    ref = interleaved_1f1b(p, m, v, group_size=g)
    sends, recvs = defaultdict(list), defaultdict(list)
    for r in range(p):
        assert [a for a in o[r] if isinstance(a, Action)] == [a for a in ref[r] if a is not None]
        for x in o[r]:
            if not isinstance(x, list):
                continue
            kinds = [a.type.value for a in x]
            order = ["SEND_B", "RECV_F", "SEND_F", "RECV_B"]  # Megatron _batched_p2p_ops order
            assert kinds == sorted(kinds, key=order.index)
            for a in x:
                t = a.type.value
                if t == "SEND_F":
                    sends[(r, (r + 1) % p)].append(("F", a.stage + 1, a.microbatch))
                elif t == "SEND_B":
                    sends[(r, (r - 1) % p)].append(("B", a.stage - 1, a.microbatch))
                elif t == "RECV_F":
                    recvs[((r - 1) % p, r)].append(("F", a.stage, a.microbatch))
                else:
                    recvs[((r + 1) % p, r)].append(("B", a.stage, a.microbatch))
    assert set(sends) == set(recvs)
    for k in sends:
        assert sends[k] == recvs[k]
    # every cross-rank boundary is one message: v*m forward and v*m backward per rank, minus the ends
    assert sum(map(len, sends.values())) == 2 * (p * v - 1) * m
    # a middle rank's steady step is one send_forward_backward_recv_forward_backward: 4 ops, the last 3
    for r in range(1, p - 1):
        g_ = p if g is None else g
        warm = min(2 * (p - r - 1) + (v - 1) * g_, v * m)
        steady = [x for x, prev in zip(o[r][1:], o[r]) if isinstance(x, list) and isinstance(prev, Action)
                  and prev.type.value == "B"][: v * m - warm]
        assert [len(x) for x in steady] == [4] * (v * m - warm - 1) + [3]


def test_custom_actions_lowered_like_torch():
    text = """schema_version: 1
name: c
world_size: 2
pipeline:
  schedule: custom
  p: 2
  m: 2
  actions: {0: "0F0 0F1 0B1 0B0", 1: "1F0 1B0 1F1 1B1"}
  activation_bytes: 1024
  stage:
    forward: [{name: f, kind: compute, duration_us: 1}]
    backward_input: [{name: i, kind: compute, duration_us: 1}]
    backward_weight: [{name: w, kind: compute, duration_us: 1}]
"""
    G = build_graph(load_text(text))
    r0 = [x[0].split("@")[0] for x in G.graph["issue_order"][0]]
    # torch posts rank 0's recvs as soon as rank 1 sends: B0.0's gradient before B0.1's
    assert r0 == ["sendF0.0", "sendF0.1", "recvB0.0", "recvB0.1"]


SWEEP = """schema_version: 1
name: s
world_size: {w}
pipeline:
  schedule: {sch}
  p: {p}
  m: {m}
  p2p: {mode}
  data_parallel: {dp}
  activation_bytes: 1024
  stage:
    forward: [{{name: f, kind: compute, duration_us: 1}}]
    backward_input: [{{name: i, kind: compute, duration_us: 1}}]
    backward_weight: [{{name: w, kind: compute, duration_us: 1}}]
"""


@pytest.mark.parametrize("mode", ["batched", "overlapped"])
@pytest.mark.parametrize("sch", ["gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zbv", "dualpipev", "interleaved_zb"])
@pytest.mark.parametrize("p", [2, 3, 4])
def test_no_false_hang_on_pipeline_schedules(sch, p, mode):
    """Every shipped pipeline schedule passes NCCL's ordering rules (p = 2..4, both p2p modes)."""
    if sch == "interleaved_1f1b" and mode == "batched" and p == 2:
        pytest.skip("refused like Megatron (test_batched_interleaved_p2_is_refused_like_megatron)")
    m = 2 * p if sch != "dualpipev" else 2 * p + 2
    dp = 2 if p == 2 else 1  # data-parallel gradient all_reduce on other communicators
    G = build_graph(load_text(SWEEP.format(sch=sch, p=p, m=m, mode=mode, dp=dp, w=p * dp)))
    assert len(G.graph["p2p"]) > 0


CUSTOM = """schema_version: 1
name: cc
world_size: 2
pipeline:
  schedule: custom
  p: 2
  m: 1
  actions: {{0: "{a0}", 1: "{a1}"}}
  activation_bytes: 64
  stage:
    forward: [{{name: f, kind: compute, duration_us: 1}}]
    backward_input: [{{name: i, kind: compute, duration_us: 1}}]
    backward_weight: [{{name: w, kind: compute, duration_us: 1}}]
"""


def test_custom_actions_with_sends_and_recvs_keep_the_users_order():
    G = build_graph(load_text(CUSTOM.format(a0="0F0 0SEND_F0 0RECV_B0 0B0", a1="1RECV_F0 1F0 1B0 1SEND_B0")))
    assert [x[0].split("@")[0] for x in G.graph["issue_order"][0]] == ["sendF0.0", "recvB0.0"]
    # rank 0 posts its recv before its send: that recv blocks the send rank 1 waits for
    with pytest.raises(SchedsimError, match="wait cycle") as e:
        build_graph(load_text(CUSTOM.format(a0="0F0 0RECV_B0 0SEND_F0 0B0", a1="1RECV_F0 1F0 1B0 1SEND_B0")))
    assert "ERROR HERE" in str(e.value)
