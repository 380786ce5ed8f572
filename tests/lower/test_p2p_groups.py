"""A send/recv's process group (issue 36): the optional ``group:``, its validation (exit 2 naming the field and the
fix), and the communicator predict times a batch on, by hand against NCCL's channel rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from schedsim.errors import GraphError, SpecError
from schedsim.lower import lower
from schedsim.lower.p2p_comms import batch_communicators, p2p_groups
from schedsim.spec.loader import load_text

ROOT = Path(__file__).resolve().parents[2]
MB25 = 25_000_000


def _two_pipelines(group: str = "") -> str:
    """Two 4-rank pipelines on one 8-GPU node (0-1-2-3 and 4-5-6-7), each stage sending 25 MB to the next, batched
    on one stream; ``group`` appended to every send/recv."""
    ops = []
    for base in (0, 4):
        for s in range(3):
            a, b = base + s, base + s + 1
            ops.append(f"  - {{name: f{s}, kind: send, peer: {b}, bytes: {MB25}, ranks: [{a}], p2p_batch: s{s}, "
                       f"stream: pp{group}}}")
            ops.append(f"  - {{name: f{s}, kind: recv, peer: {a}, bytes: {MB25}, ranks: [{b}], p2p_batch: r{s}, "
                       f"stream: pp{group}}}")
    return "schema_version: 1\nname: two_pipes\nworld_size: 8\nops:\n" + "\n".join(ops) + "\n"


def test_two_pipelines_get_their_own_communicators_unless_a_group_is_written():
    prog = lower(load_text(_two_pipelines()))
    cid, comms = batch_communicators(prog)
    assert sorted(comms) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    groups, of = p2p_groups(prog)
    assert groups == comms and of["f0@r0"] == (0, 1, 2, 3) and of["f2@r7"] == (4, 5, 6, 7)
    prog = lower(load_text(_two_pipelines(", group: [0, 1, 2, 3, 4, 5, 6, 7]")))
    cid, comms = batch_communicators(prog)
    assert comms == [tuple(range(8))] and (cid[prog.batch >= 0] == 0).all()


def test_a_25mb_send_by_hand_on_the_family_and_on_the_written_world():
    # DGX A100 (NCCL 2.30 rules, schedsim.network.p2p_channels): 4 ranks in one node, nChannelsMin 32 -> 8
    # (8 x 4 = 32 <= 32), 25 MB / 8 = 3.1 MB parts below maxPart 16 MiB: 8 channels x 14 GB/s,
    # 25e6 / 112e3 = 223.21 µs; 8 ranks: nChannelsMin 4, 4 channels: 25e6 / 56e3 = 446.43 µs
    from schedsim.gpu.cost import CostModel
    from schedsim.hardware.profile import load_profile
    from schedsim.network.explain import explain_rows

    cost = CostModel(load_profile("dgx_a100"))
    net = cost.net.nccl
    lat = net.p2p(0, 1, MB25, (0, 1, 2, 3)).seconds * 1e6 - 223.214
    assert 0 < lat < 20
    for group, us in (("", 223.214), (", group: [0, 1, 2, 3, 4, 5, 6, 7]", 446.429)):
        rows = [r for r in explain_rows(lower(load_text(_two_pipelines(group))), cost)
                if r["kind"] == "send" and r["group"] == "0->1"]
        assert len(rows) == 1
        assert rows[0]["time_us"] == pytest.approx(us + lat, abs=0.01)


BASE = ("schema_version: 1\nname: g\nworld_size: 4\nops:\n"
        "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: b, stream: pp, group: [0, 1]}\n")


@pytest.mark.parametrize("recv,err,text,fix", [
    ("  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: b, stream: pp}\n", GraphError,
     "send 's' on rank 0 names group [0, 1] but the recv it pairs with, 'r' on rank 1, names no group",
     "give both the same `group:` (e.g. group: [0, 1]), or remove it from both"),
    ("  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: b, stream: pp, group: [0, 1, 2]}\n",
     GraphError, "names group [0, 1] but the recv it pairs with, 'r' on rank 1, names group [0, 1, 2]",
     "give both the same `group:`"),
    ("  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: b, stream: pp, group: [1, 2]}\n",
     SpecError, "recv 'r': rank 0 (its peer) is outside its group [1, 2]", "add 0 to `group`"),
    ("  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: b, stream: pp, group: [0, 1, 7]}\n",
     SpecError, "recv 'r' has group rank 7 but world_size is 4", "use ranks in 0..3"),
])
def test_a_group_that_torch_could_not_run_is_refused(recv, err, text, fix):
    with pytest.raises(err) as e:
        lower(load_text(BASE + recv))
    assert text in str(e.value) and fix in (e.value.fix or "")


def test_one_batch_on_two_groups_is_refused():
    text = BASE + ("  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: b, stream: pp, group: [0, 1]}\n"
                   "  - {name: s2, kind: send, peer: 2, bytes: 8, ranks: [0], p2p_batch: b, stream: pp}\n"
                   "  - {name: r2, kind: recv, peer: 0, bytes: 8, ranks: [2], p2p_batch: b, stream: pp}\n")
    with pytest.raises(GraphError) as e:
        lower(load_text(text))
    assert "of the same p2p_batch 'b'" in str(e.value) and "All ops need to use the same group" in str(e.value)
    assert "give every send/recv of p2p_batch 'b' the same `group:`" in e.value.fix


def test_check_exits_2_naming_the_field(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(BASE + "  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: b, stream: pp, "
                 "group: [1, 2]}\n")
    p = subprocess.run([sys.executable, "-m", "schedsim", "check", str(f)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"{f}:6:" in p.stderr and "ops[1].group" in p.stderr and "fix: add 0 to `group`" in p.stderr


#: rank 0 sends `a` on group [0, 1] and then `b` on group [0, 1, 2]; rank 1 receives `b` first, then `a`. NCCL
#: matches a send with a recv per communicator, in issue order on it (torch runs each P2POp on its group's
#: ProcessGroupNCCL communicator), so `a` meets `a` and `b` meets `b`; the two communicators share ranks 0 and 1
#: and are called in two orders, which NCCL's documentation says may deadlock. The all_reduce has every rank
#: create the communicator of [0, 1, 2] (rule 6, lazy creation).
TWO_GROUPS = """schema_version: 1
name: two_groups
world_size: 3
ops:
  - {name: ar, kind: all_reduce, bytes: 1024}
  - {name: a, kind: send, peer: 1, bytes: 1048576, group: [0, 1], ranks: [0], p2p_batch: X}
  - {name: b, kind: send, peer: 1, bytes: 2048, group: [0, 1, 2], ranks: [0], p2p_batch: Y}
  - {name: b, kind: recv, peer: 0, bytes: 2048, group: [0, 1, 2], ranks: [1], p2p_batch: Y}
  - {name: a, kind: recv, peer: 0, bytes: 1048576, group: [0, 1], ranks: [1], p2p_batch: X}
"""


def test_a_pair_of_ranks_matches_per_process_group():
    """Before: refused as 'send a@r0 (1048576 B) is paired with recv b@r1 (2048 B); sizes differ' (the k-th send
    of 0 -> 1 matched with the k-th recv over both groups); now a meets a, b meets b, and the fault named is the
    two communicators' order."""
    from schedsim.errors import DeadlockError

    with pytest.raises(DeadlockError) as e:
        lower(load_text(TWO_GROUPS))
    msg = str(e.value)
    assert "communicators that share ranks must keep one order" in msg and "sizes differ" not in msg, msg
    assert "b@r1 completes only once b@r0 is posted" in msg and "a@r0 completes only once a@r1" in msg, msg
    # the same order on both ranks runs: a meets a, b meets b
    lines = TWO_GROUPS.splitlines(keepends=True)
    prog = lower(load_text("".join(lines[:-2] + [lines[-1], lines[-2]])))
    assert sorted((prog.op_id(int(s)), prog.op_id(int(r))) for s, r in prog.p2p.tolist()) == \
        [("a@r0", "a@r1"), ("b@r0", "b@r1")]
