"""``topology.nics.transport`` (:mod:`schedsim.hardware.transports`): each kind's default
``transport_latency_us``, a stated figure over it, a kind without a figure refused (exit 2, naming the field and
the fix), the shipped profiles' transports (the time it adds, by hand: tests/network/test_network_timing.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from schedsim.errors import ProfileError
from schedsim.hardware.profile import load_profile
from schedsim.hardware.transports import TRANSPORT_LATENCY
from tests.network.test_network import ROOT


def with_nics(tmp_path: Path, **nics: object) -> Path:
    """h200 with one GPU and one NIC a node (tp_ffn's all_reduce crosses nodes) and ``nics`` over its NICs."""
    d = yaml.safe_load((ROOT / "schedsim/hardware/profiles/h200.yaml").read_text())
    d["topology"]["gpus_per_node"] = 1
    d["topology"]["nics"] = {**d["topology"]["nics"], "per_node": 1, **nics}
    path = tmp_path / ("_".join(f"{k}_{v}" for k, v in nics.items()) + ".yaml")  # load_profile caches by path
    path.write_text(yaml.safe_dump(d))
    return path


def test_shipped_profiles_name_their_transport() -> None:
    # h200: 8x 400 GbE RoCE (issue 35's run); dgx_h100, dgx_a100: NDR / HDR InfiniBand; a3_mega: GPUDirect-TCPXO
    want = {"h200": ("roce", 1.26), "dgx_h100": ("infiniband", 0.0), "dgx_a100": ("infiniband", 0.0),
            "a3_mega": ("tcpxo", 37.33), "gb200_nvl72": (None, 0.0)}
    for name, (kind, lat) in want.items():
        nics = load_profile(name).topology.nics
        assert nics is not None and (nics.transport, nics.transport_latency_us) == (kind, lat), name
    a3 = load_profile("a3_mega").topology
    assert a3.nics is not None and (a3.nics.per_node, a3.nics.bandwidth_Gbps, a3.gpus_per_node) == (8, 200.0, 8)
    # a figure is fitted on a named log, or NCCL's own (InfiniBand); none is fitted without its source
    for kind, fig in TRANSPORT_LATENCY.items():
        assert fig is None or (fig[1] in ("fitted", "assumed", "published") and fig[2]), kind


def test_a_stated_transport_latency_overrides_the_transports(tmp_path: Path) -> None:
    p = load_profile(str(with_nics(tmp_path, transport="tcpxo", transport_latency_us=5.0)))
    assert p.topology.nics is not None and p.topology.nics.transport_latency_us == 5.0
    p = load_profile(str(with_nics(tmp_path, transport="roce")))
    assert p.topology.nics is not None and p.topology.nics.transport_latency_us == 1.26


@pytest.mark.parametrize("kind", ["efa", "tcpx", "socket"])
def test_a_transport_without_a_figure_needs_one_stated(tmp_path: Path, kind: str) -> None:
    path = with_nics(tmp_path, transport=kind)
    with pytest.raises(ProfileError) as e:
        load_profile(str(path))
    assert "topology.nics" in str(e.value) and "topology.nics.transport_latency_us" in str(e.value)
    assert f"(got '{kind}')" in str(e.value)  # the kind, not the whole topology.nics mapping with its base's text
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(ROOT / "schedules/tp_ffn.yaml"),
                          "--profile", str(path), "--no-gantt", "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and f"transport: {kind} has no" in out.stderr
    assert "fix: state topology.nics.transport_latency_us" in out.stderr and "--transport-latency" in out.stderr
    assert "Traceback" not in out.stderr
    stated = load_profile(str(with_nics(tmp_path, transport=kind, transport_latency_us=7.5)))
    assert stated.topology.nics is not None and stated.topology.nics.transport_latency_us == 7.5


def test_an_unknown_transport_names_the_kinds(tmp_path: Path) -> None:
    path = with_nics(tmp_path, transport="ethernet")
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(ROOT / "schedules/tp_ffn.yaml"),
                          "--profile", str(path), "--no-gantt", "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "topology.nics.transport" in out.stderr and "'roce'" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_derived_profile_with_another_transport_does_not_inherit_its_bases_figure(tmp_path: Path) -> None:
    # the base states 5 us (measured on its RoCE); a child naming TCPXO gets TCPXO's 37.33, not RoCE's 5
    (tmp_path / "measured.yaml").write_text("base: h200\nname: measured\ntopology:\n  nics:\n"
                                            "    transport_latency_us: 5.0\n")
    for name, nics, want in [("tcpxo_child", "transport: tcpxo", 37.33), ("same_child", "transport: roce", 5.0),
                             ("stated_child", "{transport: tcpxo, transport_latency_us: 9.0}", 9.0)]:
        nics_yaml = nics if nics.startswith("{") else "\n    " + nics
        (tmp_path / f"{name}.yaml").write_text(f"base: measured.yaml\nname: {name}\ntopology:\n  nics: {nics_yaml}\n")
        got = load_profile(str(tmp_path / f"{name}.yaml")).topology.nics
        assert got is not None and got.transport_latency_us == want, name
    # a kind without a figure, named over a base's stated one, asks for its own (exit 2 on the CLI: above)
    (tmp_path / "efa_child.yaml").write_text("base: measured.yaml\nname: efa_child\ntopology:\n  nics:\n"
                                             "    transport: efa\n")
    with pytest.raises(ProfileError, match="transport: efa has no"):
        load_profile(str(tmp_path / "efa_child.yaml"))


def test_the_tcpxo_figure_is_its_logs_fit_under_a3_megas_published_nccl_settings() -> None:
    # the fit source ran under Google's TCPXO environment (NCCL_PROTO=Simple,LL128, NCCL_MIN_NCHANNELS=4), which
    # a3_mega states; fitted there (8 B .. 4 KiB), the log gives the shipped figure back (to its 0.01 us)
    from schedsim.network.fit import fit_profile
    from schedsim.network.nccl_tests import parse_nccl_tests

    a3 = load_profile("a3_mega")
    assert (a3.nccl.proto, a3.nccl.min_nchannels) == ("Simple,LL128", 4)
    log = parse_nccl_tests((ROOT / "tests/data/nccl_tests_a3mega_tcpxo_2x8.log").read_text(), collective="all_reduce")
    fitted, _figs, _notes = fit_profile(a3, [log], "refit", transport=True)
    fig = TRANSPORT_LATENCY["tcpxo"]
    assert fitted.topology.nics is not None and fig is not None
    assert fitted.topology.nics.transport_latency_us == pytest.approx(fig[0], abs=0.005)
