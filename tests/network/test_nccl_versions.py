"""NCCL's tuning model per release (schedsim.network.tuning.constants_for, a profile's ``nccl.version``).

Every expected figure is worked out by hand in the comment beside it from src/graph/tuning.cc at the release's
tag of NVIDIA/nccl (v2.20.3-1, v2.21.5-1, v2.22.3-1, v2.23.4-1, v2.24.3-1, v2.26.2-1, v2.27.5-1, v2.28.7-1,
v2.28.9-1, v2.30.7-1), not read back from the code. Graphs: one DGX H100 node (8 GPUs, 18 NVLinks = 370.8
GB/s) has a 12 x 30 GB/s ring and an 8-head NVLS graph at 40 / 60 GB/s; two nodes with 8 x 400G NICs a
8 x 45 GB/s ring and an NVLS graph at 40 / 48 (the doctests of ring_graph and nvls_graph).
"""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from schedsim.hardware.profile import HardwareProfile
from schedsim.network import NcclNetwork
from schedsim.network.tuning import (
    ChannelEnv,
    Graph,
    TuneInput,
    constants_for,
    cta_bw_scale,
    nvls_ctas,
    nvls_tree_chunk,
    nvls_tree_fill,
    parse_nccl_version,
    tune,
)

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "schedsim/hardware/profiles/dgx_a100.yaml").read_text())
HOPPER = {"gpus_per_node": 8, "arch": "hopper", "cpu_vendor": "intel",
          "scale_up": {"kind": "nvswitch", "bandwidth_GBps": 370.8, "nvls": True, "source": "test"},
          "nics": {"per_node": 8, "bandwidth_Gbps": 400, "source": "test"}}
ONE_NODE_RING, TWO_NODE_RING = Graph(12, 30.0, 30.0), Graph(8, 45.0, 45.0)
ONE_NODE_NVLS, TWO_NODE_NVLS = Graph(8, 40.0, 60.0), Graph(8, 40.0, 48.0)


def net(version: str | None, **nccl: Any) -> NcclNetwork:
    """dgx_a100's compute on a Hopper cluster topology, NCCL ``version`` (and ``nccl`` settings)."""
    d = copy.deepcopy(BASE)
    d["name"] = "test"
    d["topology"] = HOPPER
    d["nccl"] = {**d["nccl"], **nccl, "version": version}
    return NcclNetwork(HardwareProfile.model_validate(d))


def ti(version: str | None, ranks: int, nodes: int, ring: Graph, nvls: Graph | None = None) -> TuneInput:
    return TuneInput(ranks, nodes, "hopper", "nvlink", "intel", ring, nvls, consts=constants_for(version))


def us(net_: NcclNetwork, kind: str, nbytes: int, ranks: int) -> float:
    got = net_.collective(kind, nbytes, tuple(range(ranks)))
    assert got is not None
    return got.seconds * 1e6


def test_a_version_takes_the_constants_of_the_last_release_at_or_before_it():
    # NVLS-tree's network hwLat: 14 us in every tuning.cc up to v2.28.7, 20.9 from v2.28.9
    net_nvls_tree = {v: constants_for(v).hw_lat["net"]["nvls_tree"][2]
                     for v in ("2.20.3", "2.21.5", "2.26.2", "2.28.7", "2.28.9", "2.30.7", "2.31.2")}
    assert net_nvls_tree == {"2.20.3": 14.0, "2.21.5": 14.0, "2.26.2": 14.0, "2.28.7": 14.0, "2.28.9": 20.9,
                             "2.30.7": 20.9, "2.31.2": 20.9}
    assert constants_for(None) == constants_for("2.30.7")
    assert parse_nccl_version("v2.26.2-1") == parse_nccl_version("2.26.2+cuda12.2") == (2, 26, 2)
    with pytest.raises(ValueError, match="from 2.20.0"):
        constants_for("2.19.3")
    with pytest.raises(ValueError, match="not major.minor.patch"):
        constants_for("2.26")


