"""Collectives written in a pipeline stage's op lists (FSDP inside pipeline stages, pytorch/pytorch#164756):
``group: dp`` is the ranks that hold the stage in every data-parallel replica, the default stream ``fsdp``,
``deps:`` name earlier ops of the same list. A timeline computed by hand, the groups and the issue order of
``schedules/pipeline_fsdp.yaml``, and a schedule that would hang, refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedsim import api
from schedsim.errors import GraphError, SpecError

ROOT = Path(__file__).resolve().parents[2]

# GPipe, p = 2 stages, 2 replicas (ranks 0, 1 and 2, 3), m = 2, recorded durations (the replay model: no host
# cost, every op its duration_us from when it is ready). Sends and the data-parallel all-reduce keep the profile's
# cost (read from the timeline below: lam, a send of 0 bytes; ar, the all-reduce of 0 bytes).
HAND = """\
schema_version: 1
name: hand
world_size: 4
durations: recorded
pipeline:
  schedule: gpipe
  p: 2
  m: 2
  data_parallel: 2
  grad_allreduce_bytes: 0
  activation_bytes: 0
  stage:
    forward:
      - {name: ag, kind: all_gather, group: dp, bytes: 1000, duration_us: 4}
      - {name: fwd, kind: compute, duration_us: 10, deps: [ag]}
    backward_input:
      - {name: dgrad, kind: compute, duration_us: 10}
    backward_weight:
      - {name: wgrad, kind: compute, duration_us: 6}
      - {name: rs, kind: reduce_scatter, group: dp, bytes: 1000, duration_us: 3, deps: [wgrad]}
