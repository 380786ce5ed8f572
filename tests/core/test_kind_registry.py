"""The op-kind registry (schedsim.kinds.KINDS): each stage reads a kind's entry, not its name.

A toy kind registered in a test-local copy of the registry (``monkeypatch.setitem``, undone after each test) is
resourced, timed, issued and built by the entry alone, with no other edit; and every entry agrees with the spec
model that validates its kind and with the executor's builders.
"""

from __future__ import annotations

from typing import get_args

import pytest

import schedsim.spec.model as spec_model
from schedsim.gpu import host as gh
from schedsim.gpu.cost import CostModel
from schedsim.graph.ops import Op, resource_of
from schedsim.hardware.profile import HardwareProfile
from schedsim.kinds import KINDS, OP_KINDS, KindInfo
from schedsim.network.model import NetworkModel
from schedsim.sim.waves_columns import _res_of
from tests.conftest import toy_profile_dict

#: A copy-engine kind (a prefetch, say): the memcpy entry's rules under another name.
TOY_COPY = KindInfo("toy_prefetch", "MemcpyOp", ("direction",), "copy", "copy", "copy", "_memcpy")
#: A collective kind timed from the all_reduce table and links, a no-op on one rank.
TOY_COMM = KindInfo("toy_sum", "CollectiveOp", (), "comm", "network", "collective", "_collective", "all_reduce",
                    "nop")


@pytest.fixture
def toy_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    for info in (TOY_COPY, TOY_COMM):
        monkeypatch.setitem(KINDS, info.name, info)


def test_registry_lists_every_op_kind_once_in_order() -> None:
    assert tuple(KINDS) == OP_KINDS and all(k == info.name for k, info in KINDS.items())


@pytest.mark.parametrize("kind", OP_KINDS)
def test_each_entry_names_the_spec_model_and_fields_that_validate_its_kind(kind: str) -> None:
    info = KINDS[kind]
    model = getattr(spec_model, info.spec)
    assert kind in get_args(model.model_fields["kind"].annotation)
    required = {n for n, f in model.model_fields.items() if f.is_required()}
    assert required == {"name", "kind", *info.fields}


@pytest.mark.parametrize("kind", OP_KINDS)
def test_each_entry_names_an_executor_builder(kind: str) -> None:
    materializer = pytest.importorskip("executor.kernels").Materializer
    assert callable(getattr(materializer, KINDS[kind].executor))


def test_a_toy_copy_kind_is_resourced_timed_and_issued_by_its_entry(toy_kinds: None) -> None:
    """A 2 MB host-to-device toy op: the copy engine (resource ``copy``, the loop's h2d engine 2), latency +
    bytes / h2d bandwidth = 0 + 2e6 / 10 GB/s = 200 µs on the toy profile (the memcpy rule), a copy's host call."""
    op = Op(name="p", rank=0, kind="toy_prefetch", stream="copy", seq=0, nbytes=2e6, direction="h2d")
    assert resource_of("toy_prefetch") == "copy" and _res_of(op) == 2
    assert CostModel(HardwareProfile.model_validate(toy_profile_dict())).duration(op) == pytest.approx(200e-6)
    assert gh.host_class(op) == gh.H_MEMCPY


def test_a_toy_collective_is_timed_by_the_network_model_from_its_table_kind(toy_kinds: None) -> None:
    """Two ranks over NVLink (1 µs, 100 GB/s): the all_reduce link model, 2(n-1) = 2 steps of 1 µs plus
    2(n-1)/n · 4 MB / 100 GB/s = 42 µs; on one rank nothing (``one_rank`` nop); a collective's host call."""
    p = HardwareProfile.model_validate(toy_profile_dict())
    net = NetworkModel(p, 0.0)
    assert net.collective("toy_sum", 4e6, (0, 1)) == pytest.approx(2e-6 + 4e6 / 100e9)
    assert net.collective("toy_sum", 4e6, (0, 1)) == net.collective("all_reduce", 4e6, (0, 1))
    assert net.collective("toy_sum", 4e6, (3,)) == 0.0
    op = Op(name="s", rank=0, kind="toy_sum", stream="comm", seq=0, nbytes=4e6, group=(0, 1))
    assert resource_of("toy_sum") == "comm" and _res_of(op) == 1
    assert CostModel(p).duration(op) == net.collective("toy_sum", 4e6, (0, 1))
    assert gh.host_class(op) == gh.H_COLL



def test_validation_checks_the_root_of_the_kinds_the_registry_marks_rooted(monkeypatch: pytest.MonkeyPatch) -> None:
    """An all_reduce has no root (``rooted`` False): a root outside its group passes. Marked rooted in a test-local
    entry, the same op fails the root rule, with no other edit."""
    from dataclasses import replace

    from schedsim.errors import SpecError
    from schedsim.spec.loader import load_text

    text = "schema_version: 1\nname: t\nworld_size: 2\nops:\n  - {name: a, kind: all_reduce, root: 3, bytes: 8}\n"
    load_text(text, "t.yaml")
    monkeypatch.setitem(KINDS, "all_reduce", replace(KINDS["all_reduce"], rooted=True))
    with pytest.raises(SpecError, match="all_reduce 'a' has root 3 outside its group"):
        load_text(text, "t.yaml")
