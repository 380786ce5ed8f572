"""Profile fields calibrate derives (issue 8 §3): nccl.p2p_one_way_speedup and launch.stream_switch_us."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from exec_helpers import DATA

from executor import calibrate as C
from executor import calibrate_bench as CB
from executor import calibrate_copy as CC
from executor import calibrate_gemm as CG
from executor import calibrate_graph as CGR
from executor.calibrate_comm import p2p_one_way_speedup
from schedsim.hardware.profile import HardwareProfile

torch = pytest.importorskip("torch")


def test_one_way_speedup_is_exchange_over_one_way_at_the_largest_common_size() -> None:
    one_way = {1024: 8.0, 2**20: 10.0, 2**26: 200.0}  # the one-way sweep went further
    exchange = {1024: 9.0, 2**20: 16.0}
    assert p2p_one_way_speedup(one_way, exchange) == (1.6, 2**20)


def test_one_way_speedup_is_at_least_one_and_none_without_a_common_size() -> None:
    assert p2p_one_way_speedup({4096: 12.0}, {4096: 10.0}) == (1.0, 4096)  # a slower one-way run is not < 1
    assert p2p_one_way_speedup({4096: 12.0}, {8192: 10.0}) is None
    assert p2p_one_way_speedup({4096: 0.0}, {4096: 10.0}) is None


def test_assemble_writes_both_fields_from_the_2xh200_measurement(monkeypatch) -> None:
    """The raw JSON calibrate wrote on 2 H200s (2026-11-30), assembled into a profile that validates."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(multi_processor_count=132))
    raw = json.loads((DATA / "calibrate_raw_h200x2_2026-11-30.json").read_text())
    raw["host"]["stream_switch_us"] = 1.234  # that run predates the measurement
    d = C._assemble(CB.CalibrateOptions(out=Path("x.yaml")), raw, SimpleNamespace(cuda=True, device=None),
                    "NVIDIA H200")
    p = HardwareProfile.model_validate(d)
    assert p.launch.stream_switch_us == 1.23
    one = {r["size"]: r["time_us"] for r in raw["collectives"]["p2p_unbatched"]}
    two = {r["size"]: r["time_us"] for r in raw["collectives"]["sendrecv"]}
    top = max(set(one) & set(two))  # 256 MiB: 896.3 us exchanged against 801.0 us one way
    assert top == 2**28
    assert p.nccl.p2p_one_way_speedup == round(two[top] / one[top], 3) == 1.119


def test_gemm_grid_is_the_longest_kernels_ctas_of_a_kineto_trace() -> None:
    # a split-K GEMM launches the GEMM (long) and a reduction (short): the GEMM's grid counts
    events = [{"cat": "kernel", "name": "reduce", "dur": 3.0, "args": {"grid": [64, 1, 1]}},
              {"cat": "kernel", "name": "sgemm", "dur": 700.0, "args": {"grid": [8, 8, 2]}},
              {"cat": "cuda_runtime", "dur": 900.0, "args": {}}]
    assert CG.longest_kernel_ctas(events) == 128
    assert CG.longest_kernel_ctas([{"cat": "kernel", "dur": 1.0, "args": {}}]) is None  # no grid recorded
    assert CG.longest_kernel_ctas([]) is None


def test_assemble_keeps_the_base_graph_edge_when_not_measured_and_derives_it_when_measured(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(multi_processor_count=132))
    raw = json.loads((DATA / "calibrate_raw_h200x2_2026-11-30.json").read_text())
    ctx = SimpleNamespace(cuda=True, device=None)
    d = C._assemble(CB.CalibrateOptions(out=Path("x.yaml")), raw, ctx, "NVIDIA H200")
    from schedsim.hardware.profile import load_profile

    base_edge = load_profile("h200").launch.graph_cross_stream_edge_us
    assert d["launch"]["graph_cross_stream_edge_us"] == base_edge > 0  # the base h200's, kept with the new launch dict
    raw["launch"].update(graph_fork_us=7.94, graph_fork_nowait_us=6.65)  # the 2026-12-01 03:13 probe's layers
    d = C._assemble(CB.CalibrateOptions(out=Path("x.yaml")), raw, ctx, "NVIDIA H200")
    edge = d["launch"]["graph_cross_stream_edge_us"]
    share = 1.29 - CGR.graph_edge_us(d, 7.94, 6.65)  # what the model gives the edge itself with this profile
    assert 0.0 < share < 0.3 and edge == round(1.29 - share, 2)
    assert HardwareProfile.model_validate(d).launch.graph_cross_stream_edge_us == edge


