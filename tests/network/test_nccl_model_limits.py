"""NCCL's model within what the hardware and NCCL allow: an all_reduce no faster than the NICs carry it, two
nodes no faster than one, NVLS only on NVSwitch, the notes naming the model that times a collective, and
subgroup communicators created lazily in a cycle hanging as in torch."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from schedsim import api
from schedsim.gpu.cost import CostModel
from schedsim.hardware.profile import load_profile
from schedsim.network import NcclNetwork
from schedsim.notes import guesses

AR16 = """\
schema_version: 1
name: ar16
world_size: 16
ops:
  - {name: ar, kind: all_reduce, bytes: 1073741824}
"""


def _profile_with(tmp_path: Path, name: str, **topo: object) -> Path:
    """dgx_h100 with topology fields replaced, the resolved profile written out."""
    d = copy.deepcopy(load_profile("dgx_h100").model_dump(mode="json"))
    d["name"] = name
    for key, val in topo.items():
        if isinstance(val, dict):
            d["topology"][key].update(val)
        else:
            d["topology"][key] = val
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(d))
    return f


def test_no_alpha_beta_note_where_the_nccl_model_times_the_collective() -> None:
    spec = api.load_text(AR16)
    prog = api.lower_spec(spec)
    prof = load_profile("dgx_h100")
    cost = CostModel(prof)
    assert cost.net.cost("all_reduce", 1 << 30, tuple(range(16))) is not None  # NCCL model times it
    notes = guesses(prog, prof)
    assert "collective-alpha-beta" not in {n.kind for n in notes}
    (nccl,) = [n for n in notes if n.kind == "collective-nccl-model"]  # what really times it, said once
    assert "16 all_reduce op(s) on 16 ranks" in nccl and "NCCL's tuning model" in nccl
    assert "topology.scale_up, topology.nics" in nccl  # dgx_h100: PUBLISHED NVLink, PUBLISHED/ASSUMED NICs


def test_nvls_on_pcie_is_refused_or_ignored(tmp_path: Path) -> None:
    from schedsim.errors import ProfileError

    for kind in ("pcie", "nvlink"):  # NVLS is NVSwitch multicast: refused on PCIe and on direct NVLink
        f = _profile_with(tmp_path, f"{kind}_nvls", scale_up={"kind": kind, "bandwidth_GBps": 24.0, "nvls": True})
        with pytest.raises(ProfileError, match=rf"topology\.scale_up.*nvls: true needs kind: nvswitch, not {kind}"):
            load_profile(str(f))
    f = _profile_with(tmp_path, "pcie_plain", scale_up={"kind": "pcie", "bandwidth_GBps": 24.0, "nvls": False})
    got = NcclNetwork(load_profile(str(f))).collective("all_reduce", 1 << 30, tuple(range(16)))
    assert got is not None and got.algo not in ("nvls", "nvls_tree")


def test_all_reduce_no_faster_than_the_nic_allows(tmp_path: Path) -> None:
    f = _profile_with(tmp_path, "tinynic", nics={"bandwidth_Gbps": 0.001})
    net = NcclNetwork(load_profile(str(f)))
    got = net.collective("all_reduce", 1 << 30, tuple(range(16)))
    assert got is not None
    nic_GBps = 0.001 / 8
    # any all_reduce over 2 nodes needs the whole buffer into each node (no SHARP), through its 8 NICs
    floor_s = (1 << 30) / (8 * nic_GBps * 1e9)
    assert got.seconds >= floor_s


CYCLIC_FIRST_CALLS = """\
schema_version: 1
name: lazy_cycle
world_size: 3
ops:
  - {name: a01, kind: all_reduce, bytes: 1048576, ranks: [0], group: [0, 1], stream: s0}
  - {name: a02, kind: all_reduce, bytes: 1048576, ranks: [0], group: [0, 2], stream: s1}
  - {name: a12, kind: all_reduce, bytes: 1048576, ranks: [1], group: [1, 2], stream: s0}
  - {name: a01, kind: all_reduce, bytes: 1048576, ranks: [1], group: [0, 1], stream: s1}
  - {name: a02, kind: all_reduce, bytes: 1048576, ranks: [2], group: [0, 2], stream: s0}
  - {name: a12, kind: all_reduce, bytes: 1048576, ranks: [2], group: [1, 2], stream: s1}
"""


def test_lazy_creation_of_subgroup_communicators_in_a_cycle_hangs() -> None:
    from schedsim.errors import DeadlockError

    with pytest.raises(DeadlockError):
        api.predict(api.load_text(CYCLIC_FIRST_CALLS, "cycle.yaml"), "h200")


def test_h200_two_node_all_reduce_no_faster_than_one_node() -> None:
    cost = CostModel(load_profile("h200"))
    one = cost.net.collective("all_reduce", 1 << 30, tuple(range(8)))
    two = cost.net.collective("all_reduce", 1 << 30, tuple(range(16)))
    # busbw = S * 2 (n-1)/n / t (nccl-tests); two nodes' busbw at most one node's
    assert (1 << 30) * 2 * 15 / 16 / two <= (1 << 30) * 2 * 7 / 8 / one


def test_the_nodes_a_program_spans_follow_the_placement() -> None:
    """``notes._spans_nodes``: 16 ranks on dgx_h100 (8 GPUs a node) span nodes 0 and 1; 8 ranks sit on node 0;
    placed on GPUs 8-15 they sit on node 1 alone, on GPUs 4-11 they span nodes 0 and 1."""
    from schedsim.hardware.profile import HardwareProfile
    from schedsim.notes import _spans_nodes

    prof = load_profile("dgx_h100")
    p16, p8 = api.lower_spec(api.load_text(AR16)), api.lower_spec(api.load_text(AR16.replace("16", "8")))
    assert _spans_nodes(p16, prof) and not _spans_nodes(p8, prof)
    d = prof.model_dump()
    for placed, spans in ((list(range(8, 16)), False), (list(range(4, 12)), True)):
        d["topology"]["placement"] = placed
        assert _spans_nodes(p8, HardwareProfile.model_validate(d)) is spans
