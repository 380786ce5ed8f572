"""A PCIe box with and without CUDA peer-to-peer (``topology.scale_up.p2p``), as NCCL v2.30.7-1 sees it.

Every expected time is worked out in the comment beside it from NCCL's own model (src/graph/search.cc
``followPath`` and speedArrayIntra, src/graph/topo.h ``INTEL_P2P_OVERHEAD``, src/graph/tuning.cc), not read back
from the code. The box: Ampere GPUs on PCIe Gen4 x16 (NCCL's 24 GB/s a link), an Intel host.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from schedsim.errors import ProfileError
from schedsim.hardware.profile import HardwareProfile, load_profile
from schedsim.network import NcclNetwork
from schedsim.network.pcie import path_bandwidth, with_p2p_env
from schedsim.network.tuning import Graph, ring_graph

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "schedsim/hardware/profiles/dgx_a100.yaml").read_text())
MiB = 1 << 20


def box(gpus: int, p2p: bool, vendor: str = "intel", nccl: dict[str, Any] | None = None) -> HardwareProfile:
    """One node of ``gpus`` Ampere GPUs on PCIe Gen4 x16 (24 GB/s), peer-to-peer or not."""
    d = copy.deepcopy(BASE)
    d["name"] = "pciebox"
    d["topology"] = {"gpus_per_node": gpus, "arch": "ampere", "cpu_vendor": vendor,
                     "scale_up": {"kind": "pcie", "bandwidth_GBps": 24.0, "p2p": p2p, "source": "test"}}
    d["nccl"] = {**d["nccl"], **(nccl or {"algo": "ring", "proto": "Simple"})}
    return HardwareProfile.model_validate(d)


def us(cost: Any) -> float:
    return float(cost.seconds * 1e6)


def test_the_channel_search_with_and_without_p2p():
    # P2P (GPU to GPU through the switch, no CPU on the path): speedArrayIntra from 20 (the first <= 24):
    # 24 // 20 = 1 channel = 20 < 24; 18, 15 give 1 channel each; 12: 2 x 12 = 24 >= totalBw: done; no dup
    # (12 < 25) -> 2 x 12
    assert ring_graph("ampere", 24.0, 4, 0, 0.0, False) == Graph(2, 12.0, 12.0)
    # SHM on Intel: each channel of speed s costs 6/5 s of the PCIe links (INTEL_P2P_OVERHEAD): 20 x 1.2 = 24
    # fits once; 1 x 20 is the best (18 x 1.2 = 21.6: 1; 12 x 1.2 = 14.4: 1; 10: 24 // 12 = 2 = 20, not more;
    # 9 / 20 < .49 stops) -> 1 x 20
    assert path_bandwidth(box(4, False).topology) == pytest.approx(20.0)
    assert ring_graph("ampere", 20.0, 4, 0, 0.0, False) == Graph(1, 20.0, 20.0)
    # AMD and P2P hosts pay no overhead
    assert path_bandwidth(box(4, False, "amd").topology) == 24.0
    assert path_bandwidth(box(4, True).topology) == 24.0


@pytest.mark.parametrize(("gpus", "p2p", "lat_us", "algbw"), [
    # ring Simple all_reduce, 256 MiB (every channel runs: 256 MiB >> channels x 512 threads x 64 B).
    # latency: baseLat ring Simple 8.4 + 2(n-1) steps x PCI hwLat ring Simple 5.7 (one node: no ring plateau,
    # which tuning.cc applies across nodes); bus bandwidth channels x speed, algbw = bus x n / 2(n-1)
    (2, True, 8.4 + 2 * 5.7, 24.0 * 2 / 2),      # 19.8 us, 2 x 12 = 24 GB/s
    (2, False, 8.4 + 2 * 5.7, 20.0 * 2 / 2),     # 19.8 us, 1 x 20 = 20 GB/s
    (4, True, 8.4 + 6 * 5.7, 24.0 * 4 / 6),      # 42.6 us, 16 GB/s
    (4, False, 8.4 + 6 * 5.7, 20.0 * 4 / 6),     # 42.6 us, 13.33 GB/s
])
def test_ring_all_reduce_on_a_pcie_box(gpus: int, p2p: bool, lat_us: float, algbw: float):
    net = NcclNetwork(box(gpus, p2p))
    got = net.collective("all_reduce", 256 * MiB, tuple(range(gpus)))
    assert got is not None and (got.algo, got.proto) == ("ring", "Simple")
    assert us(got) == pytest.approx(lat_us + 256 * MiB / (1000 * algbw), rel=1e-9)


def test_send_recv_on_a_pcie_box():
    # one send of 64 MiB (Simple: > 16 KiB) between two GPUs: the ring graph of a pair, channels x speed:
    # P2P 2 x 12 = 24 GB/s, SHM on Intel 1 x 20 = 20 GB/s; the latency is the same (both NCCL_HW_PCI)
    on = NcclNetwork(box(2, True)).p2p(0, 1, 64 * MiB)
    off = NcclNetwork(box(2, False)).p2p(0, 1, 64 * MiB)
    lat = us(on) - 64 * MiB / (1000 * 24.0)
    assert lat > 0 and us(off) == pytest.approx(lat + 64 * MiB / (1000 * 20.0), rel=1e-9)


def test_nccl_p2p_disable_in_the_schedule_env(tmp_path: Path):
    prof = box(4, True)
    off = with_p2p_env(prof, {"NCCL_P2P_DISABLE": 1}, {"NCCL_P2P_DISABLE": "s.yaml:3: env.NCCL_P2P_DISABLE"})
    assert off.topology.scale_up is not None and not off.topology.scale_up.p2p
    assert off.topology.scale_up.source.endswith("p2p: false by the schedule's s.yaml:3: env.NCCL_P2P_DISABLE")
    assert with_p2p_env(prof, {"NCCL_P2P_DISABLE": 0}) is prof  # NCCL reads only 1
    # the same through the profile's own env path, beside NCCL_ALGO
    both = prof.with_nccl_env({"NCCL_P2P_DISABLE": 1, "NCCL_ALGO": "ring"})
    assert both.topology.scale_up is not None and not both.topology.scale_up.p2p and both.nccl.algo == "ring"
    t_off = NcclNetwork(both).collective("all_reduce", 256 * MiB, (0, 1, 2, 3))
    assert t_off is not None and us(t_off) == pytest.approx(8.4 + 6 * 5.7 + 256 * MiB / (1000 * 40 / 3))
    # no scale_up (S0, S4): their measured tables stand, nothing changes
    for name in ("pcie2", "rtx3090_pcie1x4"):
        p = load_profile(name)
        assert p.with_nccl_env({"NCCL_P2P_DISABLE": 1}) is p
    # NVLink: no PCIe figure to fall back on
    with pytest.raises(ProfileError, match=r"s\.yaml:3: env\.NCCL_P2P_DISABLE: NCCL_P2P_DISABLE=1 .* nvswitch"):
        with_p2p_env(load_profile("dgx_h100"), {"NCCL_P2P_DISABLE": 1},
                     {"NCCL_P2P_DISABLE": "s.yaml:3: env.NCCL_P2P_DISABLE"})


def test_p2p_false_needs_pcie(tmp_path: Path):
    d = load_profile("dgx_h100").model_dump(mode="json")
    d["topology"]["scale_up"]["p2p"] = False
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(d))
    with pytest.raises(ProfileError, match=r"topology\.scale_up.*p2p: false needs kind: pcie, not nvswitch") as e:
        load_profile(str(f))
    # the value at fault and the fix, not the whole scale_up mapping and the profile format's pointer
    msg = str(e.value)
    assert "(got False)" in msg and "'bandwidth_GBps'" not in msg, msg
    assert "fix: set topology.scale_up.p2p: true, or kind: pcie" in msg, msg


SCHED = """schema_version: 1
name: ar4
world_size: 4
launch: cuda_graph
{env}
ops:
  - name: ar
    kind: all_reduce
    bytes: 268435456
