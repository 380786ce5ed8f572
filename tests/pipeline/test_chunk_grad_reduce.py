"""``overlap_grad_reduce`` in the ``pipeline:`` block (Megatron-LM ``--overlap-grad-reduce``, apex#1514): with v
model chunks per rank, each chunk's data-parallel gradient all-reduce is issued on ``dp_comm`` right after that
chunk's last backward, in the order the backward completes them, and the tied-embedding all-reduce and the
optimizer step wait for all of them. The issue order and dependencies of an interleaved p = 2, v = 2, m = 4 case,
its sizes, a timeline computed by hand that shows a chunk's reduction beside the other chunk's backward, and bad
input."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.errors import SpecError
from schedsim.graph.build import build_graph
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text

DATA = Path(__file__).resolve().parents[1] / "data"
UNIT = load_profile(str(DATA / "unit_profile.yaml"))

# interleaved 1F1B, p = 2 ranks × v = 2 chunks (rank 0: stages 0, 2; rank 1: stages 1, 3), m = 4, 2 replicas;
# unit stage costs (F = I = W = 1 µs), zero-byte p2p (free on the unit profile)
UNIT_CASE = """\
schema_version: 1
name: chunks
world_size: 4
pipeline:
  schedule: interleaved_1f1b
  p: 2
  v: 2
  m: 4
  data_parallel: 2
  overlap_grad_reduce: {overlap}
  grad_allreduce_bytes: 8000000
  activation_bytes: 0
  stage:
    forward: [{{name: f, kind: compute, duration_us: 1}}]
    backward_input: [{{name: i, kind: compute, duration_us: 1}}]
    backward_weight: [{{name: w, kind: compute, duration_us: 1}}]
"""


def _ops(text: str) -> dict[str, object]:
    G = build_graph(load_text(text, "c.yaml"))
    return {oid: d["op"] for oid, d in G.nodes(data=True)}


def _program(ops: dict[str, object], rank: int) -> list[str]:
    return [n for _, n in sorted((o.seq, o.name) for o in ops.values() if o.rank == rank)]  # type: ignore[attr-defined]


def test_each_chunk_is_reduced_after_its_last_backward_in_megatrons_order() -> None:
    """Megatron's interleaved order on rank 0 (p = 2, m = 4): F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0
    F2.3 B0.1 B2.2 B2.3 B0.2 B0.3; rank 1 likewise with stages 1, 3. The backward visits the later chunk (stage
    2 on rank 0) first, so chunk 1's gradients are complete after B2.3 and chunk 0's after B0.3: chunk 1's
    all-reduce is issued first, between B2.3 and B0.2, chunk 0's after B0.3 (each after the W op of the full
    backward, ``B<s>.3.W.w``). Each carries half of ``grad_allreduce_bytes`` over the rank's two replicas."""
    ops = _ops(UNIT_CASE.format(overlap="true"))
    for rank in range(4):
        r = rank % 2
        hi, lo = r + 2, r  # the rank's chunk 1 and chunk 0 stages
        prog = [n for n in _program(ops, rank) if not n.startswith(("send", "recv"))]
        at1 = prog.index(f"dp_grad_allreduce_r{r}_c1")
        at0 = prog.index(f"dp_grad_allreduce_r{r}_c0")
        assert prog[at1 - 1:at1 + 2] == [f"B{hi}.3.W.w", f"dp_grad_allreduce_r{r}_c1", f"B{lo}.2.I.i"]
        assert at0 == len(prog) - 1 and prog[at0 - 1] == f"B{lo}.3.W.w"
        for c, st in ((0, lo), (1, hi)):
            ar = ops[f"dp_grad_allreduce_r{r}_c{c}@r{rank}"]
            assert ar.kind == "all_reduce" and ar.stream == "dp_comm"  # type: ignore[attr-defined]
            assert ar.group == (r, r + 2) and ar.nbytes == 4_000_000  # type: ignore[attr-defined]
            assert ar.deps == (f"B{st}.3.W.w",)  # type: ignore[attr-defined]
        assert f"dp_grad_allreduce_r{r}" not in prog  # no whole-rank reduction beside them
    off = _ops(UNIT_CASE.format(overlap="false"))  # default: one reduction after the rank's last compute
    assert off["dp_grad_allreduce_r0@r0"].deps == ("B0.3.W.w",)  # type: ignore[attr-defined]
    assert "dp_grad_allreduce_r0_c1@r0" not in off


