"""The cost model's parts (schedsim.gpu.cost, schedsim.gpu.gemm), each used alone on the toy profile (tests/conftest:
no kernel floor, fp32 peak 100 TFLOP/s at efficiency 1, HBM 1000 GB/s, h2d 10 GB/s, d2d 1000 GB/s, one fp32
1000³ GEMM measured at 1 ms), and CostModel timing each kind's rule with them."""

from __future__ import annotations

import pytest

from schedsim.gpu.cost import CopyEngines, CostModel, HostLaunch, Roofline
from schedsim.gpu.gemm import GemmCost
from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile
from tests.conftest import toy_profile_dict


def _profile(**launch: float) -> HardwareProfile:
    d = toy_profile_dict()
    d["launch"].update(launch)
    return HardwareProfile.model_validate(d)


def test_the_gemm_part_reads_the_measured_table() -> None:
    """The measured shape: 1 ms, 2·1000³ FLOP / 1 ms = 2e12 FLOP/s; no table for bf16; 128×128 tiles of a
    1000×1000 output: 8 × 8 = 64 CTAs, split-K by min(ceil(132 / 64), ceil(1000 / 256)) = 3: 192."""
    g = GemmCost(_profile())
    assert g.time("fp32", 1000, 1000, 1000) == pytest.approx(1e-3)
    assert g.rate("fp32", 1000, 1000, 1000) == pytest.approx(2e12)
    assert g.time("bf16", 1000, 1000, 1000) is None and g.row("fp32", 999, 1000, 1000) is None
    op = Op(name="g", rank=0, kind="matmul", stream="compute", seq=0, m=1000, n=1000, k=1000, dtype="fp32")
    assert g.ctas(op) == 192 and g.measured_ctas(op) is None and g.call_factor(op) is None


def test_the_roofline_and_copy_parts() -> None:
    """Roofline: max(1e12 FLOP / 100 TFLOP/s = 10 ms, 1e9 B / 1000 GB/s = 1 ms) = 10 ms; bytes only: 1 ms; never
    under the floor given. Copies: 2e6 B h2d / 10 GB/s = 200 µs; 1e9 B d2d / (1000 / 2) GB/s = 2 ms."""
    p = _profile()
    assert Roofline(p, 0.0).time(1e12, 1e9, "fp32") == pytest.approx(1e-2)
    assert Roofline(p, 0.0).time(0.0, 1e9, None) == pytest.approx(1e-3)
    assert Roofline(p, 5e-3).time(0.0, 1e9, None) == pytest.approx(5e-3)
    h2d = Op(name="c", rank=0, kind="memcpy", stream="copy", seq=0, nbytes=2e6, direction="h2d")
    d2d = Op(name="c", rank=0, kind="memcpy", stream="copy", seq=0, nbytes=1e9, direction="d2d")
    assert CopyEngines(p).time(h2d) == pytest.approx(2e-4) and CopyEngines(p).time(d2d) == pytest.approx(2e-3)


def test_the_host_launch_part() -> None:
    """Eager: 5 µs a kernel, 9 µs a collective; under a CUDA graph 0; a fork without a GEMM row: 3 µs."""
    p = _profile(eager_per_op_us=5.0, eager_per_collective_us=9.0, graph_cross_stream_edge_us=3.0)
    host = HostLaunch(p, GemmCost(p))
    mm = Op(name="g", rank=0, kind="matmul", stream="compute", seq=0, m=1000, n=1000, k=1000, dtype="fp32")
    ar = Op(name="a", rank=0, kind="all_reduce", stream="comm", seq=0, nbytes=8.0, group=(0, 1))
    assert host.launch_overhead(mm, "eager") == pytest.approx(5e-6)
    assert host.launch_overhead(ar, "eager") == pytest.approx(9e-6)
    assert host.launch_overhead(ar, "cuda_graph") == 0.0
    assert host.graph_fork_s(mm, True) == pytest.approx(3e-6) and host.gemm_call_extra(mm) == 0.0


