"""The hand-written pipeline references of benchmarks/accuracy/handwritten (issue 15 §2) issue exactly what
``schedsim execute`` issues for schedules/pipeline_schedules.yaml: per rank the same GEMMs and p2p calls in
the executor's issue order (:func:`executor.lean.issue_order`), on the same streams, with the same
batching (:func:`executor.lean.p2p_batches`), cross-stream waits (for interleaved 1F1B, whose p2p are
lone calls, Megatron-LM's ``overlap_p2p_comm`` waits), GEMM shapes and message sizes. Checked against the
lowered graph, without a GPU or a process group."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest
from exec_helpers import ROOT

from executor.lean import issue_order, p2p_batches
from schedsim.graph.build import build_graph
from schedsim.spec.loader import load_schedule

torch = pytest.importorskip("torch")
sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy" / "handwritten"))  # the scripts import their harness by name
harness = importlib.import_module("harness")
interleaved = importlib.import_module("pipeline_interleaved_1f1b")
zb_h1 = importlib.import_module("pipeline_zb_h1")

# module, chunks, batched, overlapped (Megatron's overlap_p2p_comm waits)
SCRIPTS = {"interleaved_1f1b": (interleaved, 2, False, True), "zb_h1": (zb_h1, 1, True, False)}


def lowered(schedule: str, p: int, m: int, **sizes: int) -> dict[int, list[Any]]:
    """Each rank's ops in program order, as RankRunner takes them from the graph."""
    G = build_graph(load_schedule(ROOT / "schedules" / "pipeline_schedules.yaml",
                                  {"p": p, "m": m, "schedule": schedule, **sizes}))
    ops = [G.nodes[n]["op"] for n in G.nodes]
    return {r: sorted((o for o in ops if o.rank == r), key=lambda o: o.seq) for r in range(p)}


def prog(schedule: str, r: int, p: int, m: int) -> list[tuple[str, int, int]]:
    mod, chunks, _, _ = SCRIPTS[schedule]
    return mod.program(r, p, m, chunks) if chunks > 1 else mod.program(r, p, m)


def op_names(action: tuple[str, int, int]) -> list[str]:
    """The executor's op names of one action (the YAML's stage ops are fwd, dgrad, wgrad)."""
    k, s, j = action
    return {"F": [f"F{s}.{j}.fwd"], "B": [f"B{s}.{j}.I.dgrad", f"B{s}.{j}.W.wgrad"], "I": [f"I{s}.{j}.dgrad"],
            "W": [f"W{s}.{j}.wgrad"]}.get(k, [f"{k}{s}.{j}"])


@pytest.mark.parametrize("schedule,p,m", [("interleaved_1f1b", 2, 8), ("interleaved_1f1b", 2, 2),
                                          ("interleaved_1f1b", 3, 6), ("interleaved_1f1b", 4, 8),
                                          ("zb_h1", 2, 8), ("zb_h1", 3, 3), ("zb_h1", 4, 6)])
def test_reference_program_is_the_executors_issue_order(schedule: str, p: int, m: int) -> None:
    batched, overlapped = SCRIPTS[schedule][2:]
    for r, ops in lowered(schedule, p, m).items():
        program = prog(schedule, r, p, m)
        # order: the same ops, GEMM by GEMM and call by call (96 per rank for interleaved p=2 m=8)
        assert [n for a in program for n in op_names(a)] == issue_order(ops)
        by_name = {o.name: o for o in ops}
        for a in program:
            names = op_names(a)
            first = by_name[names[0]]
            # stream: compute, or one per p2p kind and peer (pp_sendF_r1, ...)
            want = "compute" if a[0] in "FBIW" else f"pp_{a[0][:4]}{a[0][4]}_r{harness.peer(a[0], a[1], p)}"
            assert {by_name[n].stream for n in names} == {want}
            # cross-stream waits: the action's first op waits for the last op of each action waits_for names
            dep = harness.waits_for(a, program, overlapped)
            cross = [d for d in first.deps if d in by_name and by_name[d].stream != first.stream]
            assert cross == [op_names(d)[-1] for d in dep]
            assert all(d == names[i] for i, n in enumerate(names[1:]) for d in by_name[n].deps)
        # batching: zb_h1 posts every p2p as its own batch_isend_irecv, interleaved 1F1B as lone calls
        n_p2p = sum(a[0] not in "FBIW" for a in program)
        assert p2p_batches(ops) == ([[i] for i, o in enumerate(ops) if o.kind in ("send", "recv")] if batched else [])
        assert n_p2p == sum(o.kind in ("send", "recv") for o in ops) > 0


class _Work:
    def wait(self) -> None:
        pass


@pytest.mark.parametrize("schedule", ["interleaved_1f1b", "zb_h1"])
def test_issue_path_makes_the_executors_calls(schedule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Proc.pipeline's CPU issue path, its torch calls recorded: each GEMM's shapes, each p2p call with its
    peer, size and batching, in the order of the executor's ops (their m, n, k, peer, bytes, p2p_batch).
    Sizes are compared in elements: the messages are bf16 on GPUs, fp32 on CPU ranks (Proc.rand)."""
    p, m, T, H = 2, 4, 8, 16
    mod, chunks, batched, overlapped = SCRIPTS[schedule]
    log: list[tuple[Any, ...]] = []
    real_mm = torch.matmul
    monkeypatch.setattr(torch, "matmul", lambda a, b, out: (log.append(("mm", *a.shape, b.shape[1])),
                                                            real_mm(a, b, out=out))[1])

    def fake(name: str) -> Any:
        return lambda buf, peer: (log.append((name, peer, buf.numel())), _Work())[1]

    for kind, (fn, off) in list(harness.P2P.items()):
        monkeypatch.setitem(harness.P2P, kind, (fake("isend" if fn is harness.dist.isend else "irecv"), off))
    monkeypatch.setattr(harness.dist, "P2POp", lambda fn, buf, peer: (fn, buf, peer))
    monkeypatch.setattr(harness.dist, "batch_isend_irecv",
                        lambda ops: (log.append(("batch", len(ops))), [fn(b, q) for fn, b, q in ops])[1])
    for r, ops in lowered(schedule, p, m, tokens=T, hidden=H).items():
        pr = object.__new__(harness.Proc)
        pr.rank, pr.world, pr.cuda, pr.dev, pr.gen = r, p, False, torch.device("cpu"), torch.Generator()
        issue, streams = pr.pipeline(prog(schedule, r, p, m), T, H, chunks, batched=batched, overlapped=overlapped)
        log.clear()
        # gloo: each recv was waited by the compute that consumes it, each send some op depends on (Megatron's
        # overlap_p2p_comm waits) by that op; the other sends are left to the caller
        waited = {d for o in ops for d in o.deps}
        assert streams == [] and len(issue()) == sum(o.kind == "send" and o.name not in waited for o in ops)
        want: list[tuple[Any, ...]] = []
        for o in ops:
            if o.kind == "matmul":
                want.append(("mm", o.m, o.k, o.n))
                continue
            if o.p2p_batch is not None:
                want.append(("batch", 1))
            want.append(("isend" if o.kind == "send" else "irecv", o.peer, int(o.nbytes) // 2))  # bf16 elements
        assert log == want
        assert {x[2] for x in log if x[0] not in ("mm", "batch")} == {T * H}  # activation_bytes = T·H·2
        assert {x[1:] for x in log if x[0] == "mm"} == {(T, H, 4 * H // chunks), (T, 4 * H // chunks, H),
                                                        (H, T, 4 * H // chunks)}  # half the columns at 2 chunks