def test_forced_nvls_tree_small_all_reduce_on_2_21_5_against_2_30_7():
    # NVIDIA/nccl#1244's shape: 16 ranks on 2 nodes, NCCL_ALGO=NVLSTree, 512 B (NCCL's estimate, no tree
    # correction on Hopper, plus the pipeline fill: 2 log2(2) = 2 hops x 16 CTAs x 512 / (16 x 8) = 4 B / 48 GB/s).
    # 2.21.5: lat = 0 + 25 (NVLink) + 2 * log2(2) * 14 = 53; its bandwidth estimate (min(40, 48) x 8 x 5/6 =
    #         266.67) chooses; the time takes 2.28.3's prediction of the kernel, as 2.30.7's here (below)
    # 2.30.7: lat = 25 + 2 * 20.9 = 66.8; bw = min(40 * .85 * 7/8 * 2 = 59.5, 48 * 2 = 96, 57.7) = 57.7, busBw
    #         461.6, algbw x 16/30 = 246.19
    fill = 2 * 16 * 4 / 48e3
    assert us(net("2.21.5", algo="nvlstree"), "all_reduce", 512, 16) == pytest.approx(
        53.0 + 512 / (461.6 * 16 / 30 * 1e3) + fill, rel=1e-6)
    assert us(net(None, algo="nvlstree"), "all_reduce", 512, 16) == pytest.approx(
        66.8 + 512 / (461.6 * 16 / 30 * 1e3) + fill, rel=1e-6)


def test_nvls_bandwidth_before_and_after_2_28():
    # one node, 8 ranks, NVLS graph 8 heads at bwIntra 40 / bwInter 60
    def bw(version: str, coll: str) -> float:
        return tune(coll, ti(version, 8, 1, ONE_NODE_RING, ONE_NODE_NVLS))[("nvls", "Simple")][1]

    # <= 2.27: all_reduce min(40, 60) * 8 = 320 busBw, x 5/6 to algbw
    assert bw("2.26.2", "allreduce") == pytest.approx(320 * 5 / 6)
    # 2.30.7: 40 * .85 * 7/8 * 2 = 59.5 (< 60), busBw 476, x nRanks / nsteps = 8/14
    assert bw("2.30.7", "allreduce") == pytest.approx(476 * 8 / 14)
    # all_gather: 2.21.5 converts NVLS's busBw x 5/6 too (only CollNet Direct skips it before 2.23); 2.26.2
    # does not convert (320); 2.27.5 takes min(40 * 7/8, 60 * .9) = 35 per channel (280)
    assert bw("2.21.5", "allgather") == pytest.approx(320 * 5 / 6)
    assert bw("2.26.2", "allgather") == pytest.approx(320.0)
    assert bw("2.27.5", "allgather") == pytest.approx(280.0)


def test_nvls_tree_beyond_two_nodes_before_2_28_halves_the_network_share():
    # 4 nodes: bw = min(bwIntra 40, bwInter 48 / 2) = 24, busBw 8 * 24 = 192, x 5/6 = 160 (2.26.2); 2.30.7:
    # min(59.5, 48, perChMaxNVLSTree N4 45.5) = 45.5, busBw 364, x 32/62
    def bw(version: str) -> float:
        return tune("allreduce", ti(version, 32, 4, TWO_NODE_RING, TWO_NODE_NVLS))[("nvls_tree", "Simple")][1]

    assert bw("2.26.2") == pytest.approx(160.0)
    assert bw("2.30.7") == pytest.approx(364 * 32 / 62)