def test_the_cost_model_times_each_rule_with_its_part() -> None:
    p = _profile()
    cm = CostModel(p)
    mm = Op(name="g", rank=0, kind="matmul", stream="compute", seq=0, m=1000, n=1000, k=1000, dtype="fp32",
            repeat=3)
    fl = Op(name="f", rank=0, kind="compute", stream="compute", seq=0, flops=1e12, nbytes=1e9, dtype="fp32")
    cp = Op(name="c", rank=0, kind="memcpy", stream="copy", seq=0, nbytes=2e6, direction="h2d")
    ar = Op(name="a", rank=0, kind="all_reduce", stream="comm", seq=0, nbytes=4e6, group=(0, 1))
    assert cm.duration(mm) == pytest.approx(3e-3)  # repeat 3 of the measured 1 ms
    assert cm.duration(fl) == cm.roofline.time(1e12, 1e9, "fp32") == pytest.approx(1e-2)
    assert cm.duration(cp) == cm.copy.time(cp)
    assert cm.duration(ar) == cm.net.collective("all_reduce", 4e6, (0, 1))
    assert cm.wave_tail(fl) == cm.gemm.tail_default and cm.reduce_kernel(fl) is None


def test_a_gemm_memset_row_is_read_for_its_shape_and_its_16_bit_sibling_and_nothing_else():
    # gemm.memset [dtype, m, n, k, gap_us]: the bf16 row at 4096³ gives 10.5 µs; fp16 at that shape has no row of
    # its own of any kind, so it takes bf16's (GemmCost._kernel_key); another shape, or a non-GEMM op, gets 0
    from schedsim.gpu.cost import CostModel
    from schedsim.graph.ops import Op
    from schedsim.hardware.profile import HardwareProfile, load_profile

    d = load_profile("h200").model_dump()
    d["gemm"]["memset"] = [["bf16", 4096, 4096, 4096, 10.5]]
    cm = CostModel(HardwareProfile.model_validate(d))

    def mm(dt: str, m: int) -> Op:
        return Op(name="a", rank=0, kind="matmul", stream="main", seq=0, m=m, n=4096, k=4096, dtype=dt)

    assert cm.gemm_memset_gap(mm("bf16", 4096)) == 10.5e-6
    assert cm.gemm_memset_gap(mm("fp16", 4096)) == 10.5e-6
    assert cm.gemm_memset_gap(mm("bf16", 2048)) == 0.0
    assert CostModel(load_profile("h200")).gemm_memset_gap(mm("bf16", 4096)) == 0.0


def test_the_roofline_refuses_a_peak_the_profile_lacks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The toy profile lists only fp32 (100 TFLOP/s): a bf16 kernel takes it (1e12 FLOP: 10 ms). Without an fp32
    peak either there is nothing to stand in; the roofline took 1 TFLOP/s (an 8192³ fp32 GEMM on the shipped
    gb200_nvl72 profile, whose peaks leave out fp32, predicted 1,466 ms) and now refuses, naming the field, and so
    does predict (exit 2); a kernel of no FLOP needs no peak."""
    import subprocess
    import sys

    from schedsim.errors import ProfileError

    p = _profile()
    assert Roofline(p, 0.0).time(1e12, 0.0, "bf16") == pytest.approx(1e-2)
    d = toy_profile_dict()
    d["gpu"]["peak_tflops"] = {"bf16": 200.0}
    q = HardwareProfile.model_validate(d)
    assert Roofline(q, 0.0).time(1e12, 0.0, "bf16") == pytest.approx(5e-3)
    assert Roofline(q, 0.0).time(0.0, 1e9, None) == pytest.approx(1e-3)
    with pytest.raises(ProfileError, match=r"gpu\.peak_tflops has no fp32 peak \(it lists bf16\)"):
        Roofline(q, 0.0).time(1e12, 0.0, None)
    with pytest.raises(ProfileError, match=r"no fp16 peak nor an fp32 one"):
        Roofline(q, 0.0).time(1e12, 0.0, "fp16")
    f = tmp_path / "mm.yaml"
    f.write_text("schema_version: 1\nname: mm\nworld_size: 1\n"
                 "ops:\n  - {name: mm, kind: matmul, m: 8192, n: 8192, k: 8192, dtype: fp32}\n")
    r = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(f), "--profile", "gb200_nvl72", "--out",
                        str(tmp_path / "o"), "--no-gantt"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "profile 'gb200_nvl72': gpu.peak_tflops has no fp32 peak" in r.stderr
    assert "fix: add gpu.peak_tflops.fp32" in r.stderr