"""


def _spans(text: str, tmp_path: Path) -> dict[str, tuple[str, float, float]]:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    tl = api.predict(f).timeline
    return {s.id: (s.stream, s.start_s * 1e6, s.end_s * 1e6) for s in tl.spans}


def test_a_timeline_computed_by_hand(tmp_path: Path) -> None:
    sp = _spans(HAND, tmp_path)
    lam = sp["sendF0.0@r0"][2] - sp["sendF0.0@r0"][1]  # a 0-byte send's cost in the profile
    ar = sp["dp_grad_allreduce_r1@r1"][2] - sp["dp_grad_allreduce_r1@r1"][1]
    assert lam > 0 and ar > 0
    # stage 0 (rank 0): the first all-gather has no input to wait for; the second, on the in-order fsdp stream,
    # runs under the first forward (4-8), which its forward then does not wait for (14 > 8)
    f00_fwd = 4 + 10
    f01_fwd = f00_fwd + 10
    # stage 1 (rank 1): a forward's first op (its all-gather) waits for the recv; its GEMM for the all-gather
    rf0 = f00_fwd + lam
    ag10 = rf0 + 4
    rf1 = f01_fwd + lam  # the second send leaves after the second forward
    f10 = ag10 + 10
    ag11 = max(rf1, ag10) + 4
    f11 = max(f10, ag11) + 10
    # backward of stage 1: I, then W and its reduce-scatter on fsdp; a full B hands its input gradient on when its
    # compute is done (after W), not waiting for the reduce-scatter on its own stream
    b10_i = f11 + 10
    b10_w = b10_i + 6
    b10_rs = b10_w + 3
    b11_i = b10_w + 10
    b11_w = b11_i + 6
    b11_rs = b11_w + 3
    sb0, sb1 = b10_w + lam, b11_w + lam
    # stage 0: each backward after its recv; the reduce-scatters beside the next backward's compute
    b00_i = sb0 + 10
    b00_w = b00_i + 6
    b01_i = max(b00_w, sb1) + 10
    b01_w = b01_i + 6
    want = {
        "F0.0.ag@r0": ("fsdp", 0, 4), "F0.0.fwd@r0": ("compute", 4, f00_fwd),
        "F0.1.ag@r0": ("fsdp", 4, 8), "F0.1.fwd@r0": ("compute", f00_fwd, f01_fwd),
        "F1.0.ag@r1": ("fsdp", rf0, ag10), "F1.0.fwd@r1": ("compute", ag10, f10),
        "F1.1.ag@r1": ("fsdp", max(rf1, ag10), ag11), "F1.1.fwd@r1": ("compute", max(f10, ag11), f11),
        "B1.0.I.dgrad@r1": ("compute", f11, b10_i), "B1.0.W.wgrad@r1": ("compute", b10_i, b10_w),
        "B1.0.W.rs@r1": ("fsdp", b10_w, b10_rs), "sendB1.0@r1": ("pp_sendB_r0", b10_w, sb0),
        "B1.1.I.dgrad@r1": ("compute", b10_w, b11_i), "B1.1.W.rs@r1": ("fsdp", b11_w, b11_rs),
        "B0.0.I.dgrad@r0": ("compute", sb0, b00_i), "B0.0.W.rs@r0": ("fsdp", b00_w, b00_w + 3),
        "B0.1.I.dgrad@r0": ("compute", b00_w, b01_i), "B0.1.W.rs@r0": ("fsdp", b01_w, b01_w + 3),
        # the data-parallel all-reduce after the rank's last op (the last reduce-scatter)
        "dp_grad_allreduce_r0@r0": ("dp_comm", b01_w + 3, b01_w + 3 + ar),
        "dp_grad_allreduce_r1@r1": ("dp_comm", b11_rs, b11_rs + ar),
    }
    for op, (stream, s, e) in want.items():
        got = sp[op]
        assert got[0] == stream, op
        assert got[1] == pytest.approx(s, abs=1e-6), op
        assert got[2] == pytest.approx(e, abs=1e-6), op
    # the replicas run alike, and a collective starts on every member at once
    for name in ("F0.1.ag", "B0.1.W.rs"):
        assert sp[f"{name}@r2"] == sp[f"{name}@r0"]
    for name in ("F1.1.ag", "B1.0.W.rs"):
        assert sp[f"{name}@r3"] == sp[f"{name}@r1"]


def test_the_example_groups_and_issue_order() -> None:
    """schedules/pipeline_fsdp.yaml (p = 2, dp = 2): every stage collective is over the ranks holding that stage,
    issued in one order on both; the all-gathers and reduce-scatters on stream fsdp."""
    spec = api.load(ROOT / "schedules" / "pipeline_fsdp.yaml")
    prog = api.lower_spec(spec)
    G = api.build(spec)
    colls = [o for o in prog.ops() if o.kind in ("all_gather", "reduce_scatter")]
    m = 4
    assert len(colls) == 4 * (2 * m + m)  # per rank: an all-gather per F and per B, a reduce-scatter per B
    for o in colls:
        assert tuple(o.group) == ((0, 2) if o.rank in (0, 2) else (1, 3)) and o.stream == "fsdp"
    io = G.graph["issue_order"]
    for a, b in ((0, 2), (1, 3)):
        dp_a = [x[0].split("@")[0] for x in io[a] if ".ag@" in x[0] or ".rs@" in x[0]]
        dp_b = [x[0].split("@")[0] for x in io[b] if ".ag@" in x[0] or ".rs@" in x[0]]
        assert dp_a == dp_b and len(dp_a) == 3 * m
    # the forward GEMM waits for its all-gather; the reduce-scatter for the weight gradient
    by = {(o.name, o.rank): o for o in prog.ops()}
    assert "F0.0.ag" in by[("F0.0.fwd", 0)].deps
    assert "B1.2.W.wgrad" in by[("B1.2.W.rs", 3)].deps


def test_a_stage_collective_that_would_hang_is_refused(tmp_path: Path) -> None:
    """Rank 2 issues a collective over the data-parallel group that rank 0 never issues: refused, with the
    issue-order grid, as for hand-written ops."""
    f = tmp_path / "hang.yaml"
    f.write_text("""\
schema_version: 1
name: hang
world_size: 4
ops:
  - {name: extra, kind: all_reduce, group: [0, 2], ranks: [2], bytes: 8}