def test_nvls_before_2_28_chooses_with_its_estimate_and_runs_at_2_28_3s_prediction():
    # 8 GPUs of one node, 8 GiB all_reduce on NCCL 2.26.2. The choice, with 2.26.2's estimates: NVLS 8 x min(40,
    # 60) = 320 x 5/6 = 266.7 GB/s against ring/Simple 12 x 30 = 360 x 8/14 = 205.7 -> NVLS. The time: 2.28.3's
    # "improved NVLS/NVLSTree tuning prediction" (release notes) of the same kernel: 40 x .85 x 7/8 x 2 = 59.5
    # (< bwInter 60) x 8 = 476 x 8/14 = 272 GB/s, with 2.26.2's latency (NVLink NVLS hwLat 25 us)
    got = net("2.26.2").collective("all_reduce", 8 << 30, tuple(range(8)))
    assert got is not None and (got.algo, got.proto) == ("nvls", "Simple")
    assert got.seconds * 1e6 == pytest.approx(25.0 + (8 << 30) / (1000 * 272.0), rel=1e-9)
    assert us(net("2.30.7"), "all_reduce", 8 << 30, 8) == pytest.approx(got.seconds * 1e6, rel=1e-12)


def test_eight_nodes_nvls_tree_and_tree_ll128_terms_of_2_30_7():
    # 64 ranks on 8 nodes (index2 = N4, log2i(8) = 3 network hops each way), net_ib latencyInter 0:
    # NVLS-tree: min(40 * .85 * 7/8 * 2 = 59.5, bwInter 48 (x2 only up to 2 nodes), perChMaxNVLSTree 45.5) = 45.5,
    #   busBw 8 * 45.5 = 364, x 64/126; lat 0 + 25 (NVLink) + 2 * 3 * 20.9 = 150.4
    # tree/LL128: min(min(8 * 45 * .92, 8 * perChMaxTree 36.0) * 120/128, 8 * perChMaxTreeLL128 29.0) = 232,
    #   x .5 = 116; lat 14.0 + 2 * (7 * 1.25 + 3 * 8.5) = 82.5
    t = tune("allreduce", ti("2.30.7", 64, 8, TWO_NODE_RING, TWO_NODE_NVLS))
    assert t[("nvls_tree", "Simple")] == pytest.approx((150.4, 364 * 64 / 126))
    assert t[("tree", "LL128")] == pytest.approx((82.5, 116.0))
    # 16 MiB: NVLS-tree's estimate 150.4 + 2^24 / 184.89e3 = 241.1 beats tree/LL128's, which takes
    # treeCorrectionFactor LL128 at log2(2^24 / 64) = 18 (.9): 82.5 + 2^24 / 104.4e3 = 243.2; NVLS-tree runs with
    # its pipeline fill (enqueue.cc calcCollChunking: 8 nodes -> nvlsTreeMaxChunkSize 64 KiB; 2^24 is not below
    # 1 x 16 CTAs x 8 heads x 64 KiB = 8 MiB, so 64 KiB): 2 x 3 hops x 16 x 64 KiB / 48 GB/s = 131.07
    # -> 150.4 + 90.74 + 131.07 = 372.2 (published, NVIDIA/nccl-tests#309: 378.1)
    assert us(net("2.30.7"), "all_reduce", 16 << 20, 64) == pytest.approx(
        150.4 + (16 << 20) / (364 * 64 / 126 * 1e3) + 6 * 16 * 65536 / 48e3, rel=1e-6)


def test_ring_ll_bandwidth_of_2_20_is_a_third_and_capped_at_ampere_s_llmaxbw():
    # one node, 8 ranks, all_gather ring/LL on 12 x 30 = 360 busBw:
    # 2.20.3: min(llMaxBw Hopper N1 87.7 (Ampere's row then), 360 / 3 = 120) = 87.7; 2.21.5: min(141, 360 * .5)
    # = 141; algbw x nRanks / nsteps = 8/7
    def bw(version: str) -> float:
        return tune("allgather", ti(version, 8, 1, ONE_NODE_RING))[("ring", "LL")][1]

    assert bw("2.20.3") == pytest.approx(87.7 * 8 / 7)
    assert bw("2.21.5") == pytest.approx(141.0 * 8 / 7)


