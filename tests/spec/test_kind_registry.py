"""The op-kind registry (schedsim.kinds.KINDS): each stage reads a kind's entry, not its name.

A toy kind registered in a test-local copy of the registry (``monkeypatch.setitem``, undone after each test) is
resourced, timed, issued and built by the entry alone, with no other edit; toy kinds registered with a fresh
build of the spec models (``registered``) are validated, lowered, simulated and given an executor kernel by their
entries alone; and every entry agrees with the spec model that validates its kind and with the executor's builders.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from types import SimpleNamespace
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
TOY_COMM = KindInfo("toy_sum", "CollectiveOp", (), "comm", "network", "collective", "_all_reduce", "all_reduce",
                    "nop", nccl="allreduce", bus="2(n-1)/n", chakra="ALL_REDUCE")


#: Kinds that are an existing entry under another name: a fused kernel timed by the roofline, a GEMM timed by the
#: GEMM table, a prefetch on the copy engine.
TOY_KERNEL = KindInfo("toy_kernel", "ComputeOp", (), "compute", "roofline", "kernel", "_compute")
TOY_GEMM = KindInfo("toy_gemm", "MatmulOp", ("m", "n", "k"), "compute", "gemm", "kernel", "_matmul")
TOY_PREFETCH = KindInfo("toy_prefetch2", "MemcpyOp", ("direction",), "copy", "copy", "copy", "_memcpy")


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``register(*entries)``: add registry entries (the registry builds the spec models afresh,
    :func:`schedsim.spec.model.build_op_models`); undone after the test."""

    def register(*infos: KindInfo) -> None:
        for info in infos:
            monkeypatch.setitem(KINDS, info.name, info)

    yield register
    monkeypatch.undo()


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
    """An all_reduce has no root (``rooted`` False): a root written on it is refused (it would be ignored). Marked
    rooted in a test-local entry, the same op fails the root rule, with no other edit."""
    from dataclasses import replace

    from schedsim.errors import SpecError
    from schedsim.spec.loader import load_text

    text = "schema_version: 1\nname: t\nworld_size: 2\nops:\n  - {name: a, kind: all_reduce, root: 3, bytes: 8}\n"
    with pytest.raises(SpecError, match=r"all_reduce 'a' has no root rank \(only broadcast, reduce, scatter, gather "
                       r"have one\)"):
        load_text(text, "t.yaml")
    load_text(text.replace(" root: 3,", ""), "t.yaml")
    monkeypatch.setitem(KINDS, "all_reduce", replace(KINDS["all_reduce"], rooted=True))
    with pytest.raises(SpecError, match="all_reduce 'a' has root 3 outside its group"):
        load_text(text, "t.yaml")


#: Two ranks: 250 GEMMs in a row, a fused kernel (FLOP and bytes: the roofline), a host-to-device prefetch waiting
#: on it, an all_reduce waiting on the GEMMs; written with the shipped kinds, and with the toy kinds in place of
#: three of them.
SHIPPED_KINDS = """schema_version: 1
name: toy
world_size: 2
ops:
  - {name: g, kind: matmul, m: 4096, n: 4096, k: 4096, dtype: bf16, repeat: 250}
  - {name: f, kind: compute, flops: 1.0e9, bytes: 4.0e8, dtype: bf16}
  - {name: p, kind: memcpy, bytes: 6.4e7, direction: h2d, deps: [f]}
  - {name: r, kind: all_reduce, bytes: 6.4e7, deps: [g]}
"""
TOY = {"matmul": "toy_gemm", "compute": "toy_kernel", "memcpy": "toy_prefetch2"}