pipeline:
  schedule: gpipe
  p: 2
  m: 2
  data_parallel: 2
  stage:
    forward:
      - {name: ag, kind: all_gather, group: dp, bytes: 1000}
      - {name: fwd, kind: compute, duration_us: 10, deps: [ag]}
""")
    with pytest.raises((GraphError, SpecError)) as e:
        api.build(api.load(f))
    assert "never on rank(s) [0]" in str(e.value)


def test_a_parameter_named_like_the_group_does_not_replace_it(tmp_path: Path) -> None:
    """``group: dp`` is the block's group even where a parameter ``dp`` exists (the example's)."""
    spec = api.load(ROOT / "schedules" / "pipeline_fsdp.yaml", dp=2)
    assert spec.pipeline.stage.forward[0]["group"] == "dp"


def test_a_rooted_collective_names_its_root_by_replica(tmp_path: Path) -> None:
    """``root: 1`` in a stage is the second replica's rank of that stage: 2 for stage 0, 3 for stage 1."""
    f = tmp_path / "bc.yaml"
    f.write_text(HAND.replace("{name: ag, kind: all_gather, group: dp, bytes: 1000, duration_us: 4}",
                              "{name: ag, kind: broadcast, group: dp, bytes: 1000, root: 1}"))
    prog = api.lower_spec(api.load(f))
    roots = {(o.name, o.rank): o.root for o in prog.ops() if o.kind == "broadcast" and ".0.ag" in o.name}
    assert roots == {("F0.0.ag", 0): 2, ("F0.0.ag", 2): 2, ("F1.0.ag", 1): 3, ("F1.0.ag", 3): 3}


def _refused(text: str, tmp_path: Path) -> SpecError:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(SpecError) as e:
        api.predict(f)
    return e.value


@pytest.mark.parametrize("sizes", ["send_bytes: [10, 20], recv_bytes: [10, 20]", "send_bytes: [[10, 20], [20, 10]]"])
def test_a_stage_all_to_all_with_per_peer_sizes_is_refused(tmp_path: Path, sizes: str) -> None:
    """One stage list is written once for every member of its group: per-peer sizes cannot differ per rank (and
    were costed as if rank 0 were a member: an internal error on the second stage)."""
    err = _refused(HAND.replace("{name: ag, kind: all_gather, group: dp, bytes: 1000, duration_us: 4}",
                                f"{{name: ag, kind: all_to_all, group: dp, {sizes}}}"), tmp_path)
    assert err.path == "pipeline.stage.forward[0].send_bytes" and "bytes" in (err.fix or "")


def test_a_stage_op_stream_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    """``stream: 3`` is refused as on a hand-written op (it reached the trace writer: an internal error)."""
    err = _refused(HAND.replace("bytes: 1000, duration_us: 4}", "bytes: 1000, duration_us: 4, stream: 3}"), tmp_path)
    assert err.path == "pipeline.stage.forward[0]" and "valid string" in str(err)


def test_a_stage_op_stream_not_declared_in_streams_is_refused(tmp_path: Path) -> None:
    """With ``streams:`` declared, a stage op's ``stream:`` typo is refused as a hand-written op's is."""
    text = HAND.replace("durations: recorded\n", "durations: recorded\nstreams: [compute, fsdp]\n")
    err = _refused(text.replace("bytes: 1000, duration_us: 4}", "bytes: 1000, duration_us: 4, stream: fsbp}"), tmp_path)
    assert err.path == "pipeline.stage.forward[0].stream" and "'fsdp'" in (err.fix or "")
    f = tmp_path / "ok.yaml"
    f.write_text(text.replace("bytes: 1000, duration_us: 4}", "bytes: 1000, duration_us: 4, stream: fsdp}"))
    assert api.predict(f).timeline.spans


def test_stage_errors_name_the_list_as_written(tmp_path: Path) -> None:
    """An error in a stage list names its key (``backward_weight``), not the phase letter (``W``)."""
    err = _refused(HAND.replace("deps: [wgrad]}", "deps: [later]}"), tmp_path)
    assert err.path == "pipeline.stage.backward_weight[1].deps"