def test_graph_edge_is_the_measured_extra_less_the_models_share_and_never_negative() -> None:
    from schedsim.hardware.profile import load_profile

    d = load_profile("h200x2").model_dump()
    base = CGR.graph_edge_us(d, 7.94, 6.65)
    assert CGR.graph_edge_us(d, 8.94, 6.65) == pytest.approx(base + 1.0)  # linear in the measured difference
    assert CGR.graph_edge_us(d, 6.65, 6.65) == 0.0  # the model already gives more than nothing: clamped
    # h200x2's model puts 0.06 us of the 1.29 us on the edge itself (waves, graph launch), so 1.23 is left
    assert base == pytest.approx(1.229, abs=0.01)


def test_duplex_factor_of_a_stream_that_made_no_progress_beside_the_other_is_not_zero() -> None:
    # d2h (ends first at 4.4 s) 10 % slower; h2d needed 4.0 s alone and ended 4.1 s or more after d2h: it did no
    # measurable work while both ran. Its factor is at least its whole run's slowdown, not 0 (the formula's
    # negative value, clamped) and not a ZeroDivisionError (exactly 4.0 s after), which ended calibrate.
    for both_h2d in (8.4, 8.5):
        h, d = CC.duplex_factors(4.0, 4.0, both_h2d, 4.4)
        assert d == pytest.approx(0.1) and h == pytest.approx(both_h2d / 4.0 - 1.0)
    d, h = CC.duplex_factors(4.0, 4.0, 4.4, 8.5)[::-1]  # the same with the directions swapped
    assert d == pytest.approx(8.5 / 4.0 - 1.0) and h == pytest.approx(0.1)
    h, d = CC.duplex_factors(4.0, 4.0, 5.0, 4.4)  # the docstring's case: work beside the first stream is positive
    assert (round(h, 4), round(d, 4)) == (0.2941, 0.1)


def test_median_costs_per_kind_and_executor_extra_stays_the_difference() -> None:
    from executor.calibrate_host import median_costs

    runs = [{"eager_per_op_us": 12.0, "executor_lean_per_op_us": 15.0, "by_hand_per_op_us": 14.0,
             "executor_extra_per_op_us": 1.0, "event_wait_us": 3.0},
            {"eager_per_op_us": 23.5, "executor_lean_per_op_us": 29.0, "by_hand_per_op_us": 28.5,
             "executor_extra_per_op_us": 0.5},
            {"eager_per_op_us": 16.0, "executor_lean_per_op_us": 18.0, "by_hand_per_op_us": 19.0,
             "executor_extra_per_op_us": 0.0, "event_wait_us": 5.0}]
    m = median_costs(runs)
    assert m["eager_per_op_us"] == 16.0 and m["event_wait_us"] == 4.0  # a kind only two processes measured
    # median lean 18.0 minus median by hand 19.0 is < 0: no extra (not the median of the three extras, 0.5)
    assert m["executor_extra_per_op_us"] == 0.0
    assert median_costs([]) == {}