def test_a_new_kind_is_its_registry_entry_alone(registered: Callable[..., None]) -> None:
    """Toy kinds registered with no other edit: the schedule with them validates, lowers and simulates to the
    timeline of the same ops written with the kinds whose entries they copy, span for span (h200: the GEMM table
    and the power state its 250 GEMMs in a row reach, past the curve's 40 ms onset; the roofline, the copy engine,
    host launches, streams by resource); the executor builds each one with its
    entry's kernel (a fused kernel of 1e9 FLOP: an m × side × side GEMM, side = round((1e9 / 2)^(1/3)) = 794,
    m = round(1e9 / (2 · 794²)) = 793)."""
    from schedsim import api
    from schedsim.errors import SpecError

    registered(TOY_KERNEL, TOY_GEMM, TOY_PREFETCH)
    toy_text = SHIPPED_KINDS
    for k, toy in TOY.items():
        toy_text = toy_text.replace(f"kind: {k},", f"kind: {toy},")
    spec = api.load_text(toy_text, "toy.yaml")
    assert [op.kind for op in spec.ops] == ["toy_gemm", "toy_kernel", "toy_prefetch2", "all_reduce"]
    assert type(spec.ops[0]) is spec_model.MatmulOp and type(spec.ops[2]) is spec_model.MemcpyOp
    with pytest.raises(SpecError, match="missing required field 'direction'"):
        api.load_text(toy_text.replace(", direction: h2d", ""), "toy.yaml")

    toy_run = api.predict(spec, "h200")
    run = api.predict(api.load_text(SHIPPED_KINDS, "toy.yaml"), "h200")
    got = sorted((s.id, s.kind, s.stream, s.resource, s.start_s, s.end_s) for s in toy_run.timeline.spans)
    want = sorted((s.id, TOY.get(s.kind, s.kind), s.stream, s.resource, s.start_s, s.end_s)
                  for s in run.timeline.spans)
    assert got == want and len(got) == 8
    assert {s.resource for s in toy_run.timeline.spans if s.kind == "toy_prefetch2"} == {"copy"}

    torch = pytest.importorskip("torch")
    from executor.kernels import Materializer

    ctx = SimpleNamespace(rank=0, device=torch.device("cpu"), cuda=False, groups={})
    ops = {op.kind: op for op in api.lower_spec(spec).ops() if op.rank == 0}
    mat = Materializer(ctx, mem_budget_bytes=1e9)
    assert mat.make(ops["toy_kernel"]).note == "GEMM 793x794x794 for 1e+09 FLOP"
    assert mat.make(ops["toy_gemm"]).op is ops["toy_gemm"]


def test_the_spec_models_are_built_back_without_the_toy_kinds(registered: Callable[..., None]) -> None:
    """Registering builds each model's ``kind`` from the registry, and the fixture's undo builds it back: a
    toy kind is valid only while registered."""
    from schedsim import api
    from schedsim.errors import SpecError

    text = SHIPPED_KINDS.replace("kind: compute,", "kind: toy_kernel,")
    registered(TOY_KERNEL)
    assert get_args(spec_model.ComputeOp.model_fields["kind"].annotation) == ("compute", "toy_kernel")
    assert spec_model.OP_MODELS["toy_kernel"] is spec_model.ComputeOp
    api.load_text(text, "toy.yaml")
    del KINDS["toy_kernel"]
    assert "toy_kernel" not in spec_model.OP_MODELS
    with pytest.raises(SpecError, match="unknown op kind 'toy_kernel'"):
        api.load_text(text, "toy.yaml")