def test_ring_and_tree_latency_before_2_23():
    t = {v: tune("allreduce", ti(v, 16, 2, TWO_NODE_RING)) for v in ("2.22.3", "2.23.4")}
    # ring/LL on 16 ranks over 2 nodes, intra step max(0.6 NVLink, 1.0 net overhead) = 1.0:
    # 2.22.3 counts 2 * nNodes = 4 network steps: 6.6 + (30 - 4) * 1.0 + 4 * 2.7 = 43.4
    # 2.23.4 counts 2 * (nNodes - 1) = 2: 6.6 + 28 * 1.0 + 2 * 2.7 = 40.0
    assert t["2.22.3"][("ring", "LL")][0] == pytest.approx(43.4)
    assert t["2.23.4"][("ring", "LL")][0] == pytest.approx(40.0)
    # tree/Simple: 2.22.3 baseLat 0, hwLat 28 on NVLink and network: 2 * (7 * 28 + 1 * 28) = 448
    # 2.23.4: 8.4 + 2 * (7 * 4.0 + 1 * 14) = 92.4
    assert t["2.22.3"][("tree", "Simple")][0] == pytest.approx(448.0)
    assert t["2.23.4"][("tree", "Simple")][0] == pytest.approx(92.4)


def test_tree_ll_latency_of_2_22_3_is_the_estimate_nccl_printed_on_three_nodes():
    # NVIDIA/nccl#1453 (twichell, 2024-09-18): 3 nodes x 8 H100, 8 ConnectX-7 on RoCE (NCCL_IB_GID_INDEX=3), NCCL
    # 2.22.3, NCCL_DEBUG=INFO prints NCCL's own estimate "128 Bytes -> Algo 0 proto 0 time 25.214764" (Algo 0 tree,
    # proto 0 LL). By hand from v2.22.3-1 tuning.cc: baseLat[tree][LL] 6.8 + 2 * ((8 - 1) * hwLat[NVLink][tree][LL]
    # 0.6 + log2i(3) = 1 * hwLat[net][tree][LL] 5.0) = 6.8 + 2 * (4.2 + 5.0) = 25.2 us; the rest, 0.0148 us, is
    # 128 B over the bandwidth, which the log does not give (its NICs and CPU are not stated)
    ring = Graph(8, 45.0, 45.0)
    tab = tune("allreduce", ti("2.22.3", 24, 3, ring))
    lat = tab[("tree", "LL")][0]
    assert lat == pytest.approx(25.2)
    assert lat == pytest.approx(25.214764, abs=0.02)
    # and NCCL's choice at 128 B is tree/LL: every other (algorithm, protocol) has a larger latency alone
    assert all(v[0] > 25.214764 for k, v in tab.items() if k != ("tree", "LL"))


def test_pat_appears_in_2_23_at_85_percent_and_takes_75_from_2_24():
    # 2 nodes, one GPU each, all_gather: ring graph 1 x 45 GB/s across nodes; PAT busBw 45 x .85 / .75, no
    # conversion to algbw for all_gather
    ring = Graph(1, 45.0, 45.0)
    pat = {v: tune("allgather", ti(v, 2, 2, ring)).get(("pat", "Simple")) for v in ("2.22.3", "2.23.4", "2.24.3")}
    assert pat["2.22.3"] is None
    assert pat["2.23.4"] is not None and pat["2.23.4"][1] == pytest.approx(45 * .85)
    assert pat["2.24.3"] is not None and pat["2.24.3"][1] == pytest.approx(45 * .75)