"""


def _span_us(env: str, prof: HardwareProfile) -> float:
    from schedsim.api import simulate_spec
    from schedsim.spec.loader import load_text

    run = simulate_spec(load_text(SCHED.format(env=env), "env.yaml"), prof)
    (ar,) = [s for s in run.timeline.spans if s.rank == 0 and s.kind == "all_reduce"]
    return float((ar.end_s - ar.start_s) * 1e6)


def test_a_schedule_env_turns_p2p_off():
    # a solo all_reduce in a CUDA graph: its span is the NCCL model's time plus the per-node graph term; with
    # NCCL_P2P_DISABLE: 1 the SHM ring's 40/3 GB/s in place of P2P's 16 (test_ring_all_reduce_on_a_pcie_box)
    prof = box(4, True)
    extra = max(0.0, prof.launch.graph_per_op_us)
    assert _span_us("", prof) == pytest.approx(42.6 + 256 * MiB / (1000 * 16.0) + extra, rel=1e-6)
    assert _span_us("env: {NCCL_P2P_DISABLE: 1}", prof) == pytest.approx(
        42.6 + 256 * MiB / (1000 * 40 / 3) + extra, rel=1e-6)
    assert _span_us("env: {NCCL_P2P_DISABLE: 0}", prof) == _span_us("", prof)


@pytest.mark.parametrize("value", ["2", "'1'", "-1"])
def test_a_bad_nccl_p2p_disable_is_a_spec_error(value: str):
    from schedsim.errors import SpecError
    from schedsim.spec.loader import load_text

    with pytest.raises(SpecError, match="NCCL_P2P_DISABLE must be 0 or 1") as e:
        load_text(SCHED.format(env=f"env: {{NCCL_P2P_DISABLE: {value}}}"), "env.yaml")
    # a quoted 0 or 1 (as a shell writes it) is told how to write it
    assert ("write 1 unquoted" in str(e.value)) == (value == "'1'"), str(e.value)


def test_p2p_disable_on_nvlink_exits_2_naming_the_schedule_line(tmp_path: Path):
    import subprocess
    import sys

    f = tmp_path / "s.yaml"
    f.write_text(SCHED.format(env="env:\n  NCCL_P2P_DISABLE: 1"))
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(f), "--profile", "dgx_h100", "--out",
                          str(tmp_path / "o"), "--no-gantt"], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"error: {f}:6: env.NCCL_P2P_DISABLE: NCCL_P2P_DISABLE=1 on profile 'dgx_h100'")
    assert "fix: drop NCCL_P2P_DISABLE" in out.stderr and "Traceback" not in out.stderr
