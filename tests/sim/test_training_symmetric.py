"""A training step lowered for one representative rank per class of ranks that run alike
(:func:`schedsim.lower.training.represented_ranks`) predicts what the lowering of every rank predicts: the same
makespan, the same start and end of every represented op, bit for bit, and the same metrics (per rank, totals,
pipeline bubble and memory, the training report's exposed communication by kind), on configurations small enough
to simulate in full: tp, pp, dp, virtual stages, cp, experts with and without capacity, tp_comm_overlap, full
recompute, groups within one node and across nodes (``dgx_h100``: shared NICs, max-min)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from schedsim.api import predict
from schedsim.errors import GraphError
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.lower.training import rank_classes, represented_ranks
from schedsim.report.training import training_report
from schedsim.sim.engine import simulate
from schedsim.sim.symmetry import symmetric_exact
from schedsim.spec.loader import load_text

BASE = """\
schema_version: 1
name: tiny
world_size: {world}
training:
  num_layers: 4
  hidden_size: 64
  num_attention_heads: 8
  seq_length: 32
  vocab_size: 1000
  micro_batch_size: 1
  global_batch_size: {gbs}
  tp: {tp}
  pp: {pp}
  bf16: true
"""

DISTOPT = "  sequence_parallel: true\n  use_distributed_optimizer: true\n  overlap_grad_reduce: true\n"
MOE = "  sequence_parallel: true\n  num_experts: 4\n  expert_model_parallel_size: 2\n  moe_router_topk: 2\n"

#: name -> (world, tp, pp, global batch, extra block lines, ranks the symmetric lowering keeps)
CASES: dict[str, tuple[int, int, int, int, str, int]] = {
    "tp2_pp2_dp2": (8, 2, 2, 8, "", 2),
    "across_nodes_dp8": (32, 4, 2, 32, DISTOPT + "  overlap_param_gather: true\n", 2),
    "tp8_across_nodes": (64, 8, 2, 32, DISTOPT, 2),
    "interleaved": (16, 2, 2, 16, "  num_layers_per_virtual_pipeline_stage: 1\n  overlap_grad_reduce: true\n", 2),
    "cp2": (32, 2, 2, 16, "  cp: 2\n", 4),
    "tp_comm_overlap": (16, 2, 2, 8, "  sequence_parallel: true\n  tp_comm_overlap: true\n", 4),
    "experts": (16, 2, 2, 8, MOE, 2),
    "experts_at_capacity": (16, 2, 2, 8, MOE + "  moe_expert_capacity_factor: 1.5\n", 8),
    "full_recompute_pp4": (16, 1, 4, 16, "  recompute_granularity: full\n  recompute_method: uniform\n"
                                         "  recompute_num_layers: 1\n", 4),
}


def _text(case: str) -> str:
    world, tp, pp, gbs, extra, _n = CASES[case]
    return BASE.format(world=world, tp=tp, pp=pp, gbs=gbs) + extra


def _metrics(run: Any) -> dict[str, Any]:
    d = run.metrics.to_dict()
    d.pop("critical_path")  # op ids: ties between ranks of one class pick another rank's op (the same times)
    return d


@pytest.mark.parametrize("case", sorted(CASES))
def test_representatives_predict_what_every_rank_predicts(case: str) -> None:
    text = _text(case)
    full = predict(load_text(text), "dgx_h100", full_ranks=True)
    sym = predict(load_text(text), "dgx_h100")
    world = full.program.world_size
    assert full.program.represented == ()
    assert len(sym.program.represented) == CASES[case][5]
    assert sym.program.N * world == full.program.N * len(sym.program.represented)
    assert sym.timeline.makespan_s == full.timeline.makespan_s  # tolerance 0
    fc, sc = full.timeline.columns, sym.timeline.columns
    at = {i: k for k, i in enumerate(full.program.ids())}
    rows = np.array([at[i] for i in sym.program.ids()])
    np.testing.assert_array_equal(np.asarray(sc.start_s), np.asarray(fc.start_s)[rows])
    np.testing.assert_array_equal(np.asarray(sc.end_s), np.asarray(fc.end_s)[rows])
    assert _metrics(sym) == _metrics(full)
    for run in (sym, full):  # plain ints, as timeline.json writes them
        assert [type(r) for r in run.metrics.ranks] == [int] * world
        assert sorted(run.metrics.ranks) == list(range(world))
    prof = load_profile("dgx_h100")
    spec = load_text(text)
    assert training_report(spec, sym.timeline, prof).to_dict() == training_report(spec, full.timeline,
                                                                                  prof).to_dict()
    assert sym.timeline.meta["represented"] == {"ranks": list(sym.program.represented), "of": world,
                                                "classes": rank_classes(spec).tolist()}


def test_classes_follow_megatron_rank_order() -> None:
    """tp fastest, then cp, dp, pp (Megatron's tp-cp-ep-dp-pp): TP2 x CP2 x DP2 x PP2 on 16 ranks keeps tp 0 and
    dp 0 of every (cp, pp): ranks 0, 2 (cp 1), 8, 10 (pp 1)."""
    spec = load_text(BASE.format(world=16, tp=2, pp=2, gbs=8) + "  cp: 2\n")
    assert represented_ranks(spec) == (0, 2, 8, 10)
    assert rank_classes(spec).tolist() == [0, 0, 2, 2, 0, 0, 2, 2, 8, 8, 10, 10, 8, 8, 10, 10]


def test_shared_nics_simulate_every_rank() -> None:
    """Two GPUs on one NIC: the full lowering shares it between two ranks of one class, which the representative
    alone would not, so predict lowers every rank there."""
    prof = load_profile("dgx_h100")
    assert symmetric_exact(prof)
    topo = prof.topology
    assert topo.nics is not None
    nics = topo.nics.model_copy(update={"per_node": 4, "gpu_to_nic": [0, 0, 1, 1, 2, 2, 3, 3]})
    shared = prof.model_copy(update={"topology": topo.model_copy(update={"nics": nics})})
    assert not symmetric_exact(shared)
    run = predict(load_text(_text("across_nodes_dp8")), shared)
    assert run.program.represented == ()
    assert "represented" not in run.timeline.meta


def test_the_op_list_loop_refuses_a_symmetric_program() -> None:
    prog = lower(load_text(_text("tp2_pp2_dp2")), symmetric=True)
    assert prog.represented == (0, 4)
    with pytest.raises(GraphError, match="symmetric Program"):
        simulate(prog, load_profile("dgx_h100"), gpu_model="replay")


@pytest.mark.parametrize("case", ["cp2", "interleaved", "tp_comm_overlap"])
def test_search_points_are_the_same_either_way(case: str) -> None:
    """``schedsim search``'s per-configuration run gives the same figures lowered symmetrically as in full."""
    import yaml

    from schedsim.search import run_point

    block = yaml.safe_load(_text(case))["training"]
    world = CASES[case][0]
    assert run_point("tiny", world, block, "dgx_h100", True) == run_point("tiny", world, block, "dgx_h100", False)


BIG = """\
schema_version: 1
name: big
world_size: 32
training:
  num_layers: 2
  hidden_size: 12288
  num_attention_heads: 96
  seq_length: 2048
  vocab_size: 51200
  bf16: true
  micro_batch_size: 1
  global_batch_size: 8
  tp: 8
  pp: 2
  sequence_parallel: true
  use_distributed_optimizer: true
  overlap_grad_reduce: true
"""


def test_identical_ranks_met_at_one_instant_run_alike() -> None:
    """With GEMMs that fill the GPU, ranks whose programs and ready times are the same start their collectives at
    the same time (rule wave-dispatch: the kernels handed over at one instant are placed once every event of it is
    done). Before, the event loop met a collective's members in rank order and placed each rank's kernels as it
    met it: on the ranks met first the GEMM issued after the collective took the SMs before the rendezvous
    completed, so there the collective started later (here a data-parallel reduce-scatter) than on the last one,
    and the full simulation's makespan was 0.37 % off the representatives' (the representative, its group's only
    member, was always met last)."""
    prof = load_profile("dgx_h100")
    full = simulate(lower(load_text(BIG)), prof)
    sym = simulate(lower(load_text(BIG), symmetric=True), prof)
    c = full.columns
    ids = c.ids_at(list(range(len(c))))
    rows = [ids.index(f"dp_grad_reduce_scatter_s1_b0@r{r}") for r in (16, 24)]  # tp 0 of dp 0 and 1, stage 1
    assert c.ready_s[rows[0]] == c.ready_s[rows[1]]
    assert c.start_s[rows[0]] == c.start_s[rows[1]]
    assert sym.makespan_s == full.makespan_s


#: A 1.3B-class layer (``schedules/megatron_gpt_train.yaml``'s shape, 2 layers a stage) whose GEMMs fill an H100,
#: with sequence parallelism, the distributed optimizer and overlapped gradient reduction: the backward's
#: asynchronous TP all-gathers and reduce-scatters are each issued just before the GEMM they overlap.
FILLING = """\
schema_version: 1
name: filling
world_size: {world}
training:
  num_layers: 4
  hidden_size: 2048
  num_attention_heads: 16
  seq_length: 2048
  vocab_size: 50257
  bf16: true
  micro_batch_size: 1
  global_batch_size: 8
  tp: {tp}
  pp: 2
  sequence_parallel: true
  recompute_granularity: selective
  use_distributed_optimizer: true
  overlap_grad_reduce: true
  overlap_param_gather: true
"""


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("prof", ["dgx_h100", "h200"])
def test_overlap_and_exposed_communication_agree_where_kernels_fill_the_gpu(tp: int, prof: str) -> None:
    """tp 2 and 4 × pp 2 × dp 2: the default (symmetric) prediction gives the makespan, the overlap ratio, every
    metric and the training report's exposed communication by kind that every rank's simulation gives, exactly
    (tolerance 0). Before kernels handed over at one instant waited for every event of it, the odd TP ranks'
    asynchronous TP collectives started up to 23 µs before the even ranks' (their GEMMs had taken the SMs) and
    ended with them, so those ranks' communication spans were longer, mostly under their GEMMs: the world's
    overlap ratio was 0.396 in full against 0.344 from the representatives (tp 2, world 16 of
    ``schedules/megatron_gpt_train.yaml`` on dgx_h100)."""
    text = FILLING.format(world=4 * tp, tp=tp)
    full = predict(load_text(text), prof, full_ranks=True)
    sym = predict(load_text(text), prof)
    assert len(sym.program.represented) == 2
    assert sym.timeline.makespan_s == full.timeline.makespan_s
    ms, mf = _metrics(sym), _metrics(full)
    assert ms["overlap_ratio"] == mf["overlap_ratio"]
    assert ms == mf
    p = load_profile(prof)
    spec = load_text(text)
    rs, rf = training_report(spec, sym.timeline, p).to_dict(), training_report(spec, full.timeline, p).to_dict()
    assert rs == rf


def test_predict_command_says_so_and_full_ranks_opts_out(tmp_path: Any) -> None:
    """``schedsim predict`` of a training block simulates the representatives and says so on stderr (timeline.json
    holds their ops, ``meta.represented`` names them); ``--full-ranks`` simulates every rank: the same metrics."""
    import json

    from typer.testing import CliRunner

    from schedsim.cli import app

    p = tmp_path / "s.yaml"
    p.write_text(_text("tp2_pp2_dp2"))
    got = {}
    for flag in ([], ["--full-ranks"]):
        out = tmp_path / ("full" if flag else "sym")
        r = CliRunner().invoke(app, ["predict", str(p), "-p", "dgx_h100", "--no-gantt", "--format", "json", "--out",
                                     str(out), *flag])
        assert r.exit_code == 0, r.stderr[-2000:]
        assert ("simulated 2 representative ranks of 8" in r.stderr) is not bool(flag)
        tl = json.loads((out / "timeline.json").read_text())
        got[bool(flag)] = json.loads(r.stdout)["metrics"], tl["meta"].get("represented"), tl["n_ops"]
    (m_sym, rep, n_sym), (m_full, rep_full, n_full) = got[False], got[True]
    assert rep == {"ranks": [0, 4], "of": 8, "classes": [0, 0, 0, 0, 4, 4, 4, 4]} and rep_full is None
    assert 4 * n_sym == n_full == m_full["ops"]  # 2 of 8 ranks written; the metrics count the world's
    m_sym.pop("critical_path"), m_full.pop("critical_path")
    assert m_sym == m_full


def _placed(prof: Any, placement: list[int]) -> Any:
    return prof.model_copy(update={"topology": prof.topology.model_copy(update={"placement": placement})})


#: name -> (schedule text, profile): ranks of one class whose groups lie on the nodes unlike their representative's
UNEVEN_LAYOUTS: dict[str, tuple[str, Any]] = {
    # tp 3 on 8-GPU nodes: the tp group of dp 0 is inside node 0, that of dp 2 spans nodes 0 and 1
    "tp3_dp8": (BASE.replace("hidden_size: 64", "hidden_size: 96").replace("num_attention_heads: 8",
                                                                          "num_attention_heads: 6")
                .format(world=24, tp=3, pp=1, gbs=24), "dgx_h100"),
    # 6 ranks a stage: the pipeline peers of dp 0 (ranks 0, 6) share node 0, those of dp 2 (4, 10) do not
    "stage_across_nodes": (BASE.format(world=12, tp=2, pp=2, gbs=12), "dgx_h100"),
    # a placement that moves one GPU: the tp group (2, 3) spans two nodes, (0, 1) does not
    "placement": (_text("across_nodes_dp8"),
                  _placed(load_profile("dgx_a100"), [16 if r == 2 else 2 if r == 16 else r for r in range(32)])),
}


@pytest.mark.parametrize("case", sorted(UNEVEN_LAYOUTS))
def test_ranks_laid_out_unlike_their_representative_simulate_every_rank(case: str) -> None:
    """The full lowering times such ranks differently (0.07 to 0.85 % on the makespan here, more on the
    communication metrics), so predict and search lower every rank there; the figures are the full ones."""
    from schedsim.search import run_point
    from schedsim.sim.symmetry import layout_alike

    text, prof = UNEVEN_LAYOUTS[case]
    prof = load_profile(prof) if isinstance(prof, str) else prof
    spec = load_text(text)
    assert symmetric_exact(prof) and not layout_alike(prof, spec)
    sym, full = predict(load_text(text), prof), predict(load_text(text), prof, full_ranks=True)
    assert sym.program.represented == ()
    assert _metrics(sym) == _metrics(full)
    import yaml

    if isinstance(UNEVEN_LAYOUTS[case][1], str):
        block, world = yaml.safe_load(text)["training"], spec.world_size
        assert run_point("tiny", world, block, prof.name, True) == run_point("tiny", world, block, prof.name, False)


def test_placement_that_keeps_the_layout_keeps_the_symmetric_lowering() -> None:
    """Rank r on node r % 4 of a dgx_a100: every tp pair spans two nodes and every data-parallel group four, alike
    for all ranks of a class: two representatives, the full figures."""
    prof = _placed(load_profile("dgx_a100"), [(r % 4) * 8 + r // 4 for r in range(32)])
    text = _text("across_nodes_dp8")
    sym, full = predict(load_text(text), prof), predict(load_text(text), prof, full_ranks=True)
    assert sym.program.represented == (0, 16)
    assert sym.timeline.makespan_s == full.timeline.makespan_s
    assert _metrics(sym) == _metrics(full)


def test_analyze_and_compare_of_a_symmetric_timeline_count_every_rank(tmp_path: Any) -> None:
    """timeline.json of a symmetric prediction, read back by ``analyze`` and ``compare``: the per-rank figures
    and the totals over ranks are the world's (each rank its representative's), as the full prediction's are,
    and both commands say that the spans are the representatives' only (they summed and listed 2 of 8 ranks,
    ranks 1-3 and 5-7 with no compute, and an exposed communication 4 times too small)."""
    from schedsim.compare import compare_timelines, load_timeline_arg
    from schedsim.report.analysis import format_report
    from schedsim.sim.metrics import Metrics
    from schedsim.trace.analyze import load_any
    from schedsim.trace.commands import write_timeline_json

    text = _text("tp2_pp2_dp2")
    sym, full = predict(load_text(text), "dgx_h100"), predict(load_text(text), "dgx_h100", full_ranks=True)
    paths = {}
    for name, run in (("sym", sym), ("full", full)):
        paths[name] = tmp_path / f"{name}.json"
        write_timeline_json(run.timeline, paths[name], run.metrics.to_dict())
    back = load_timeline_arg(paths["sym"])
    got = Metrics.of(back).to_dict()  # the metrics of the timeline alone: no pipeline table or memory peak
    assert got == {k: v for k, v in sym.metrics.to_dict().items() if k not in ("pipeline", "memory_peak")}
    m_full = full.metrics
    assert sorted(Metrics.of(back).ranks) == list(range(8))
    assert Metrics.of(back).exposed_comm_s == pytest.approx(m_full.exposed_comm_s, rel=1e-12)
    cmp = compare_timelines(back, load_timeline_arg(paths["full"]))
    assert cmp.overlap.exposed_comm_s.pred == pytest.approx(m_full.exposed_comm_s, rel=1e-12)
    assert [cmp.by_rank[r].compute.pred_s for r in range(8)] == [m_full.ranks[r].busy_compute_s for r in range(8)]
    assert any("2 representative ranks of 8" in w for w in cmp.warnings)
    report = format_report(load_any([str(paths["sym"])])[1])
    assert "simulated 2 representative ranks of 8" in report.splitlines()[1]


def test_hand_written_ops_beside_a_training_block_simulate_every_rank() -> None:
    """The ranks of a class run alike only when the training block writes all their ops: a hand-written all_reduce
    on tp group [0, 1] (rank 1 not represented) was refused by predict as 'F0.0.tp_embedding' issued on rank 0 but
    never on rank 1, and a hand-written op on rank 3 alone was dropped; such a schedule is lowered in full."""
    spec = load_text("schema_version: 1\nname: x\nworld_size: 4\ntraining: {num_layers: 2, hidden_size: 64, "
                     "num_attention_heads: 8, seq_length: 32, micro_batch_size: 2, global_batch_size: 16, "
                     "vocab_size: 1000, tp: 2, bf16: true}\nops:\n"
                     "  - {name: a, kind: all_reduce, bytes: 8, group: [0, 1], ranks: [0, 1]}\n"
                     "  - {name: c, kind: compute, duration_us: 1000, ranks: [3]}\n")
    prof = load_profile("dgx_h100")
    assert symmetric_exact(prof) and not symmetric_exact(prof, spec=spec)
    run = predict(spec, prof)
    full = predict(spec, prof, full_ranks=True)
    assert not run.program.represented and run.timeline.makespan_s == full.timeline.makespan_s
    assert {"a", "c"} <= {o.split("@")[0] for o in run.program.ids()}


MOE_CAP = """\
schema_version: 1
name: t
world_size: 16
training:
  num_layers: 12
  hidden_size: 64
  num_attention_heads: 8
  seq_length: 128
  vocab_size: 50257
  micro_batch_size: 1
  global_batch_size: 16
  tp: 4
  pp: 2
  context_parallel_size: 2
  bf16: true
  sequence_parallel: true
  num_experts: 2
  expert_model_parallel_size: 2
"""


def _same_times(sym: Any, full: Any) -> None:
    assert sym.timeline.makespan_s == full.timeline.makespan_s  # tolerance 0
    at = {i: k for k, i in enumerate(full.program.ids())}
    rows = np.array([at[i] for i in sym.program.ids()])
    np.testing.assert_array_equal(np.asarray(sym.timeline.columns.start_s),
                                  np.asarray(full.timeline.columns.start_s)[rows])


def test_a_step_whose_full_lowering_passes_the_cold_rerun_cap_predicts_alike() -> None:
    # break18: the cold rerun (rule host-issue, launch.cold_first_call_us) is decided by the Program's size (at most
    # COLD_RERUN_MAX ops). Here the 4 representatives hold 25,344 ops and every rank 101,376: the symmetric run ran
    # the step cold (first embedding kernel ready at 23.085 µs, makespan 94.7716 ms on h200), the full one warm
    # (5.985 µs, 94.6736 ms); `predict` and `search` (symmetric) disagreed with `--full-ranks`
    from schedsim.sim.waves_columns import COLD_RERUN_MAX

    full = predict(load_text(MOE_CAP), "h200", full_ranks=True)
    sym = predict(load_text(MOE_CAP), "h200")
    assert len(sym.program.represented) == 4 and sym.program.N <= COLD_RERUN_MAX < full.program.N
    _same_times(sym, full)


@pytest.mark.parametrize("where", ["at the representatives' ops", "between", "below every rank's ops",
                                   "at every rank's ops"])
def test_the_cold_rerun_is_the_full_lowerings_either_side_of_the_cap(where: str, monkeypatch: Any) -> None:
    # the cap moved across the two sizes: both runs decide as the full lowering does (cold at and above its ops)
    import schedsim.sim.waves_columns as wc

    n_sym, n_full = predict(load_text(MOE_CAP), "h200").program.N, 101_376
    cap = {"at the representatives' ops": n_sym, "between": (n_sym + n_full) // 2,
           "below every rank's ops": n_full - 1, "at every rank's ops": n_full}[where]
    monkeypatch.setattr(wc, "COLD_RERUN_MAX", cap)
    full = predict(load_text(MOE_CAP), "h200", full_ranks=True)
    assert full.program.N == n_full
    _same_times(predict(load_text(MOE_CAP), "h200"), full)
