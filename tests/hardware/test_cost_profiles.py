"""Cost model formulas (nccl-tests convention, GEMM interpolation) and the shipped profiles."""

from __future__ import annotations

import math

import pytest

from schedsim.errors import ProfileError
from schedsim.gpu.cost import CostModel
from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile, list_profiles, load_profile
from schedsim.network.links import bus_factor
from tests.conftest import toy_profile_dict


def test_bus_factors_match_nccl_tests():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 4) == pytest.approx(3 / 4)
    assert bus_factor("reduce_scatter", 2) == pytest.approx(1 / 2)
    assert bus_factor("all_to_all", 8) == pytest.approx(7 / 8)
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("sendrecv", 2) == 1.0


def test_table_interpolation_in_log_size():
    d = toy_profile_dict()
    d["collectives"]["tables"] = {"all_reduce": {4: [[1e6, 10.0], [4e6, 30.0]]}}
    cm = CostModel(HardwareProfile.model_validate(d))
    ranks = (0, 1, 2, 3)
    f = 2 * 3 / 4
    # exact points: t = S * factor / busbw
    assert cm.net.collective("all_reduce", 1e6, ranks) == pytest.approx(1e6 * f / 10e9)
    assert cm.net.collective("all_reduce", 4e6, ranks) == pytest.approx(4e6 * f / 30e9)
    # midpoint in log size: busbw halfway = 20 GB/s
    assert cm.net.collective("all_reduce", 2e6, ranks) == pytest.approx(2e6 * f / 20e9)
    # above the table: last busbw
    assert cm.net.collective("all_reduce", 8e6, ranks) == pytest.approx(8e6 * f / 30e9)
    # below: alpha-beta with the smallest busbw, 6 steps x 1 µs + S f / 10 GB/s
    assert cm.net.collective("all_reduce", 1e3, ranks) == pytest.approx(6e-6 + 1e3 * f / 10e9)
    # no table for 2 ranks: alpha-beta on NVLink (100 GB/s, 1 µs)
    assert cm.net.collective("all_gather", 2e6, (0, 1)) == pytest.approx(1e-6 + 0.5 * 2e6 / 100e9)
    # across nodes (8 GPUs per node): the network link
    assert cm.net.collective("broadcast", 1e6, (0, 8)) == pytest.approx(5e-6 + 1e6 / 10e9)


def test_gemm_exact_interpolated_and_roofline():
    d = toy_profile_dict()
    d["gemm"]["entries"] = [["fp32", 1024, 1024, 1024, 0.1], ["fp32", 4096, 4096, 4096, 3.2]]
    cm = CostModel(HardwareProfile.model_validate(d))

    def mm(m, n, k, dtype="fp32"):
        return cm.duration(Op(name="x", rank=0, kind="matmul", stream="s", seq=0, m=m, n=n, k=k, dtype=dtype,
                              flops=2.0 * m * n * k, nbytes=4.0 * (m * k + k * n + m * n)))

    assert mm(1024, 1024, 1024) == pytest.approx(0.1e-3)
    r1, r2 = 2 * 1024**3 / 0.1e-3, 2 * 4096**3 / 3.2e-3
    # 2048^3 is equidistant (in log2 space) from both points: geometric mean of the rates
    assert mm(2048, 2048, 2048) == pytest.approx(2 * 2048**3 / math.sqrt(r1 * r2))
    # no fp16 entries: roofline max(flops / (400 TFLOP/s * 1.0), bytes / 1000 GB/s)
    assert mm(4096, 4096, 4096, "fp16") == pytest.approx(2 * 4096**3 / 400e12)
    # an empty GEMM (any size 0; only an API-built graph can hold one) costs the kernel floor and one CTA,
    # not a math domain error in the log-space interpolation
    floor = cm.duration(Op(name="f", rank=0, kind="compute", stream="s", seq=0))
    empty = Op(name="x", rank=0, kind="matmul", stream="s", seq=0, m=0, n=1024, k=1024, dtype="fp32", flops=0.0,
               nbytes=0.0)
    assert cm.duration(empty) == floor and cm.gemm_ctas(empty) >= 1