def test_fresh_process_is_a_world_of_one_whatever_the_launcher_set(monkeypatch) -> None:
    """Under torchrun, rank 0's child must not join the parent's process group (it would hang)."""
    from executor.calibrate_host import fresh_process_costs

    for k, v in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "1", "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(k, v)
    logs: list[str] = []
    runs = fresh_process_costs("cpu", 1, logs.append, timeout_s=120)
    assert len(runs) == 1, logs
    assert runs[0]["eager_per_op_us"] > 0 and runs[0]["memcpy_call_us"] > 0 and "event_wait_us" not in runs[0]
    assert logs and logs[0].startswith("[launch] fresh process 1/1: eager_per_op_us")
    # the tp layers' probes ran on the gloo rank (tp_layer_costs): the GEMV alone and paired, eight layers after the
    # executor's iteration start, and the fields derived from them (tp_fields)
    r = runs[0]
    assert r["gemv_loop_us"] > 0 and r["gemv_pair_us"] > 0
    assert all(r[f"warmup_layer{k}_us"] > 0 for k in range(1, 9)) and "warmup_layer9_us" not in r
    assert r["collective_after_kernel_us"] == round(max(0.0, r["gemv_pair_us"] - r["gemv_loop_us"]), 9)
    first = r["first_op_extra_us"] + r["first_collective_extra_us"]
    assert r["warmup_pair1_extra_us"] == round(max(0.0, r["warmup_layer1_us"] - r["gemv_pair_us"] - first), 9)
    assert [r[f"warmup_pair{k}_extra_us"] for k in (2, 3)] == [
        round(max(0.0, r[f"warmup_layer{k}_us"] - r["gemv_pair_us"]), 9) for k in (2, 3)]


def test_fresh_process_with_unreadable_or_failed_output_is_left_out(monkeypatch) -> None:
    import subprocess

    from executor import calibrate_host as CH

    outs = iter([subprocess.CompletedProcess([], 0, "{not json\n", ""),
                 subprocess.CompletedProcess([], 1, "", "Traceback ...\nImportError: no torch\n"),
                 subprocess.CompletedProcess([], 0, 'noise\n{"eager_per_op_us": 12.5}\n', "")])
    monkeypatch.setattr(CH.subprocess, "run", lambda *a, **k: next(outs))
    logs: list[str] = []
    assert CH.fresh_process_costs("cpu", 3, logs.append) == [{"eager_per_op_us": 12.5}]
    assert "1/3: unreadable result" in logs[0] and "2/3 failed (exit 1), left out: ImportError: no torch" in logs[1]


def test_calibrate_host_main_without_cuda_is_a_clean_error(capsys, monkeypatch) -> None:
    from executor import calibrate_host as CH

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert CH.main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --device cuda: CUDA is not available") and "Traceback" not in err


def test_host_fields_are_launch_fields_and_launch_fields_rounds_only_those() -> None:
    from executor.calibrate_host import HOST_FIELDS, launch_fields
    from schedsim.hardware.profile import Launch

    assert set(HOST_FIELDS) <= set(Launch.model_fields)
    got = launch_fields({"eager_per_op_us": 12.345, "collective_loop_us": 31.0, "event_wait_us": 2.004})
    assert got == {"eager_per_op_us": 12.35, "event_wait_us": 2.0}  # measurement-only keys are not profile fields


def test_the_warm_up_layers_become_the_collective_warmup_list_only_when_all_three_are_there() -> None:
    from executor.calibrate_host import launch_fields, tp_fields
    from schedsim.hardware.profile import Launch

    res = tp_fields({"gemv_loop_us": 9.03, "gemv_pair_us": 24.97, "first_op_extra_us": 3.63,
                     "first_collective_extra_us": 1.89, "warmup_layer1_us": 45.0, "warmup_layer2_us": 29.1,
                     "warmup_layer3_us": 24.5, "warmup_layer4_us": 26.0})
    got = launch_fields(res)
    # 24.97 - 9.03; 45.0 - 24.97 - (3.63 + 1.89); 29.1 - 24.97; 24.5 - 24.97 < 0: 0
    assert got == {"collective_after_kernel_us": 15.94, "first_op_extra_us": 3.63, "first_collective_extra_us": 1.89,
                   "collective_warmup_us": [14.51, 4.13, 0.0]}
    from schedsim.hardware.profile import load_profile

    base = load_profile("h200").launch.model_dump()
    assert Launch.model_validate({**base, **got}).collective_warmup_us == [14.51, 4.13, 0.0]
    del res["warmup_pair3_extra_us"]
    assert "collective_warmup_us" not in launch_fields(res)
    assert tp_fields({"mixed_pair_us": 29.0}) == {"mixed_pair_us": 29.0}  # no GEMV probe: nothing derived