def test_registering_a_kind_is_enough_for_schedules_to_name_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry rebuilds the spec models after each change (``KINDS.on_change``): a kind set in the registry,
    and nothing else, validates; removed (the undo), it is unknown again; an entry naming no spec model is refused
    at registration."""
    from schedsim import api
    from schedsim.errors import SpecError

    text = SHIPPED_KINDS.replace("kind: compute,", "kind: toy_kernel,")
    with monkeypatch.context() as m:
        m.setitem(KINDS, "toy_kernel", TOY_KERNEL)
        assert get_args(spec_model.ComputeOp.model_fields["kind"].annotation) == ("compute", "toy_kernel")
        assert [op.kind for op in api.load_text(text, "toy.yaml").ops].count("toy_kernel") == 1
    assert "toy_kernel" not in spec_model.OP_MODELS
    with pytest.raises(SpecError, match="unknown op kind 'toy_kernel'"):
        api.load_text(text, "toy.yaml")
    with monkeypatch.context() as m, pytest.raises(KeyError, match="NoSuchOp"):
        m.setitem(KINDS, "toy_bad", replace(TOY_KERNEL, name="toy_bad", spec="NoSuchOp"))
    assert "toy_bad" not in KINDS and "toy_bad" not in spec_model.OP_MODELS


def test_a_registered_kind_s_table_is_a_profile_table_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile's measured-table keys are the registry's table kinds when it loads (``TABLE_KINDS`` read at each
    use, not at import): a table for a kind's own ``table`` is refused until the kind is registered, loads while
    it is, and is refused again once it is removed, with pydantic's message for the keys."""
    from pydantic import ValidationError

    from schedsim.kinds import TABLE_KINDS

    d = toy_profile_dict()
    d["collectives"] = {"source": "test", "tables": {"toy_table": {2: [[1024, 1.0]]}}}
    refused = "Input should be 'all_reduce', 'all_gather', .* or 'sendrecv'"
    with pytest.raises(ValidationError, match=refused):
        HardwareProfile.model_validate(d)
    with monkeypatch.context() as m:
        m.setitem(KINDS, "toy_tabled", KindInfo("toy_tabled", "CollectiveOp", (), "comm", "network", "collective",
                                                 "_all_reduce", "toy_table", "nop", nccl="allreduce", bus="2(n-1)/n"))
        assert TABLE_KINDS[-2:] == ("toy_table", "sendrecv")  # the collectives' tables, then the p2p one
        assert HardwareProfile.model_validate(d).collectives.tables == {"toy_table": {2: [(1024.0, 1.0)]}}
    assert "toy_table" not in TABLE_KINDS
    with pytest.raises(ValidationError, match=refused):
        HardwareProfile.model_validate(d)


#: Communication kinds that are an existing entry under another name: a sum over the group (all_reduce's rules:
#: NCCL's allreduce, bus factor 2(n-1)/n), an exchange of a size per member (all_to_all's: grouped send/recv, no
#: root), and a message each way of a send/recv pair.
TOY_ALLREDUCE = KindInfo("toy_allreduce", "CollectiveOp", (), "comm", "network", "collective", "_all_reduce",
                         "all_reduce", "nop", nccl="allreduce", bus="2(n-1)/n", chakra="ALL_REDUCE", chart="all_reduce")
TOY_EXCHANGE = KindInfo("toy_exchange", "CollectiveOp", (), "comm", "network", "collective", "_all_to_all",
                        "all_to_all", "copy", per_rank_size=True, bus="(n-1)/n", chakra="ALL_TO_ALL")
TOY_SEND = KindInfo("toy_send", "SendOp", ("peer",), "comm", "network", "p2p", "_send", "sendrecv", sender=True,
                    chakra="COMM_SEND_NODE")
TOY_RECV = KindInfo("toy_recv", "RecvOp", ("peer",), "comm", "network", "p2p", "_recv", "sendrecv",
                    chakra="COMM_RECV_NODE")
TOY_COMM_KINDS = {"all_reduce": TOY_ALLREDUCE, "all_to_all": TOY_EXCHANGE, "send": TOY_SEND, "recv": TOY_RECV}


def comm_schedule(world: int, toy: bool = False, side: int = 2048, mb: float = 1.0) -> str:
    """``world`` ranks: a ``side``-cubed GEMM, an all_reduce of 64 MB waiting on it, beside it a 32 MB message from
    rank 0 to rank ``world // 2`` (another node on dgx_h100) and a 16 MB one back, then an all_to_all of 8 MB (sizes
    in units of ``mb`` MB); with ``toy``, written with the toy kinds of :data:`TOY_COMM_KINDS` in their place."""
    half = world // 2
    text = f"""schema_version: 1
name: toy_comm
world_size: {world}
ops:
  - {{name: g, kind: matmul, m: {side}, n: {side}, k: {side}, dtype: bf16}}
  - {{name: r, kind: all_reduce, bytes: {64e6 * mb:.0f}, deps: [g]}}
  - {{name: s, kind: send, peer: {half}, bytes: {32e6 * mb:.0f}, ranks: [0], stream: p2p}}
  - {{name: v, kind: recv, peer: 0, bytes: {32e6 * mb:.0f}, ranks: [{half}], stream: p2p}}
  - {{name: s2, kind: send, peer: 0, bytes: {16e6 * mb:.0f}, ranks: [{half}], stream: p2p, tag: back}}
  - {{name: v2, kind: recv, peer: {half}, bytes: {16e6 * mb:.0f}, ranks: [0], stream: p2p, tag: back}}
  - {{name: x, kind: all_to_all, bytes: {8e6 * mb:.0f}, deps: [r]}}
"""
    if toy:
        for k, info in TOY_COMM_KINDS.items():
            text = text.replace(f"kind: {k},", f"kind: {info.name},")
    return text


