"""The hand-written references of benchmarks/accuracy/handwritten for the schedules with CUDA graph segments
beside eager ops (``executor.runtime.CudaSegmentRunner``): small_ops.py ``--segment``
(schedules/small_ops_segment.yaml: the first ``graphed`` layers one segment on two streams) and tp_allreduce.py
``--beside-nccl`` (schedules/graph_beside_nccl.yaml: a one-stream segment per layer between eager all_reduce calls)
issue the executor's ops: on CPU ranks an iteration makes one call per lowered op, in the executor's issue order
(:func:`executor.lean.issue_order`), each GEMM of the op's shape, each elementwise op moving the op's bytes, each
all_reduce of the op's elements; and the scripts run end to end on gloo ranks. Without a GPU (the CUDA captures
themselves run on a GPU in ``benchmarks/accuracy/one_gpu_suite.sh``, cases so_seg and gbn_w1)."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

import pytest
from exec_helpers import ROOT, torchrun

from executor.lean import issue_order
from schedsim.graph.build import build_graph
from schedsim.spec.loader import load_schedule

torch = pytest.importorskip("torch")
HANDWRITTEN = ROOT / "benchmarks" / "accuracy" / "handwritten"
sys.path.insert(0, str(HANDWRITTEN))  # the scripts import their harness by name
harness = importlib.import_module("harness")


def lowered(schedule: str, rank: int = 0, **params: int) -> list[Any]:
    G = build_graph(load_schedule(ROOT / "schedules" / schedule, params))
    return sorted((o for o in (G.nodes[n]["op"] for n in G.nodes) if o.rank == rank), key=lambda o: o.seq)


def _cpu_init(self: Any) -> None:
    """Proc as rank 0 of ``WORLD_SIZE`` CPU ranks without a process group (the iteration itself needs none)."""
    self.rank, self.world, self.cuda, self.dev, self.cpus, self.ctrl = (0, int(os.environ.get("WORLD_SIZE", "1")),
                                                                        False, torch.device("cpu"), None, None)
    self.gen = torch.Generator().manual_seed(0)


@pytest.mark.parametrize("layers,graphed", [(4, 2), (6, 6), (5, 1)])
def test_segment_iteration_makes_the_executors_calls_in_its_order(layers: int, graphed: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    T, H = 8, 16
    monkeypatch.setattr(harness.Proc, "__init__", _cpu_init)
    monkeypatch.setenv("WORLD_SIZE", "1")
    _pr, issue, streams, _time = harness.reference_iteration(
        HANDWRITTEN / "small_ops.py", ["--segment", "--set", f"layers={layers}", "--set", f"graphed={graphed}",
                                       "--set", f"T={T}", "--set", f"H={H}", "--out", "unused.json"])
    log: list[tuple[Any, ...]] = []
    real_mm, real_add = torch.matmul, torch.add
    monkeypatch.setattr(torch, "matmul", lambda a, b, out: (log.append(("mm", *a.shape, b.shape[1])),
                                                            real_mm(a, b, out=out))[1])
    monkeypatch.setattr(torch, "add", lambda a, b, out: (log.append(("add", a.numel())), real_add(a, b, out=out))[1])
    assert streams == [] and issue() == []
    ops = lowered("small_ops_segment.yaml", layers=layers, graphed=graphed, T=T, H=H)
    names = issue_order(ops)
    # program order: the captured layers, seg_join, between, the eager layers, join (3 per layer + 3 more)
    assert len(names) == 3 * layers + 3
    assert names[3 * graphed:3 * graphed + 2] == ["seg_join", "between"] and names[-1] == "join"
    assert [o.graph == "seg" for o in ops] == [True] * (3 * graphed + 1) + [False] * (3 * (layers - graphed) + 2)
    # one call per op, of its shape: GEMMs T×H @ H×H, elementwise ops 2·T·H bf16 bytes = N/3 per operand
    want = [("mm", o.m, o.k, o.n) if o.kind == "matmul" else ("add", int(o.nbytes) // 3) for o in ops]
    assert log == want
    assert set(want) == {("mm", T, H, H), ("add", 2 * T * H * 2 // 3)}


def test_segment_reference_runs_on_one_gloo_rank_and_refuses_a_segment_past_the_layers(tmp_path) -> None:
    out = tmp_path / "seg.json"
    r = torchrun(1, ["--segment", "--set", "layers=4", "--set", "graphed=2", "--set", "H=64", "--iters", "3",
                     "--warmup", "1", "--out", str(out)], script=HANDWRITTEN / "small_ops.py")
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(out.read_text())
    assert (d["family"], d["params"]["layers"], d["params"]["graphed"], d["params"]["H"]) == (
        "small_ops_segment", 4, 2, 64)
    assert d["params"]["launch"] == "eager + one graph segment" and len(d["makespans_s"]) == 3
    bad = torchrun(1, ["--segment", "--set", "layers=4", "--set", "graphed=5", "--out", str(tmp_path / "b.json")],
                   script=HANDWRITTEN / "small_ops.py")
    assert bad.returncode != 0 and "fix: --set graphed=N with N in 1..4" in bad.stderr
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("world,layers", [(1, 3), (2, 2)])
def test_beside_nccl_iteration_makes_the_executors_calls_in_its_order(world: int, layers: int,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    hidden = 32
    monkeypatch.setattr(harness.Proc, "__init__", _cpu_init)
    monkeypatch.setenv("WORLD_SIZE", str(world))  # rank 0 of `world`: the linear's columns split world ways
    _pr, issue, streams, _time = harness.reference_iteration(
        HANDWRITTEN / "tp_allreduce.py", ["--beside-nccl", "--set", f"world_size={world}", "--set", f"layers={layers}",
                                          "--set", f"hidden={hidden}", "--out", "unused.json"])
    log: list[tuple[Any, ...]] = []
    real_mm, real_add = torch.matmul, torch.add
    monkeypatch.setattr(torch, "matmul", lambda a, b, out: (log.append(("mm", *a.shape, b.shape[1])),
                                                            real_mm(a, b, out=out))[1])
    monkeypatch.setattr(torch, "add", lambda a, b, out: (log.append(("add", a.numel())), real_add(a, b, out=out))[1])
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda t: log.append(("all_reduce", t.numel())))
    assert streams == []
    issue()
    ops = lowered("graph_beside_nccl.yaml", world_size=world, layers=layers, hidden=hidden)
    # per layer norm, linear, act, residual (one graph segment) and the eager all_reduce, all on one stream
    assert len(issue_order(ops)) == 5 * layers and {o.stream for o in ops} == {"compute"}
    assert [o.graph for o in ops] == ["layer", "layer", "layer", "layer", None] * layers
    want = [("mm", o.m, o.k, o.n) if o.kind == "matmul" else ("add", int(o.nbytes) // 3) if o.kind == "compute"
            else ("all_reduce", int(o.nbytes) // 2) for o in ops]  # bf16 elements
    assert log == want
    assert ("mm", 1, hidden, hidden // world) in want and ("all_reduce", hidden // world) in want


def test_beside_nccl_reference_runs_on_two_gloo_ranks(tmp_path) -> None:
    out = tmp_path / "gbn.json"
    r = torchrun(2, ["--beside-nccl", "--set", "layers=2", "--set", "hidden=64", "--iters", "3", "--warmup", "1",
                     "--out", str(out)], script=HANDWRITTEN / "tp_allreduce.py")
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(out.read_text())
    assert (d["family"], d["world_size"], d["params"]["hidden"], len(d["makespans_s"])) == (
        "graph_beside_nccl", 2, 64, 3)