def test_a_version_nccl_does_not_model_exits_2_naming_nccl_version(tmp_path: Path):
    d = copy.deepcopy(BASE)
    d["topology"] = HOPPER
    d["nccl"] = {**d["nccl"], "version": "2.18.5"}
    prof = tmp_path / "old.yaml"
    prof.write_text(yaml.safe_dump(d))
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(ROOT / "schedules/allgather_mm.yaml"),
                          "--profile", str(prof), "--no-gantt", "-o", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: ")
    assert "nccl.version" in out.stderr and "from 2.20.0" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_log_names_its_nccl_version():
    from schedsim.network.nccl_tests import parse_nccl_tests

    row = " 1024 256 float sum -1 10.0 0.10 0.10 0 9.0 0.11 0.11 0"
    # NCCL's own line on rank 0, bare or inside an NCCL INFO line (both still skipped as text)
    for line in ("NCCL version 2.26.2+cuda12.2", "host:123:123 [0] NCCL INFO NCCL version 2.21.5+cuda12.3"):
        log = parse_nccl_tests(f"# nThread 1 nGpus 2\n{line}\n{row}", collective="all_reduce")
        assert log.nccl_version == line.split("NCCL version ")[1].split("+")[0]
        assert [t for _, t in log.skipped] == [line]
    # nccl-tests' header: NCCL_VERSION_CODE 23004 = 2.30.4
    head = "# nccl-tests version 2.17.8 nccl-headers=23004 nccl-library=23004"
    assert parse_nccl_tests(f"{head}\n# nThread 1 nGpus 2\n{row}", collective="all_reduce").nccl_version == "2.30.4"
    assert parse_nccl_tests(f"# nThread 1 nGpus 2\n{row}", collective="all_reduce").nccl_version is None
    # digits of other scripts are no version NCCL prints (parse_nccl_version refuses them): none read
    for line in ("NCCL version ２.27.5+cuda12.2", "# nccl-tests version 2.17.8 nccl-library=２３００４"):
        assert parse_nccl_tests(f"{line}\n# nThread 1 nGpus 2\n{row}", collective="all_reduce").nccl_version is None


def test_calibrate_fits_with_the_constants_of_the_logs_nccl_version():
    from schedsim.hardware.profile import load_profile
    from schedsim.network.fit import fit_profile
    from schedsim.network.nccl_tests import parse_nccl_tests
    from tests.network.test_network_fit import fig, synth

    # a 2-node log that NCCL 2.21.5 "ran" with known network figures (tree/LL 7 us a step, x .8 of NCCL's bw)
    d = load_profile("dgx_h100").model_dump()
    d["nccl"]["version"] = "2.21.5"
    d["topology"]["nics"]["timing"] = {"tree/LL": fig(7.0, 0.8)}
    truth = HardwareProfile.model_validate(d)
    text = synth(truth, "all_reduce", 2, 8, [2 ** k for k in range(3, 14)])  # 8 B .. 8 KiB: tree/LL
    text = text.replace("# Using devices", "NCCL version 2.21.5+cuda12.3\n# Using devices")
    log = parse_nccl_tests(text, collective="all_reduce")
    fitted, figs, notes = fit_profile(load_profile("dgx_h100"), [log], "synthetic")
    assert fitted.nccl.version == "2.21.5"
    assert notes == ["the logs ran NCCL 2.21.5: its tuning constants choose and time (nccl.version set)"]
    (f,) = figs
    assert (f.tier, f.key) == ("nics", "tree/LL")
    assert f.hw_latency_us == pytest.approx(7.0, abs=0.02) and f.bw_factor == pytest.approx(0.8, rel=2e-3)
    # a base that states its version keeps it, and says that the logs ran another
    d = load_profile("dgx_h100").model_dump()
    d["nccl"]["version"] = "2.30.7"
    kept, _, notes = fit_profile(HardwareProfile.model_validate(d), [log], "synthetic")
    assert kept.nccl.version == "2.30.7"
    assert notes == ["the logs ran NCCL 2.21.5, the base profile states nccl.version 2.30.7: fitted with NCCL "
                     "2.30.7's tuning constants; remove nccl.version from the base to fit with the logs' release"]
    d["nccl"]["version"] = "v2.21.5-1"  # the same release, spelled as a tag: nothing to say
    kept, _, notes = fit_profile(HardwareProfile.model_validate(d), [log], "synthetic")
    assert kept.nccl.version == "v2.21.5-1" and notes == []
    # a log built by hand with a version that is none: another release, not a crash
    _, _, notes = fit_profile(kept, [dataclasses.replace(log, nccl_version="2.x")], "synthetic")
    assert notes == ["the logs ran NCCL 2.x, the base profile states nccl.version v2.21.5-1: fitted with NCCL "
                     "v2.21.5-1's tuning constants; remove nccl.version from the base to fit with the logs' release"]
    # logs of a release newer than modelled: set, and the note names the release whose constants stand in
    newer = parse_nccl_tests(text.replace("NCCL version 2.21.5", "NCCL version 2.31.0"), collective="all_reduce")
    fitted, _, notes = fit_profile(load_profile("dgx_h100"), [newer], "synthetic")
    assert fitted.nccl.version == "2.31.0"
    assert notes == ["the logs ran NCCL 2.31.0: NCCL 2.31.0 is newer than the newest release modelled (2.30.7): "
                     "tuning.cc constants of 2.30.7 stand in for it (nccl.version set)"]