def test_the_toy_communication_kinds_copy_the_shipped_entries() -> None:
    """Each toy entry is the entry of the kind it stands for, under another name (the collective also names its
    colour group: a chart draws it in all_reduce's colour)."""
    for kind, toy in TOY_COMM_KINDS.items():
        assert toy == replace(KINDS[kind], name=toy.name, chart=toy.chart)
    assert TOY_ALLREDUCE.chart == "all_reduce" and TOY_SEND.chart == ""


@pytest.mark.parametrize(("profile", "world"), [("h200", 2), ("dgx_h100", 16)])
def test_a_new_collective_or_p2p_kind_is_its_registry_entry_alone(registered: Callable[..., None], profile: str,
                                                                 world: int) -> None:
    """Toy collective and send/recv kinds registered with no other edit predict, span for span, the timeline of
    the same ops written with the kinds whose entries they copy: on h200 (NCCL's tuning model times the
    all_reduce on one node; the exchange as grouped send/recv), and on dgx_h100 over two nodes of 8 (the message
    across nodes through the NICs, the all_reduce's ring or tree across nodes sharing them, an exchange whose
    ranks share their node's NICs). A copy of all_reduce's entry without its NCCL function (``nccl``) would be
    timed as grouped send/recv (:meth:`schedsim.network.NcclNetwork.spread`): 64 MB over 2 h200 ranks in 100.7 µs,
    not NCCL's ring in 193.0 µs."""
    from schedsim import api
    from schedsim.report.chart_base import KIND_COLORS, _color

    registered(*TOY_COMM_KINDS.values())
    toy_spec = api.load_text(comm_schedule(world, toy=True), "toy.yaml")
    assert {op.kind for op in toy_spec.ops} == {"matmul", *(t.name for t in TOY_COMM_KINDS.values())}
    toy_run = api.predict(toy_spec, profile)
    run = api.predict(api.load_text(comm_schedule(world), "toy.yaml"), profile)
    name = {k: t.name for k, t in TOY_COMM_KINDS.items()}
    got = sorted((s.id, s.kind, s.stream, s.resource, s.start_s, s.end_s) for s in toy_run.timeline.spans)
    want = sorted((s.id, name.get(s.kind, s.kind), s.stream, s.resource, s.start_s, s.end_s)
                  for s in run.timeline.spans)
    assert got == want and len(got) == 3 * world + 4
    assert toy_run.timeline.makespan_s == run.timeline.makespan_s
    assert _color("toy_allreduce") == KIND_COLORS["all_reduce"]


def test_the_kind_lists_hold_a_kind_registered_after_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lists modules imported before a kind was registered (lowering's, the executor's) hold it while it is
    registered, in the registry's order (collectives, then the p2p kinds, for ``COMM_KINDS``), and not after."""
    from executor.runtime import _COMM_KINDS
    from schedsim.kinds import COLLECTIVE_KINDS, COMM_KINDS, P2P_KINDS
    from schedsim.lower import link

    before = tuple(COMM_KINDS)
    monkeypatch.setitem(KINDS, TOY_SEND.name, TOY_SEND)
    monkeypatch.setitem(KINDS, TOY_ALLREDUCE.name, TOY_ALLREDUCE)
    assert "toy_send" in link.P2P_KINDS and "toy_allreduce" in link.COLLECTIVE_KINDS and "toy_send" in _COMM_KINDS
    assert COMM_KINDS == COLLECTIVE_KINDS + P2P_KINDS == before[:8] + ("toy_allreduce", "send", "recv", "toy_send")
    monkeypatch.undo()
    assert COMM_KINDS == before and "toy_send" not in P2P_KINDS