def test_gemm_ctas_from_the_profiles_measured_grid_else_tiles():
    p = load_profile("h200x2")
    cm = CostModel(p)

    def mm(m: int, n: int, k: int, dtype: str = "fp32", batch: int = 1) -> Op:
        return Op(name="x", rank=0, kind="matmul", stream="s", seq=0, m=m, n=n, k=k, dtype=dtype, batch=batch,
                  flops=2.0 * m * n * k * batch)

    # Kineto, one H200, 2026-12-01: grid 8x8x2 (256x128 tiles, split-K 2)
    assert ("fp32", 2048, 1024, 8192, 128) in p.gemm.ctas
    assert cm.measured_ctas(mm(2048, 1024, 8192)) == cm.gemm_ctas(mm(2048, 1024, 8192)) == 128
    assert cm.gemm_ctas(mm(1024, 1024, 8192, batch=2)) == 128  # m*batch is the row count looked up
    # not measured: 128x128 tiles (16*8 = 128 < 132 SMs), split-K by min(ceil(132/128), ceil(8192/256)) = 2
    assert cm.measured_ctas(mm(2048, 1024, 8192, "bf16")) is None
    assert cm.gemm_ctas(mm(2048, 1024, 8192, "bf16")) == 256
    # a 16-bit GEMM without any kernel row takes the other 16-bit dtype's rows at that shape, all of them
    d = p.model_dump()
    d["gemm"]["ctas"] = [*d["gemm"]["ctas"], ["bf16", 2048, 1024, 8192, 128]]
    d["gemm"]["ctas_per_sm"] = [["bf16", 2048, 1024, 8192, 2]]
    d["gemm"]["reduce"] = [["bf16", 2048, 1024, 8192, 32, 4.0]]
    d["gemm"]["call"] = [["bf16", 2048, 1024, 8192, 1.5]]
    d["gemm"]["tail"] = [["bf16", 2048, 1024, 8192, 2.0]]
    cm2 = CostModel(HardwareProfile.model_validate(d))
    f16 = mm(2048, 1024, 8192, "fp16")
    assert cm2.measured_ctas(f16) == cm2.gemm_ctas(f16) == 128 and cm2.ctas_per_sm(f16) == 2
    assert cm2.reduce_kernel(f16) == (32, pytest.approx(4e-6)) and cm2.wave_tail(f16) == pytest.approx(2e-6)
    assert cm2.gemm_call_extra(f16) == pytest.approx(0.5 * p.launch.eager_per_op_us * 1e-6)
    assert cm2.measured_ctas(mm(2048, 1024, 8192, "tf32")) is None
    # fp16 with a row of its own (here its grid) takes none of bf16's: no mix of two dtypes' kernels
    d["gemm"]["ctas"] = [*d["gemm"]["ctas"], ["fp16", 2048, 1024, 8192, 256]]
    cm3 = CostModel(HardwareProfile.model_validate(d))
    assert cm3.gemm_ctas(f16) == 256 and cm3.ctas_per_sm(f16) == 1 and cm3.reduce_kernel(f16) is None
    assert cm3.gemm_call_extra(f16) == 0.0
    assert cm.gemm_ctas(mm(4096, 4096, 4096)) == 32 * 32  # a wave or more of tiles: one CTA per tile


