"""Tier timing figures (``scale_up.timing``, ``nics.timing``): NCCL chooses with its own constants, the
profile's measured / fitted / published figures time the choice. Times worked out by hand beside each test
from NCCL 2.30.7's src/graph/tuning.cc constants (schedsim/network/tuning.py)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from schedsim.network import NcclNetwork
from tests.network.test_network import R4, TOPO22, hopper, profile, us


def timed(up: dict[str, Any] | None = None, nics: dict[str, Any] | None = None,
          nccl: dict[str, Any] | None = None) -> NcclNetwork:
    topo = copy.deepcopy(TOPO22)
    if up:
        topo["scale_up"]["timing"] = up
    if nics:
        topo["nics"]["timing"] = nics
    return NcclNetwork(profile(topo, nccl))


def fig(h: float | None = None, b: float | None = None) -> dict[str, Any]:
    return {"hw_latency_us": h, "bw_factor": b, "provenance": "fitted", "source": "test"}


def test_timing_figures_time_ring_ll_across_nodes():
    # ring/LL on 2 nodes x 2 GPUs: lat = 6.6 + (6 - 2 inter steps) x max(1.0 intra figure, 1.0 net overhead)
    # + 2 x 4.0 (network figure) = 18.6; NCCL's bus min(llMaxBw 39.0, 96 x .5) = 39 x the NICs' factor .5
    # = 19.5, x n/nsteps 4/6 = 13 GB/s on the ring graph's 4 channels; 4 KiB runs on 1 of comm->nChannels 8
    # (enqueue.cc: 32 B/thread x 512 threads a channel): min(39, 96 / 8 x .5) = 6 x .5 x 4/6 = 2 GB/s
    net = timed({"ring/LL": fig(1.0)}, {"ring/LL": fig(4.0, 0.5)}, {"algo": "ring", "proto": "LL"})
    got = net.collective("all_reduce", 4096, R4)
    assert got is not None and (got.algo, got.proto) == ("ring", "LL")
    assert us(got) == pytest.approx(18.6 + 4096 / (1000 * 2.0), rel=1e-9)


def test_the_scale_up_bus_figure_times_one_node_only():
    # one node of 2 GPUs, ring/Simple: ring graph 12 channels x 30 (6 x 60 <= 370.8, doubled at half speed) =
    # 360, x the scale-up factor .25 = 90, x n/nsteps 2/2; lat = 8.4 + 2 steps x 3.4. The NICs' factor (.1) is
    # for groups across nodes
    net = timed({"ring/Simple": fig(None, 0.25)}, {"ring/Simple": fig(None, 0.1)},
                {"algo": "ring", "proto": "Simple"})
    got = net.collective("all_reduce", 1 << 20, (0, 1))
    assert got is not None and us(got) == pytest.approx(8.4 + 2 * 3.4 + (1 << 20) / (1000 * 90.0), rel=1e-9)


def test_nccl_still_chooses_with_its_own_constants():
    # 4 KiB on 2x2: NCCL's constants pick ring/LL (16.16 us, test_network::test_nccl_picks_the_least_time);
    # a measured ring/LL network hop of 50 us makes it 6.6 + 4 x 1.0 + 2 x 50 = 110.6 us, yet NCCL runs it
    net = timed(nics={"ring/LL": fig(50.0)})
    got = net.collective("all_reduce", 4096, R4, floor=False)
    assert got is not None and (got.algo, got.proto) == ("ring", "LL")
    assert us(got) == pytest.approx(110.6 + 4096 / (1000 * 4.0), rel=1e-9)  # on 1 of 8 channels, as above
    # a prediction is no slower than the message where NCCL's choice first changes above 4 KiB (time never falls
    # as bytes grow): that message's own time, its choice no longer ring/LL
    switch = net._switches(net.shape(R4), "allreduce")[0][0]
    later = net.collective("all_reduce", switch, R4)
    assert switch > 4096 and later is not None and (later.algo, later.proto) != ("ring", "LL")
    floored = net.collective("all_reduce", 4096, R4)
    assert floored is not None and (floored.algo, floored.proto) == ("ring", "LL")
    assert floored.seconds == min(got.seconds, later.seconds) < got.seconds


def test_a_timing_key_that_is_not_algo_proto_is_refused():
    with pytest.raises(ValidationError, match="not algo/proto"):
        timed({"ring-LL": fig(1.0)})


# ---- CollNet (SHARP in the fabric) -------------------------------------------------------------------------------

def sharp(nccl: dict[str, Any] | None = None, on: bool = True) -> NcclNetwork:
    from tests.network.test_network import hopper

    return NcclNetwork(profile(hopper(8, 8, fabric={"kind": "single_switch", "sharp": on, "source": "test"}), nccl))


R16 = tuple(range(16))


def test_collnet_direct_all_reduce_2x8():
    # CollNet Direct graph: 8 heads (8 NICs, NCCL_MAX_DIRECT_ARITY + 1 = 8); a GPU carries (1 + 7/7) x s <= 370.8
    # and s <= the NIC's 50: s = 48 (sm90 inter speeds). bus = 8 ch x 48 = 384; GPU/NIC factor 8/8 = 1; Hopper
    # x .85 = 326.4; x .5 = 163.2 GB/s. lat = 0 + 2 x (min(1, 7) x 3.7 + 7 x 0.4) + 31 (net CollNet Direct
    # Simple) = 44.0
    got = sharp({"algo": "collnetdirect"}).collective("all_reduce", 1 << 30, R16)
    assert got is not None and (got.algo, got.proto) == ("collnet_direct", "Simple")
    assert us(got) == pytest.approx(44.0 + (1 << 30) / (1000 * 163.2), rel=1e-9)


def test_collnet_chain_all_reduce_2x8():
    # the ring graph's 8 channels x 45 GB/s = 360, x .5 = 180 GB/s; lat = 0 + 2 x 7 x 2.8 (NVLink CollNet Chain
    # Simple) + 30 (net) = 69.2
    got = sharp({"algo": "collnetchain"}).collective("all_reduce", 1 << 20, R16)
    assert got is not None and (got.algo, got.proto) == ("collnet_chain", "Simple")
    assert us(got) == pytest.approx(69.2 + (1 << 20) / (1000 * 180.0), rel=1e-9)


def test_collnet_needs_sharp_and_serves_all_reduce_only():
    with pytest.raises(Exception, match="leave all_reduce no algorithm"):
        sharp({"algo": "collnetdirect"}, on=False).collective("all_reduce", 1 << 20, R16)
    with pytest.raises(Exception, match="leave all_gather no algorithm"):
        sharp({"algo": "collnetdirect,collnetchain"}).collective("all_gather", 1 << 20, R16)
    # with SHARP, NVLS runs across nodes (NCCL: NVLS beyond one node only with CollNet). NVLS graph 8 heads at
    # 40 (9 x 40 <= 370.8), bw_inter raised to 48; intra 40 x .85 x 7/8 x 2 = 59.5, inter 48: 48 x 8 ch = 384,
    # x 16/30 = 204.8 GB/s; lat = 25 (NVLink NVLS) + 18 (net NVLS) = 43: at 1 MiB 48.12 us, less than tree/LL128's
    # 60.4, which runs there without SHARP
    got = sharp().collective("all_reduce", 1 << 20, R16)
    assert got is not None and got.algo == "nvls"
    assert us(got) == pytest.approx(43.0 + (1 << 20) / (1000 * 204.8), rel=1e-9)
    plain = sharp(on=False).collective("all_reduce", 1 << 20, R16)
    assert plain is not None and (plain.algo, plain.proto) == ("tree", "LL128")


@pytest.mark.parametrize(("where", "timing", "words"), [
    ("scale_up", {"ring/XL": fig(1.0)}, "timing key 'ring/XL' is not algo/proto"),
    ("nics", {"tree/LL": {**fig(1.0, -2.0)}}, "bw_factor"),
    ("nics", {"tree/LL": {"hw_latency_us": 1.0, "provenance": "guessed", "source": "t"}}, "provenance"),
])
def test_a_bad_timing_figure_names_its_field_and_exits_2(tmp_path: Path, where: str, timing: dict[str, Any],
                                                          words: str):
    import subprocess
    import sys

    import yaml

    from schedsim.errors import ProfileError
    from schedsim.hardware.profile import load_profile
    from tests.network.test_network import BASE, ROOT

    d = copy.deepcopy(BASE)
    d["topology"] = copy.deepcopy(TOPO22)
    d["topology"][where]["timing"] = timing
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(ProfileError) as e:
        load_profile(str(path))
    assert f"topology.{where}.timing" in str(e.value) and words in str(e.value)
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(ROOT / "schedules/allgather_mm.yaml"),
                          "--profile", str(path), "-o", str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and f"topology.{where}.timing" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_transports_latency_times_each_crossing_by_hand() -> None:
    # 2 nodes x 2 GPUs (ranks 0 1 | 2 3), 2 NICs of 400 Gb/s, ring LL all_reduce 4 KiB (NCCL's pick): 20.6 us (NCCL's
    # 16.0 with its 2 network steps at the tree's 5.0, not 2.7) + 4096 B / 4 GB/s on 1 of 8 channels
    # (tests/network/test_network.py), and the chain's 3 crossings (1-2, 3-0, 1-2) at the transport's figure: roce
    # 20.6 + 3 x 1.26 = 24.38, tcpxo 20.6 + 3 x 37.33 = 132.59; infiniband adds nothing
    for kind, lat in (("infiniband", 0.0), ("roce", 1.26), ("tcpxo", 37.33)):
        topo = hopper(2, 2)
        topo["nics"] = {**topo["nics"], "transport": kind}
        got = NcclNetwork(profile(topo)).collective("all_reduce", 4096, R4)
        assert got is not None and (got.algo, got.proto) == ("ring", "LL"), kind
        assert us(got) == pytest.approx(20.6 + 3 * lat + 4096 / (1000 * 4.0), rel=1e-9), kind


@pytest.mark.parametrize("profile", ["dgx_h100", "gb200_nvl72", "h200"])
def test_the_switches_above_a_size_are_the_whole_searchs_above_it(profile):
    # the search of NCCL's switches from a message's grid step on (the first message of a shape) against the search
    # of every step: the same switch sizes and least times past that step's start, so the same floor for a message
    # of that size or more; a smaller message afterwards searches every step
    import bisect

    from schedsim.hardware.profile import load_profile
    from schedsim.network import NcclNetwork

    net = NcclNetwork(load_profile(profile))
    for n, func in ((8, "allreduce"), (16, "allgather"), (64, "reducescatter")):
        shape = net.shape(tuple(range(n)))
        sizes, suffix, lowest = net._switches(shape, func)
        assert lowest == -math.inf and sizes == sorted(sizes) and sizes
        for above in (1.0, 4096.0, 64.0 * 2**20, sizes[len(sizes) // 2], sizes[-1], 2.0**60):
            s2, f2, low2 = net._switches(shape, func, above)
            assert low2 <= above
            keep = [i for i, s in enumerate(sizes) if s > low2]
            assert s2 == [sizes[i] for i in keep] and f2 == [suffix[i] for i in keep]
            for q in (above, above + 1, above * 3, low2 + 1):
                i, j = bisect.bisect_right(sizes, q), bisect.bisect_right(s2, q)
                assert (suffix[i] if i < len(sizes) else math.inf) == (f2[j] if j < len(s2) else math.inf)
        fresh = NcclNetwork(load_profile(profile))  # a large message first, then smaller ones: the floors the same
        for q in (64.0 * 2**20, 4096.0, sizes[0], sizes[0] - 1, 3.0):
            assert fresh._later_min(shape, func, q) == net._later_min(shape, func, q)
        assert fresh._later[(shape, func)][2] == -math.inf