def test_a_timeline_computed_by_hand_overlaps_a_chunks_reduction_with_the_other_chunks_backward() -> None:
    """Rank 0, unit costs, p2p free: its forwards and backwards in the order above, each waiting for its input
    from rank 1 (one unit behind), give B2.3 ending at 23 and B0.2 I, W, B0.3 I, W running 23-27. An all-reduce of
    4 MB over 2 ranks on 1,000 GB/s links is 2·(n-1)/n · 4e6 B / 1e12 B/s = 4 µs (ring, latency 0). With
    ``overlap_grad_reduce`` chunk 1's runs 23-27 on dp_comm beside chunk 0's last two backwards, chunk 0's 27-31:
    the step ends at 31. Without, one 8 MB all-reduce (8 µs) after B0.3: 27-35."""
    hand = {"B2.3.W.w": (22, 23), "dp_grad_allreduce_r0_c1": (23, 27), "B0.2.I.i": (23, 24), "B0.2.W.w": (24, 25),
            "B0.3.I.i": (25, 26), "B0.3.W.w": (26, 27), "dp_grad_allreduce_r0_c0": (27, 31)}
    tl = simulate(lower(load_text(UNIT_CASE.format(overlap="true"), "c.yaml")), UNIT)
    by = tl.by_id()
    for name, (a, b) in hand.items():
        s = by[f"{name}@r0"]
        assert (s.start_s * 1e6, s.end_s * 1e6) == (pytest.approx(a), pytest.approx(b)), name
    assert by["dp_grad_allreduce_r0_c1@r0"].stream == "dp_comm" and by["B0.2.I.i@r0"].stream == "compute"
    assert tl.makespan_s * 1e6 == pytest.approx(31)
    tl_off = simulate(lower(load_text(UNIT_CASE.format(overlap="false"), "c.yaml")), UNIT)
    s = tl_off.by_id()["dp_grad_allreduce_r0@r0"]
    assert (s.start_s * 1e6, s.end_s * 1e6) == (pytest.approx(27), pytest.approx(35))
    assert tl_off.makespan_s * 1e6 == pytest.approx(35)


def test_chunk_sizes_from_the_transformer_and_the_end_of_step_waits_for_every_chunk() -> None:
    """p = 2, v = 2, 4 layers of h = 64, ffn 256 (49,984 parameters a layer: see test_pipeline_block), one layer a
    stage: stage 0 adds the word and position embedding (64,000 + 1,024), stage 3 the output layer and final
    LayerNorm (64,000 + 128). Each chunk's all-reduce moves 2 bytes a parameter of its stage; the tied-embedding
    all-reduce and the optimizer step wait for both of the rank's chunk reductions (Megatron's
    ``finalize_model_grads``: ``finish_grad_sync`` first)."""
    text = ("schema_version: 1\nname: dp\nworld_size: 4\npipeline:\n  schedule: interleaved_1f1b\n  p: 2\n  v: 2\n"
            "  m: 4\n  data_parallel: 2\n  overlap_grad_reduce: true\n  optimizer: true\n"
            "  tied_embedding_allreduce: true\n"
            "  transformer: {layers: 4, hidden: 64, ffn: 256, heads: 4, seq: 16, vocab: 1000, dtype: bf16}\n")
    ops = _ops(text)
    layer = 49984
    held = {0: layer + 64000 + 1024, 1: layer, 2: layer, 3: layer + 64000 + 128}
    for rank in range(4):
        r = rank % 2
        for c, st in ((0, r), (1, r + 2)):
            assert ops[f"dp_grad_allreduce_r{r}_c{c}@r{rank}"].nbytes == 2 * held[st]  # type: ignore[attr-defined]
        both = (f"dp_grad_allreduce_r{r}_c0", f"dp_grad_allreduce_r{r}_c1")
        assert ops[f"optimizer_step@r{rank}"].deps == both  # type: ignore[attr-defined]
        assert ops[f"tied_embedding_allreduce@r{rank}"].deps == both  # type: ignore[attr-defined]
        tail = [n for n in _program(ops, rank) if not n.startswith(("F", "B", "send", "recv"))]
        assert tail == [f"dp_grad_allreduce_r{r}_c1", f"dp_grad_allreduce_r{r}_c0", "tied_embedding_allreduce",
                        "optimizer_step"]