def test_wave_tail_of_a_shape_without_a_row_is_its_nearest_measured_shape_of_the_dtype(toy_profile):
    d = toy_profile.model_dump()
    d["gpu"]["wave_tail_us"] = 5.0
    d["gemm"]["tail"] = [["fp32", 1024, 512, 8192, 8.0], ["fp32", 2048, 1024, 8192, 6.0],
                         ["fp32", 2048, 2048, 1024, 4.0], ["bf16", 1024, 512, 8192, 0.0]]
    cm = CostModel(HardwareProfile.model_validate(d))

    def mm(m: int, n: int, k: int, dtype: str = "fp32") -> Op:
        return Op(name="x", rank=0, kind="matmul", stream="s", seq=0, m=m, n=n, k=k, dtype=dtype,
                  flops=2.0 * m * n * k)

    assert cm.wave_tail(mm(1024, 512, 8192)) == pytest.approx(8e-6)  # its own row
    # bf16 2048x1024x8192: the bf16 row (log2 distance 2), not the fp32 one of the same shape nor the 5 µs default
    assert cm.wave_tail(mm(2048, 1024, 8192, "bf16")) == 0.0
    # fp32 1024x1024x8192: 1024x512x8192 and 2048x1024x8192 both 1 away: their mean
    assert cm.wave_tail(mm(1024, 1024, 8192)) == pytest.approx(7e-6)
    # fp32 2048x1024x2048: 2048x1024x8192 is 2 away, 2048x2048x1024 2 away: (6 + 4) / 2
    assert cm.wave_tail(mm(2048, 1024, 2048)) == pytest.approx(5e-6)
    # fp16 has no row: bf16's stand in (the 16-bit dtypes share cuBLAS kernels); fp64 has none: gpu.wave_tail_us
    assert cm.wave_tail(mm(2048, 1024, 8192, "fp16")) == 0.0
    assert cm.wave_tail(mm(64, 64, 64, "fp64")) == pytest.approx(5e-6)
    add = Op(name="a", rank=0, kind="compute", stream="s", seq=0, nbytes=1e6)
    assert cm.wave_tail(add) == pytest.approx(5e-6)  # not a GEMM: gpu.wave_tail_us


def test_shape_curve_transfer_from_reference_profile():
    p = load_profile("pcie2")
    cm = CostModel(p)
    h = CostModel(load_profile("h200"))
    own = 2 * 16384 * 8192 * 8192 / 56.89e-3
    ratio = h.gemm_rate("fp32", 2048, 1024, 8192) / h.gemm_rate("fp32", 16384, 8192, 8192)
    op = Op(name="x", rank=0, kind="matmul", stream="s", seq=0, m=2048, n=1024, k=8192, dtype="fp32",
            flops=2.0 * 2048 * 1024 * 8192)
    assert cm.duration(op) == pytest.approx(op.flops / (own * ratio))
    # the H200's back-to-back times of the two shapes (schedsim calibrate, 2xH200, 2026-11-30): 1/64 of the big
    # GEMM's 42.46949 ms over the sub-GEMM's 0.70779 ms (single launches of 2026-11-29 gave 44.8 / 51.8 TFLOP/s)
    assert ratio == pytest.approx(42.46949 / 64 / 0.70779, rel=1e-4)


def test_shipped_profiles_load_and_state_sources():
    names = list_profiles()
    assert {"h200", "pcie2", "rtx3090_pcie1x4"} <= set(names)
    for n in names:
        p = load_profile(n)
        assert p.gpu.source and p.launch.source and p.contention.source and p.gemm.source
        for link in p.links.values():
            assert link.source


def test_rtx3090_all_reduce_table_values():
    p = load_profile("rtx3090_pcie1x4")
    rows = dict(p.collectives.tables["all_reduce"][8])
    # 128 MiB in 117937 µs: algbw 1.138 GB/s, busbw x 14/8 = 1.99 GB/s (S4 prints 1.14 / 1.99)
    assert rows[134217728] == pytest.approx(134217728 / 117937e-6 / 1e9 * 14 / 8, rel=1e-3)
    assert rows[134217728] == pytest.approx(1.99, abs=0.01)


def test_unknown_profile_suggests():
    with pytest.raises(ProfileError, match="did you mean 'h200'"):
        load_profile("h20")
    with pytest.raises(ProfileError, match="no such profile file"):
        load_profile("/nope/p.yaml")


