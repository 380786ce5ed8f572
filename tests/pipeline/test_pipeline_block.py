"""Pipeline blocks through the real loader, builder and simulator.

Unit costs (F = I = W = 1, B = 2) reproduce a reference table of makespans and bubbles computed by hand
from each schedule's per-rank order and cross-checked against torch 2.13's ``get_schedule_ops`` orders
(makespan in µs = units, bubble = 1 − busy/(p·makespan)), and the peak-memory row at p=4, m=8.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from schedsim.errors import SchedsimError, SpecError
from schedsim.graph.build import build_graph
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.sim.pipeline_metrics import pipeline_metrics
from schedsim.spec.loader import load_schedule, load_text

DATA = Path(__file__).resolve().parents[1] / "data"
UNIT = load_profile(str(DATA / "unit_profile.yaml"))

TABLE = {  # (p, m): {schedule: (makespan, bubble)}
    (4, 8): {"gpipe": (33, .2727), "1f1b": (33, .2727), "interleaved_1f1b": (57, .1579), "zb_h1": (27, .1111),
             "zbv": (51, .0588), "dualpipev": (54, .1111)},
    (8, 16): {"gpipe": (69, .3043), "1f1b": (69, .3043), "interleaved_1f1b": (117, .1795), "zb_h1": (55, .1273),
              "zbv": (103, .0680), "dualpipev": (110, .1273)},
    (8, 32): {"gpipe": (117, .1795), "1f1b": (117, .1795), "interleaved_1f1b": (213, .0986), "zb_h1": (103, .0680),
              "zbv": (199, .0352), "dualpipev": (206, .0680)},
}
PEAK_P4_M8 = {"gpipe": [8, 8, 8, 8], "1f1b": [4, 3, 2, 1], "interleaved_1f1b": [5.5, 4.5, 3.5, 2.5],
              "zb_h1": [4, 4, 4, 4], "zbv": [4, 4, 4, 4], "dualpipev": [4.5, 4.5, 4.5, 4.5]}


def run(schedule: str, p: int, m: int, **extra):
    ov = {"schedule": schedule, "p": p, "m": m, **extra}
    if schedule == "interleaved_1f1b":
        ov.setdefault("v", 2)
    spec = load_schedule(DATA / "pp_unit.yaml", ov)
    tl = simulate(lower(spec), UNIT)
    return tl, pipeline_metrics(tl)


@pytest.mark.parametrize("pm", list(TABLE))
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zbv", "dualpipev"])
def test_reference_table(schedule, pm):
    p, m = pm
    tl, met = run(schedule, p, m)
    makespan, bubble = TABLE[pm][schedule]
    assert tl.makespan_s * 1e6 == pytest.approx(makespan, abs=1e-6)
    assert met["bubble_of_makespan"]["overall"] == pytest.approx(bubble, abs=5e-5)


@pytest.mark.parametrize("schedule", list(PEAK_P4_M8))
def test_peak_memory_p4_m8(schedule):
    _tl, met = run(schedule, 4, 8)
    assert [met["peak_memory_units"][r] for r in range(4)] == PEAK_P4_M8[schedule]


def test_bubble_conventions_1f1b():
    # (p-1)/m of ideal compute and (p-1)/(m+p-1) of the makespan, on every rank (Megatron paper, sail-sg README)
    _tl, met = run("1f1b", 4, 8)
    for r in range(4):
        assert met["bubble_of_ideal"]["per_rank"][r] == pytest.approx(3 / 8)
        assert met["bubble_of_makespan"]["per_rank"][r] == pytest.approx(3 / 11)


HEAD = "schema_version: 1\nname: c\nworld_size: 2\npipeline:\n  schedule: custom\n  p: 2\n  m: 2\n" \
       "  stage: {forward: [{kind: compute, duration_us: 1}], backward_input: [{kind: compute, duration_us: 1}], " \
       "backward_weight: [{kind: compute, duration_us: 1}]}\n"


def custom(actions: str):
    return build_graph(load_text(HEAD + "  actions:\n" + actions, "c.yaml"))


def test_custom_actions_ok():
    G = custom("    0: 0F0 0F1 0B0 0B1\n    1: 1F0 1B0 1F1 1B1\n")
    assert "F0.0.0@r0" in G and "recvF1.1@r1" in G


@pytest.mark.parametrize("actions,needle", [
    ("    0: 0F0 0B0\n    1: 1F0 1B0 1F1 1B1\n", "microbatch"),                          # stage 0 never runs mb 1
    ("    0: 0F0 0F0 0F1 0B0 0B1\n    1: 1F0 1B0 1F1 1B1\n", "twice"),              # run twice
    ("    0: 0F0 0F1 0I0 0W1 0I1 0W0\n    1: 1F0 1B0 1F1 1B1\n", "W"),              # W before its I
    ("    0: 0F0 0F1 0B0 0B1 1F0\n    1: 1F0 1B0 1F1 1B1\n", "rank"),               # a stage on two ranks
    # a cross-rank wait cycle (0F0 0F1 0B1 0B0 vs 1F0 1B0 1F1 1B1 runs under torch: recvs are posted early, in send order)
    ("    0: 0F0 0B0 0F1 0B1\n    1: 1F0 1F1 1B0 1B1\n", "ERROR HERE"),
])
def test_hang_kinds_show_the_grid(actions, needle):
    with pytest.raises(SchedsimError) as e:
        custom(actions)
    msg = str(e.value)
    assert needle.lower() in msg.lower()
    assert "ERROR HERE" in msg  # the rank x step grid with the failing step marked


def test_too_few_microbatches():
    with pytest.raises(SchedsimError, match="(?i)microbatch") as e:
        load_schedule(DATA / "pp_unit.yaml", {"schedule": "dualpipev", "p": 4, "m": 4}) and build_graph(
            load_schedule(DATA / "pp_unit.yaml", {"schedule": "dualpipev", "p": 4, "m": 4}))
    assert "ERROR HERE" in str(e.value) or "775" in str(e.value) or "2p" in str(e.value).replace("·", "")


def test_unknown_pipeline_key_and_world_size():
    with pytest.raises(SpecError, match="did you mean 'schedule'"):
        build_graph(load_text(HEAD.replace("schedule: custom", "schedul: custom"), "c.yaml"))
    with pytest.raises(SpecError, match="p × data_parallel"):
        build_graph(load_text(HEAD.replace("world_size: 2", "world_size: 3") + "  actions: {0: '0F0', 1: '1F0'}\n",
                              "c.yaml"))


def test_megatron_transformer_shapes_and_tied_allreduce():
    spec = load_schedule("schedules/megatron_gpt_pp4.yaml")
    G = build_graph(spec)
    ops = {oid: d["op"] for oid, d in G.nodes(data=True)}
    qkv = ops["F0.0.qkv@r0"]
    assert (qkv.m, qkv.n, qkv.k, qkv.repeat) == (32, 3 * 4096, 4096, 8)  # 8 layers per stage
    assert ops["F3.0.logits@r3"].n == 50304
    tied = ops["tied_embedding_allreduce@r0"]
    assert tied.group == (0, 3) and tied.nbytes == 50304 * 4096 * 2
    assert G.graph["pipeline"]["p2p"] == "batched"
    vp = build_graph(load_schedule("schedules/megatron_gpt_pp4_vp2.yaml"))
    assert vp.graph["pipeline"]["v"] == 4 and vp.graph["pipeline"]["p2p"] == "overlapped"


def test_p2p_volume_matches_the_measured_nccl_counts():
    # S4's NCCL-volume table of its PP4-VP2 trace (docs/sources.md): device 0 sends 14,680,064 and device 1 16,777,216
    # fp16 elements (seq 32 x hidden 4096 per message) in one step
    tl = simulate(lower(load_schedule("schedules/megatron_gpt_pp4_vp2.yaml")), load_profile("rtx3090_pcie1x4"))
    met = pipeline_metrics(tl)
    assert met["p2p_bytes"][0]["sent"] == 14680064 * 2 and met["p2p_bytes"][0]["recv"] == 14680064 * 2
    assert met["p2p_bytes"][1]["sent"] == 16777216 * 2 and met["p2p_bytes"][2]["recv"] == 16777216 * 2
    assert met["p2p_bytes"][3]["sent"] == 14680064 * 2


def test_interleaved_on_one_rank_is_a_configuration_error_not_a_hang():
    # p=1: both chunks on rank 0, every p2p message from rank 0 to itself (was: the rendezvous check's hang report)
    with pytest.raises(SpecError) as e:
        build_graph(load_schedule(DATA / "pp_unit.yaml", {"schedule": "interleaved_1f1b", "p": 1, "m": 4, "v": 2}))
    assert e.value.path == "pipeline.p" and "p >= 2" in str(e.value) and "1f1b" in str(e.value)


def _flops_per_rank(path, **params) -> dict[int, float]:
    """FLOP of the compute ops of each rank (2·m·n·k·batch·repeat per GEMM)."""
    G = build_graph(load_schedule(path, params))
    out: dict[int, float] = {}
    for _, d in G.nodes(data=True):
        op = d["op"]
        if op.kind == "matmul":
            out[op.rank] = out.get(op.rank, 0.0) + 2.0 * op.m * op.n * op.k * op.batch * op.repeat
    return out


@pytest.mark.parametrize("schedule", ["gpipe", "interleaved_1f1b", "looped_bfs", "interleaved_zb", "zb_h1", "zbv",
                                      "dualpipev"])
def test_the_shipped_pipeline_example_does_the_same_work_per_rank_under_every_schedule(schedule):
    # per rank and microbatch: fwd 2·T·4h·h, dgrad 2·T·h·4h, wgrad 2·h·4h·T (T = h = 4096), in v chunks of 1/v
    # each: 3 · 8·4096³ FLOP per microbatch, 8 microbatches. looped_bfs and interleaved_zb (2 chunks per rank)
    # ran the full GEMMs in each chunk, twice the work (57.8 / 46.0 ms against 23.9 for 1f1b).
    path = Path(__file__).resolve().parents[2] / "schedules" / "pipeline_schedules.yaml"
    want = 8 * 3 * 8.0 * 4096 ** 3
    assert _flops_per_rank(path, schedule="1f1b") == {r: want for r in range(4)}
    assert _flops_per_rank(path, schedule=schedule) == {r: want for r in range(4)}


def test_chunks_per_rank_is_the_blocks_chunk_count():
    text = ("schema_version: 1\nname: c\nworld_size: 2\npipeline:\n  schedule: %s\n  p: 2\n%s"
            "  activation_memory_bytes: 1200/chunks_per_rank\n"
            "  stage:\n    forward: [{kind: compute, duration_us: 12/chunks_per_rank}]\n"
            "    backward_input: [{kind: compute, duration_us: 1}]\n")
    m4 = "  m: 4\n"
    for sched, extra, v in (("1f1b", m4, 1), ("interleaved_1f1b", m4 + "  v: 3\n", 3), ("looped_bfs", m4, 2),
                            ("custom", "  actions: {0: '0F0 2F0 2B0 0B0', 1: '1F0 3F0 3B0 1B0'}\n  m: 1\n", 2)):
        spec = load_text(text % (sched, extra), "c.yaml")
        assert spec.pipeline.stage.forward[0]["duration_us"] == 12 / v
        assert spec.pipeline.activation_memory_bytes == 1200 // v
    with pytest.raises(SpecError, match="chunks_per_rank") as e:
        load_text("schema_version: 1\nname: c\nworld_size: 2\nparams: {chunks_per_rank: 2}\n"
                  + (text % ("1f1b", "  m: 4\n"))[len("schema_version: 1\nname: c\nworld_size: 2\n"):], "c.yaml")
    assert "rename the parameter" in str(e.value)


@pytest.mark.parametrize("field,line", [("p", 6), ("m", 7), ("v", 8), ("group_size", 9)])
def test_chunks_per_rank_in_a_field_that_decides_it_names_the_field_line_and_fix(field, line):
    """p, m, v, group_size (and schedule, placement, actions, csv) decide the chunks per rank, so they are
    evaluated before chunks_per_rank exists: written there, or reaching them through a parameter (--set), the error
    names the file, the line and column of the value, the field, and where chunks_per_rank can be used."""
    lines = ["schema_version: 1", "name: c", "world_size: 2", "pipeline:", "  schedule: interleaved_1f1b", "  p: 2",
             "  m: 4", "  v: 2", "  group_size: 2", "  stage:", "    forward: [{kind: compute, duration_us: 12}]",
             "    backward_input: [{kind: compute, duration_us: 1}]"]
    lines[line - 1] = f"  {field}: chunks_per_rank"
    with pytest.raises(SpecError) as e:
        load_text("\n".join(lines) + "\n", "c.yaml")
    want = f"c.yaml:{line}:{len(field) + 5}: pipeline.{field}: chunks_per_rank cannot be used in {field}"
    assert e.value.format().startswith(want), e.value.format()
    assert "use chunks_per_rank in the stage ops" in e.value.fix
    lines[line - 1] = f"  {field}: x"
    with pytest.raises(SpecError) as e:  # a parameter holding the name, as --set x=chunks_per_rank gives it
        load_text("\n".join(lines[:3] + ["params: {x: 2}"] + lines[3:]) + "\n", "c.yaml", {"x": "chunks_per_rank"})
    assert e.value.format().startswith(f"c.yaml:{line + 1}:{len(field) + 5}: pipeline.{field}: chunks_per_rank "
                                       f"cannot be used in {field}"), e.value.format()


def test_a_pipeline_field_of_the_wrong_type_names_its_line_and_value():
    text = "schema_version: 1\nname: c\nworld_size: 2\nparams: {m: 4}\npipeline:\n  schedule: 1f1b\n  p: 2\n  m: m\n"
    with pytest.raises(SpecError) as e:
        load_text(text, "c.yaml", {"m": "abc"})
    assert e.value.format().startswith("c.yaml:8:6: pipeline.m: Input should be a valid integer"), e.value.format()
    assert "(got 'abc')" in e.value.message


def test_data_parallel_tail_reduces_every_parameter_before_the_optimizer_step():
    """p = 2, data_parallel = 2, 4 layers (2 per stage) of h = 64, ffn 256: 4h² + 2·h·ffn weights, the biases
    3h + h + ffn + h and the LayerNorms' 4h = 49,984 parameters a layer (break18: the linear biases were left out),
    99,968 a stage. The first stage adds the word and position embedding V·h + s·h = 64,000 + 1,024, the
    last the output layer and final LayerNorm V·h + 2h = 64,000 + 128 (Megatron-LM gpt_model.py: pre_process /
    post_process). Gradient all-reduce: 2 bytes a parameter, 329,984 B on rank 0 and 328,192 B on rank 1 (was
    197,632 on both: the embedding and the output layer left out); optimizer step 18 bytes a parameter. Order
    (Megatron finalize_model_grads, then the optimizer step): the data-parallel all-reduce on its own stream
    after the rank's last compute op, then the tied-embedding all-reduce and the optimizer step, which wait for
    it (was: after the optimizer step, on the compute stream)."""
    text = ("schema_version: 1\nname: dp\nworld_size: 4\npipeline:\n  schedule: 1f1b\n  p: 2\n  m: 2\n"
            "  data_parallel: 2\n  optimizer: true\n  tied_embedding_allreduce: true\n"
            "  transformer: {layers: 4, hidden: 64, ffn: 256, heads: 4, seq: 16, vocab: 1000, dtype: bf16}\n")
    G = build_graph(load_text(text, "dp.yaml"))
    ops = {oid: d["op"] for oid, d in G.nodes(data=True)}
    held = {0: 99968 + 64000 + 1024, 1: 99968 + 64000 + 128}
    for rank in range(4):
        r = rank % 2  # pipeline rank; ranks 2, 3 are the second replica
        ar = ops[f"dp_grad_allreduce_r{r}@r{rank}"]
        assert ar.nbytes == 2 * held[r] and ar.group == (r, r + 2) and ar.stream == "dp_comm"
        last = "B0.1.W.embedding_wgrad" if r == 0 else "B1.1.W.qkv_bias_grad"  # 1F1B ends with B of microbatch 1
        assert ar.deps == (last,)
        mine = sorted((op.seq, op.name) for op in ops.values() if op.rank == rank)
        tail = [n for _, n in mine if not n.startswith(("F", "B", "send", "recv"))]
        assert tail == [f"dp_grad_allreduce_r{r}", "tied_embedding_allreduce", "optimizer_step"]
        opt = ops[f"optimizer_step@r{rank}"]
        assert opt.nbytes == 18 * held[r] and opt.deps == (f"dp_grad_allreduce_r{r}",)
        assert ops[f"tied_embedding_allreduce@r{rank}"].deps == (f"dp_grad_allreduce_r{r}",)
    tl = simulate(lower(load_text(text, "dp.yaml")), UNIT)
    span = {s.id: s for s in tl.spans}
    for rank in range(4):
        r = rank % 2
        ar, opt = span[f"dp_grad_allreduce_r{r}@r{rank}"], span[f"optimizer_step@r{rank}"]
        compute_end = max(s.end_s for s in tl.spans if s.rank == rank and s.id[0] in "FB")
        assert compute_end <= ar.start_s and ar.end_s <= opt.start_s