def test_assemble_takes_the_measured_timing_event_span_or_keeps_the_bases(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(multi_processor_count=132))
    raw = json.loads((DATA / "calibrate_raw_h200x2_2026-11-30.json").read_text())  # predates the measurement
    ctx = SimpleNamespace(cuda=True, device=None)
    d = C._assemble(CB.CalibrateOptions(out=Path("x.yaml")), raw, ctx, "NVIDIA H200")
    assert d["launch"]["graph_timing_event_us"] == 2.1 and d["launch"]["graph_timing_gap_us"] == 1.26  # the base's
    raw["launch"].update(graph_timing_event_us=2.046, graph_timing_gap_us=1.28)
    d = C._assemble(CB.CalibrateOptions(out=Path("x.yaml")), raw, ctx, "NVIDIA H200")
    p = HardwareProfile.model_validate(d)
    assert p.launch.graph_timing_event_us == 2.05 and "graph_timing_event_us = span" in p.launch.source
    assert p.timed_graph().launch.graph_timed and p.timed_graph().launch.graph_timing_event_us == 2.05
    assert p.launch.graph_timing_gap_us == 1.28


def test_fork_rows_are_derived_per_gemm_shape_from_the_main_stream_alone(monkeypatch) -> None:
    # the fork probe at a GEMM's shape: with the aux GEMM waiting, and the main stream alone; the row is the
    # measured difference less the model's own (which, for a shape, is what graph_edge_us simulates with that shape)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(multi_processor_count=132))
    raw = json.loads((DATA / "calibrate_raw_h200x2_2026-11-30.json").read_text())
    raw["launch"].update(graph_fork_us=7.92, graph_fork_nowait_us=6.61, graph_main_only_us=6.20)
    raw["gemm_fork"] = [["bf16", 64, 2048, 2048, 30.0, 8.31], ["bf16", 16, 512, 512, 5.0, 5.0]]
    ctx = SimpleNamespace(cuda=True, device=None)
    d = C._assemble(CB.CalibrateOptions(out=Path("x.yaml")), raw, ctx, "NVIDIA H200")
    rows = d["launch"]["graph_fork_edges"]
    big = CGR.graph_edge_us(d, 30.0, 8.31, ("bf16", 64, 2048, 2048))
    assert rows == [["bf16", 64, 2048, 2048, round(big, 3)], ["bf16", 16, 512, 512, 0.0]]  # none measured: 0
    assert 0.0 < big < 30.0 - 8.31  # the model's own share taken off
    assert CGR.graph_edge_us(d, 31.0, 8.31, ("bf16", 64, 2048, 2048)) == pytest.approx(big + 1.0)
    # the constant now takes the main stream alone as its base: 7.92 - 6.20 less the model's share
    assert d["launch"]["graph_cross_stream_edge_us"] == round(CGR.graph_edge_us(d, 7.92, 6.20), 2)
    assert HardwareProfile.model_validate(d).launch.graph_fork_edges[0][4] == round(big, 3)