def test_overlap_grad_reduce_without_data_parallel_is_refused(tmp_path: Path) -> None:
    text = UNIT_CASE.format(overlap="true").replace("world_size: 4", "world_size: 2").replace(
        "  data_parallel: 2\n", "")
    with pytest.raises(SpecError) as e:
        lower(load_text(text, "c.yaml"))
    assert e.value.path == "pipeline.overlap_grad_reduce"
    assert "data_parallel is 1" in e.value.message
    assert e.value.fix == "set data_parallel: 2 or more, or remove overlap_grad_reduce"
    f = tmp_path / "c.yaml"
    f.write_text(text)
    r = CliRunner().invoke(app, ["predict", str(f), "--no-gantt", "-o", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert "pipeline.overlap_grad_reduce" in r.output and "set data_parallel: 2 or more" in r.output
    assert "Traceback" not in r.output


def test_overlap_grad_reduce_of_the_wrong_type_names_its_line(tmp_path: Path) -> None:
    text = UNIT_CASE.format(overlap="sometimes")
    with pytest.raises(SpecError) as e:
        load_text(text, "c.yaml")
    assert e.value.format().startswith("c.yaml:10:24: pipeline.overlap_grad_reduce: Input should be a valid "
                                       "boolean"), e.value.format()
    assert "(got 'sometimes')" in e.value.message and e.value.fix == "see docs/schedule_language.md, section pipeline"


@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("interleaved_1f1b", 2), ("zb_h1", 1), ("zbv", 2),
                                        ("dualpipev", 2), ("gpipe", 1), ("interleaved_zb", 2)])
def test_every_schedule_reduces_each_chunk_right_after_the_last_weight_gradient_of_its_stage(schedule, v) -> None:
    """p = 4, m = 8, 2 replicas: on every rank each chunk's reduction comes next in program order after the last
    W-phase op (a W, or a full B's W part) of its stage, and depends on it; there is one per chunk."""
    text = UNIT_CASE.format(overlap="true").replace("world_size: 4", "world_size: 8").replace(
        "schedule: interleaved_1f1b", f"schedule: {schedule}").replace("p: 2", "p: 4").replace(
        "m: 4", "m: 8").replace("v: 2", f"v: {v}")
    if schedule in ("zbv", "dualpipev"):
        text = text.replace(f"  v: {v}\n", "")  # V-shaped: two chunks per rank by construction
    ops = _ops(text)
    for rank in range(8):
        r = rank % 4
        prog = _program(ops, rank)
        red = [n for n in prog if n.startswith("dp_grad_allreduce")]
        assert sorted(red) == [f"dp_grad_allreduce_r{r}_c{c}" for c in range(v)]
        for n in red:
            at = prog.index(n)
            (dep,) = ops[f"{n}@r{rank}"].deps  # type: ignore[attr-defined]
            assert prog[at - 1] == dep
            stage = dep.split(".")[0][1:]
            later = [x for x in prog[at:] if x.startswith((f"W{stage}.", f"B{stage}."))]
            assert not any(x.startswith(f"W{stage}.") or ".W." in x for x in later), (n, later)


def test_a_custom_order_reduces_after_the_last_backward_it_runs_not_the_last_microbatch() -> None:
    """One stage, m = 2, written order F0 F1 B1 B0: the stage's last backward is microbatch 0's, so the reduction
    follows B0.0's W part (the rule is the last backward in program order; Megatron's schedules run it in
    microbatch order, so there it is the last microbatch's)."""
    text = ("schema_version: 1\nname: c\nworld_size: 2\npipeline:\n  schedule: custom\n  p: 1\n  m: 2\n"
            "  actions: {0: '0F0 0F1 0B1 0B0'}\n  data_parallel: 2\n  overlap_grad_reduce: true\n"
            "  grad_allreduce_bytes: 1000\n  stage:\n    forward: [{name: f, kind: compute, duration_us: 1}]\n"
            "    backward_input: [{name: i, kind: compute, duration_us: 1}]\n"
            "    backward_weight: [{name: w, kind: compute, duration_us: 1}]\n")
    ops = _ops(text)
    for rank in range(2):
        assert _program(ops, rank) == ["F0.0.f", "F0.1.f", "B0.1.I.i", "B0.1.W.w", "B0.0.I.i", "B0.0.W.w",
                                       "dp_grad_allreduce_r0_c0"]
        assert ops[f"dp_grad_allreduce_r0_c0@r{rank}"].deps == ("B0.0.W.w",)  # type: ignore[attr-defined]