def test_bad_profile_field_named(tmp_path):
    import yaml

    d = toy_profile_dict()
    d["gpu"]["hbm_GBps"] = -1
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(d))
    with pytest.raises(ProfileError, match="gpu.hbm_GBps"):
        load_profile(str(f))


def test_table_time_never_drops_below_the_smaller_measured_size():
    # latency-bound points: 1 KiB at 0.1 GB/s (10.24 µs) and 16 KiB at 0.8 GB/s (20.48 µs). Interpolating busbw
    # at 4 KiB (half way in log size) gives 0.45 GB/s -> 9.10 µs, less than the 1 KiB time: clamped to 10.24 µs
    d = toy_profile_dict()
    d["collectives"]["tables"] = {"all_reduce": {2: [[1024.0, 0.1], [16384.0, 0.8]]}}
    cm = CostModel(HardwareProfile.model_validate(d))
    assert cm.net.collective("all_reduce", 4096, (0, 1)) == pytest.approx(1024 / 0.1e9)
    # at 8 KiB (3/4 of the way) busbw 0.1 + 0.75 * 0.7 = 0.625 GB/s -> 13.1 µs, above 10.24: the interpolation stands
    assert cm.net.collective("all_reduce", 8192, (0, 1)) == pytest.approx(8192 / 0.625e9)