def test_calibrate_cli_writes_the_logs_nccl_version(tmp_path: Path):
    from schedsim.hardware.profile import load_profile
    from tests.network.test_network_fit import synth

    truth = load_profile("dgx_h100")
    text = synth(truth, "all_reduce", 2, 8, [2 ** k for k in range(3, 14)])
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(text.replace("# Using devices", "NCCL version 2.26.2+cuda12.2\n# Using devices"))
    out = tmp_path / "fitted.yaml"
    r = subprocess.run([sys.executable, "-m", "schedsim", "calibrate", "--from-nccl-tests", str(log), "--base",
                        "dgx_h100", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "note: the logs ran NCCL 2.26.2: its tuning constants choose and time (nccl.version set)" in r.stderr
    assert load_profile(str(out)).nccl.version == "2.26.2"


def test_ll128_on_blackwell_only_from_2_25():
    # tuning.cc before v2.25.1: switch (minCompCap) { case 70: case 80: case 90: ...; default: pEnable &= 0 }
    ring = Graph(8, 45.0, 45.0)

    def protos(version: str) -> set[str]:
        t = TuneInput(16, 2, "blackwell", "nvlink", "intel", ring, None, consts=constants_for(version))
        return {p for (_a, p) in tune("allreduce", t)}

    assert protos("2.24.3") == {"LL", "Simple"}
    assert protos("2.25.1") == {"LL", "LL128", "Simple"}


def test_a_version_newer_than_modelled_is_said_where_the_nccl_model_times_ops():
    from schedsim import api
    from schedsim.notes import guesses

    prog = api.lower_spec(api.load_text("schema_version: 1\nname: ar\nworld_size: 16\nops:\n"
                                        "  - {name: ar, kind: all_reduce, bytes: 1048576}\n"))

    def newer(version: str | None) -> list[str]:
        d = copy.deepcopy(BASE)
        d["name"] = "test"
        d["topology"] = HOPPER
        d["nccl"] = {**d["nccl"], "version": version}
        return [n for n in guesses(prog, HardwareProfile.model_validate(d)) if n.kind == "nccl-version-newer"]

    (note,) = newer("2.31.0")  # 2.30.7's constants time it, as constants_for gives them
    assert note.startswith("an estimate, not a measurement: profile 'test': nccl.version: NCCL 2.31.0 is newer than "
                           "the newest release modelled (2.30.7): tuning.cc constants of 2.30.7 stand in for it, "
                           "choosing and timing the 16 collective or send/recv op(s)")
    assert newer("2.30.7") == newer("v2.30.7-1") == newer(None) == []


def test_a_version_is_written_in_ascii_digits():
    # int() reads other scripts' digits ('２' is 2): a version NCCL never prints is refused, not read as 2.27.5
    for text in ("２.27.5", "2.２7.5", "٢.27.5"):
        with pytest.raises(ValueError, match="is not major.minor.patch"):
            parse_nccl_version(text)
    assert parse_nccl_version("2.27.5") == (2, 27, 5)


def test_a_log_names_its_nccl_settings_and_calibrate_fits_with_them():
    from schedsim.hardware.profile import load_profile
    from schedsim.network.fit import fit_profile
    from schedsim.network.nccl_tests import parse_nccl_tests
    from tests.network.test_network_fit import synth

    row = " 1024 256 float sum -1 10.0 0.10 0.10 0 9.0 0.11 0.11 0"
    # mpirun -x / export lines and NCCL's own "set by environment" INFO line; the legacy NCCL_MAX_NRINGS under
    # its new name, which wins where both are set
    head = ("mpirun -np 16 -x NCCL_ALGO=Ring -x NCCL_MIN_CTAS=24 -x NCCL_IB_QPS_PER_CONNECTION=2 ./all_reduce_perf\n"
            "host:1:1 [0] NCCL INFO NCCL_MAX_CTAS set by environment to 32.\n"
            "export NCCL_MAX_NRINGS=8\nexport NCCL_MAX_NCHANNELS=16\n")
    log = parse_nccl_tests(f"{head}# nThread 1 nGpus 2\n{row}", collective="all_reduce")
    assert log.nccl_env == {"NCCL_ALGO": "Ring", "NCCL_MIN_CTAS": "24", "NCCL_MAX_CTAS": "32",
                            "NCCL_MAX_NCHANNELS": "16"}
    assert parse_nccl_tests(f"# nThread 1 nGpus 2\n{row}", collective="all_reduce").nccl_env == {}
    # a 2-node log timed with NCCL_MAX_CTAS=8 (half of dgx_h100's 16 ring channels) and NCCL_ALGO=Ring: the fit
    # takes both settings, so it finds the model's own figures again (x 1.0 bandwidth; hwLat 8.5 us, the tree's
    # network figure a ring's LL128 network step is timed with, schedsim.network.exposed_ring)
    d = load_profile("dgx_h100").model_dump()
    d["nccl"].update(algo="ring", max_ctas=8)
    text = synth(HardwareProfile.model_validate(d), "all_reduce", 2, 8, [2 ** k for k in range(20, 28)])
    text = text.replace("# Using devices", "mpirun -x NCCL_ALGO=ring -x NCCL_MAX_CTAS=8\n# Using devices")
    fitted, figs, notes = fit_profile(load_profile("dgx_h100"), [parse_nccl_tests(text, collective="all_reduce")],
                                      "synthetic")
    assert (fitted.nccl.algo, fitted.nccl.max_ctas) == ("ring", 8)
    assert notes == ["the logs ran NCCL_ALGO=ring: nccl.algo set", "the logs ran NCCL_MAX_CTAS=8: nccl.max_ctas set"]
    (f,) = [f for f in figs if f.key == "ring/LL128"]  # 1 MiB .. 64 MiB: ring/LL128 (NCCL's net hwLat 4.0 us)
    assert f.hw_latency_us == pytest.approx(8.5, abs=0.01) and f.bw_factor == pytest.approx(1.0, rel=1e-3)
    # read without the setting, half the channels would be fitted as half of NCCL's bandwidth
    blind = parse_nccl_tests(text.replace(" -x NCCL_MAX_CTAS=8", ""), collective="all_reduce")
    (f,) = [f for f in fit_profile(load_profile("dgx_h100"), [blind], "synthetic")[1] if f.key == "ring/LL128"]
    assert f.bw_factor == pytest.approx(0.5, rel=1e-3)
    # a base that states another value keeps it and says so; a value NCCL does not take is left, with a note
    d = load_profile("dgx_h100").model_dump()
    d["nccl"]["max_ctas"] = 4
    kept, _, notes = fit_profile(HardwareProfile.model_validate(d), [parse_nccl_tests(text, collective="all_reduce")],
                                 "synthetic")
    assert kept.nccl.max_ctas == 4
    assert "NCCL_MAX_CTAS: the logs ran 8, the base profile states nccl.max_ctas 4: fitted with the profile's" in notes
    bad = parse_nccl_tests(text.replace("NCCL_MAX_CTAS=8", "NCCL_MAX_CTAS=0"), collective="all_reduce")
    kept, _, notes = fit_profile(load_profile("dgx_h100"), [bad], "synthetic")
    assert kept.nccl.max_ctas is None
    assert "NCCL_MAX_CTAS=0 in the logs is no value NCCL takes for nccl.max_ctas: not applied" in notes


def test_nvls_tree_chunk_and_ctas_follow_the_release():
    # 2.20 (computeCollChunkInfo, v2.20.3-1 enqueue.cc): NVLS-tree's chunk starts at the Simple step, NCCL_BUFFSIZE
    # 4 MiB / NCCL_STEPS 8 = 512 KiB (no NCCL_NVLS_CHUNKSIZE before 2.21); 2 nodes, 16 CTAs x 8 heads = 128 ops:
    # 4 GiB is not below 32 x 128 x 512 KiB = 2 GiB -> 512 KiB; 1 GiB -> 256 KiB (not below 16 x 128 x 256 KiB)
    assert nvls_tree_chunk(4 << 30, 2, 16, 8, since=(2, 20, 0)) == 524288
    assert nvls_tree_chunk(1 << 30, 2, 16, 8, since=(2, 20, 0)) == 262144
    assert nvls_tree_chunk(4 << 30, 2, 16, 8, since=(2, 21, 0)) == 131072
    # ncclNvlsTreeSm100Tuning is in nvls.cc from v2.30.3 only: a 2.27 Blackwell pair of racks of 64 GPUs keeps
    # nvlsChunkSize 128 KiB and (2 nodes) no tree maximum below it; 2.30 takes 64 KiB (ppn >= 16)
    assert nvls_tree_chunk(8 << 30, 2, 32, 8, "blackwell", 64, 50.0, since=(2, 27, 0)) == 131072
    assert nvls_tree_chunk(8 << 30, 2, 32, 8, "blackwell", 64, 50.0, since=(2, 30, 0)) == 65536
    # the fill of 16 Hopper ranks on 2 nodes at 4 GiB: 2 hops x 16 CTAs x chunk / 48 GB/s, 2.20 against 2.21
    nvls = Graph(8, 40.0, 48.0)
    fill = {v: nvls_tree_fill(4 << 30, TuneInput(16, 2, "hopper", "nvlink", "intel", Graph(8, 45.0, 45.0), nvls,
                                                 consts=constants_for(v))) for v in ("2.20.3", "2.21.5")}
    assert fill == {"2.20.3": pytest.approx(2 * 16 * 524288 / 48e3), "2.21.5": pytest.approx(2 * 16 * 131072 / 48e3)}


def test_blackwell_nvls_ctas_follow_the_release():
    # src/transport/nvls.cc: up to v2.24.3-1 comm->nvlsChannels is NCCL_NVLS_NCHANNELS' default 16 on every GPU;
    # v2.25.1-1 and v2.26.x: NVLS_NCHANNELS_SM100 32 on compute capability 10 (one NVLink domain too);
    # v2.27.3-1 on: NVLS_NCHANNELS_SM100_NVL 24 in one domain, 32 across; Hopper 16 throughout
    releases = ("2.24.3", "2.25.1", "2.26.2", "2.27.3")
    got = {v: (nvls_ctas("blackwell", False, since=constants_for(v).since),
               nvls_ctas("blackwell", True, since=constants_for(v).since),
               nvls_ctas("hopper", False, since=constants_for(v).since)) for v in releases}
    assert got == {"2.24.3": (16, 16, 16), "2.25.1": (32, 32, 16), "2.26.2": (32, 32, 16), "2.27.3": (24, 32, 16)}
    # NCCL_MAX_CTAS=8 on one NVL72 rack keeps 8 of those CTAs: NVLS at 8/16 of NCCL's bandwidth with 2.24, 8/32 with
    # 2.26, 8/24 with 2.27
    def t(v: str) -> TuneInput:
        return TuneInput(72, 1, "blackwell", "nvlink", "intel", Graph(16, 40.0, 40.0), Graph(32, 20.0, 30.0),
                         consts=constants_for(v), channel_env=ChannelEnv(max_ctas=8))

    assert [cta_bw_scale("nvls", t(v)) for v in ("2.24.3", "2.26.2", "2.27.3")] == pytest.approx([1 / 2, 1 / 4, 1 / 3])