def test_a_persistent_gemm_counts_its_output_tiles() -> None:
    # one H200, 2026-12-03 (benchmarks/probes/sm/dispatch_order.py): cuBLAS ran bf16 4096x2048x8192 as 132 CTAs (one
    # per SM) over 256x128 tiles: (2048 / 256) * (4096 / 128) = 256 tiles, so 124 CTAs run 2 tiles, 8 run one
    # and free their SMs half-way, as a 256-CTA kernel's partial second wave would
    big = [{"cat": "kernel", "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "dur": 170.0,
            "args": {"grid": [2, 66, 1]}}]
    assert CG.longest_kernel_ctas(big, 4096, 2048, 132) == 256
    assert CG.longest_kernel_ctas(big) == 132  # without the shape: the grid
    # a grid of fewer CTAs than SMs is no persistent kernel: 128 CTAs of 128x128 tiles, one each
    one_each = [{"cat": "kernel", "name": "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT", "dur": 43.0,
                 "args": {"grid": [2, 64, 1]}}]
    assert CG.longest_kernel_ctas(one_each, 2048, 1024, 132) == 128
    # split-K: its CTAs share tiles, the grid counts (a split-K nvjet as a persistent grid keeps 132)
    split = [{"cat": "kernel", "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_splitK_NNT", "dur": 338.0,
              "args": {"grid": [2, 66, 1]}}]
    assert CG.longest_kernel_ctas(split, 2048, 1024, 132) == 132
    assert CG.persistent_tiles("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>", 8192, 4096) == 1024
    assert CG.persistent_tiles("at::native::vectorized_elementwise_kernel<8>", 64, 64) is None


def test_sm_stream_record_sets_the_profile_field_and_says_where() -> None:
    d = {"gpu": {"sm_stream_GBps": 69.0, "source": "base"}}
    C._set_sm_stream(d, None, "here")  # not measured (CPU ranks, a GEMM holding every SM): the base's stays
    assert d["gpu"] == {"sm_stream_GBps": 69.0, "source": "base"}
    C._set_sm_stream(d, {"free_sms": 4, "gemm_ctas": 128, "bytes": 12.6e6, "GBps_per_sm": 71.3, "runs": 5}, "here")
    assert d["gpu"]["sm_stream_GBps"] == 71.3
    assert "12.6 MB on the 4 SMs a 128-CTA bf16 GEMM leaves free" in d["gpu"]["source"]


def test_graph_replay_figures_by_hand_on_a_stand_in_device():
    """executor.calibrate_graph.graph_replay_figures with a stand-in torch (the CUDA calls recorded, the clocks
    fixed): a 300-node chain timed at 600 µs is 2.0 µs a node; the event pair around the one-node replay reads
    8.9 µs, so the graph starts 8.9 - 2.0 = 6.9 µs after the event; 200 timed replays of the one-node graph
    (graph_launch_us), 103 more for the start (3 untimed), 10 timed chains by ``time_one``."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from executor.calibrate_graph import graph_replay_figures

    calls: dict[str, int] = {"replay1": 0, "replayN": 0, "matmul": 0}

    class Graph:
        def __init__(self) -> None:
            self.nodes = 0

        def replay(self) -> None:
            calls["replay1" if self.nodes == 1 else "replayN"] += 1

    current: list[Graph] = []

    @contextmanager
    def graph(g: Graph, stream: object = None):
        current.append(g)
        yield
        current.pop()

    def matmul(a: object, b: object, out: object = None) -> None:
        calls["matmul"] += 1
        if current:
            current[-1].nodes += 1

    tensor = SimpleNamespace(to=lambda dt: "t")
    cuda = SimpleNamespace(Stream=lambda device=None: "s", CUDAGraph=Graph, graph=graph, synchronize=lambda *a: None,
                           Event=lambda enable_timing=False: SimpleNamespace(record=lambda: None,
                                                                             elapsed_time=lambda other: 0.0089))
    torch = SimpleNamespace(cuda=cuda, matmul=matmul, bfloat16="bf16", rand=lambda *a, **k: tensor,
                            empty=lambda *a, **k: "c")

    def time_one(fn, iters=None):
        for _ in range(iters):
            fn()
        return 600e-6

    b = SimpleNamespace(torch=torch, cuda=True, ctx=SimpleNamespace(device="cuda:0"), sync=lambda: None,
                        time_one=time_one)
    got = graph_replay_figures(b)
    assert got["graph_node_gpu_us"] == pytest.approx(2.0)
    assert got["graph_start_us"] == pytest.approx(6.9)
    assert got["graph_launch_us"] >= 0.0
    assert calls == {"replay1": 200 + 103, "replayN": 10, "matmul": 301}