def _str_keys(x):  # type: ignore[no-untyped-def]
    """``x`` with every mapping key as a string (the guarded parser reads keys as schedules do)."""
    if isinstance(x, dict):
        return {str(k): _str_keys(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_str_keys(v) for v in x]
    return x


def test_profile_yaml_read_by_libyaml_is_the_reference_parse(tmp_path):
    """Profiles are parsed by the schedule files' guarded parser (libyaml when PyYAML has it): every shipped
    profile gives the profile the pure-Python parser gives (mapping keys are read as strings, as in schedules;
    the model turns table keys back into rank counts), and a broken file's error names its line and column."""
    import yaml

    from schedsim.hardware.profile import HardwareProfile, _builtin_dir, _parse_yaml

    for f in sorted(_builtin_dir().glob("*.yaml")):
        text = f.read_text(encoding="utf-8")
        ours, pure = _parse_yaml(text, str(f)), yaml.safe_load(text)
        if "base" in pure:  # a derived profile (dgx_h100 on h200): the parses agree; load_profile merges the base
            assert ours == _str_keys(pure), f.name
            continue
        assert HardwareProfile.model_validate(ours) == HardwareProfile.model_validate(pure), f.name
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngpu: {hbm_GBps: 1\n", encoding="utf-8")
    with pytest.raises(yaml.YAMLError) as pure:
        yaml.safe_load(bad.read_text())
    with pytest.raises(ProfileError) as e:
        load_profile(str(bad))
    assert str(e.value).startswith(f"{bad}:3:1: invalid YAML: {pure.value.problem}\n  fix: "), str(e.value)


def test_one_rank_collectives_are_a_nop_in_place_and_a_copy_out_of_place(toy_profile) -> None:
    # NCCL on one rank (ncclLaunchOneRank): an in-place all_reduce/broadcast/reduce launches nothing; an
    # all_gather of 1 MB copies it device to device: toy d2d 1000 GB/s counted read + write, 2e6 B / 1e12 = 2 µs
    cm = CostModel(toy_profile)
    for kind in ("all_reduce", "broadcast", "reduce"):
        assert cm.net.collective(kind, 1e6, (0,)) == 0.0
    assert cm.net.collective("all_gather", 1e6, (0,)) == pytest.approx(2e-6)
    assert cm.net.collective("reduce_scatter", 1e6, (3,)) == pytest.approx(2e-6)
    assert cm.net.collective("all_reduce", 1e6, (0, 1)) > 0.0  # two ranks: a real collective


def test_the_cost_model_times_communication_through_the_network_model():
    """Send/recv and collectives reach the network model (schedsim.network.model.NetworkModel) alone: a send of
    2 MB over the toy profile's NVLink class (1 µs, 100 GB/s, one step, bus factor 1) is 1 µs + 2e6 B / 100 GB/s,
    as ``p2p`` and as the cost model's duration of the op; two ranks on two nodes take the network class
    (5 µs, 10 GB/s)."""
    from schedsim.network.model import NetworkModel

    p = HardwareProfile.model_validate(toy_profile_dict())
    net = NetworkModel(p, p.gpu.kernel_floor_us * 1e-6)
    assert net.p2p(0, 1, 2e6) == pytest.approx(1e-6 + 2e6 / 100e9, rel=1e-12)
    assert net.p2p(0, 8, 2e6) == pytest.approx(5e-6 + 2e6 / 10e9, rel=1e-12)
    send = Op(name="s", rank=0, kind="send", stream="s", seq=0, nbytes=2e6, group=(0, 1))
    assert CostModel(p).duration(send) == net.p2p(0, 1, 2e6)
    assert net.nccl is None and CostModel(p).net.nccl is None  # no topology: no NCCL tuning model


def test_the_network_model_places_ranks_on_nodes():
    """``NetworkModel.rank_nodes``: 16 ranks of dgx_h100 (8 GPUs a node, ranks in order) fill nodes 0 and 1, as
    :func:`schedsim.network.rank_nodes` places them; a profile without a cluster topology has one link tier (None)."""
    from schedsim.network import rank_nodes

    p = load_profile("dgx_h100")
    net = CostModel(p).net
    assert net.rank_nodes(16) == [0] * 8 + [1] * 8 == rank_nodes(p, 16)
    toy = CostModel(HardwareProfile.model_validate(toy_profile_dict())).net
    assert toy.rank_nodes(4) is None


@pytest.mark.parametrize(("section", "key"), [("nccl", "max_ctas"), ("nccl", "min_nchannels"),
                                              ("gpu", "max_connections"), ("gpu", "hbm_GBps")])
def test_profile_boolean_for_a_number_is_refused(tmp_path, section: str, key: str, value: object = True):
    # YAML `max_ctas: true` is no channel count: pydantic's lax int would read it as 1 (NCCL_MAX_CTAS=1, a
    # sixteenth of dgx_h100's channels) and time every collective with it, silently
    import yaml

    d = toy_profile_dict()
    d.setdefault(section, {})[key] = value
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(d))
    with pytest.raises(ProfileError, match=rf"{section}\.{key}: .*a number, not a boolean"):
        load_profile(str(f))


def test_profile_boolean_fields_keep_booleans():
    # the refusal is for numbers only: a field that takes a boolean still does
    d = toy_profile_dict()
    d.setdefault("nccl", {})["max_ctas"] = 4
    assert HardwareProfile.model_validate(d).nccl.max_ctas == 4
    base = load_profile("dgx_h100")  # its topology.scale_up.nvls: true
    assert base.topology is not None and base.topology.scale_up is not None and base.topology.scale_up.nvls is True
    assert HardwareProfile.model_validate(base.model_dump()) == base


@pytest.mark.parametrize("section, key, value", [
    ("gpu", "peak_tflops", {"bf16": True}),
    ("gpu", "peak_tflops", {"bf16": 989.0, "fp32": False}),
])
def test_profile_boolean_inside_a_table_of_numbers_is_refused(tmp_path, section: str, key: str, value: dict):
    # `peak_tflops: {bf16: true}` was read as 1 TFLOP/s: every bf16 GEMM's roofline ~1000x slow, silently
    test_profile_boolean_for_a_number_is_refused(tmp_path, section, key, value)


def test_every_shipped_profile_still_loads_with_the_boolean_check():
    from schedsim.hardware.profile import list_profiles

    for name in list_profiles():
        load_profile(name)
