"""Process setup and timing shared by the hand-written PyTorch references (issue 15 §2).

Each reference in this folder is a short plain-PyTorch script that runs one shipped schedule
family with the same shapes, streams, dtypes and collectives as ``schedsim execute`` runs it (gemm_chain,
small_ops, tp_allreduce and tp_ffn also give every op operands of its own, as the executor materialises them;
allgather_mm's GEMMs read the gathered buffer, far larger than L2) (the executor's kernels, see
``executor/kernels.py``: a ``compute`` op with ``bytes`` is an
elementwise add moving that many bytes, two tensors of N/3 read and one written; matmuls are
``torch.matmul(a, b, out=c)``; collectives use ``async_op=False`` on the current stream). The
interleaved 1F1B and ZB-H1 references write each rank's pipeline program as a list of actions and
issue it with :meth:`Proc.pipeline` (one compute stream, one stream per p2p kind, an event only where
another stream waits), as torch pipelining's runtime walks its action lists.

Timing is the executor's uninstrumented method, with the executor's own code for the start
(:class:`executor.clock.IterationClock`, the one timing object shared with ``executor/runtime.py``;
the program itself is plain PyTorch and imports nothing else from the repository): per iteration a
device synchronize, an all-gather of the ranks' wall clocks on a gloo group and a spin to the
common start (so every rank begins at one instant), an anchor event recorded on a spare stream and
synchronised, the wall clock read, every stream made to wait for the anchor, the iteration issued,
one end event recorded per stream; ``end`` = latest end − anchor. The per-rank ``[anchor_ns,
end_s]`` pairs go through :func:`executor.timing.lean_makespans`, the very function that computes
``makespan_uninstrumented_s``; the median of ``--iters`` iterations after ``--warmup`` is kept. Per timed
iteration the issuing thread's scheduling counters go to ``host_thread`` (per rank,
:data:`executor.clock.HOST_FIELDS` as columns), as the executor's ``meta.host_thread_uninstrumented``, and each
thread's run time over the timed iterations (and the last warm-up one: :func:`executor.clock.threads_snapshot_at`)
to ``threads`` (``meta.threads_uninstrumented``); ``gc_collections``
counts the collector's runs by generation over them (the executor times with it disabled,
``schedsim._gc.frozen_gc``; the launches of these scripts leave no tracked object behind, so none is expected).
With ``SCHEDSIM_PIN_ISSUER=1`` the timed iterations run with the issuing thread alone on one of the pinned CPUs
(:func:`executor.dist.issuer_alone`, as ``execute`` runs its timed ones). On CPU ranks (gloo, for smoke tests)
the anchor is the wall clock and ``end`` the host time
until the iteration's work has completed.

Run under torchrun; rank 0 writes ``--out`` (JSON): family, parameters, per-iteration makespans
and their median, device, world size.

Run itself (``torchrun ... harness.py ab SCHEDULE REF.py ...``), it times ``schedsim execute``'s uninstrumented loop
and one reference's in one process, in alternating blocks (:data:`AB_DOC`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import runpy
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root, for executor.timing

from executor.clock import IterationClock, host_columns, thread_run_times, threads_between, threads_snapshot_at
from executor.dist import cuda_pci_bus_id, issuer_alone, pin_process
from executor.timing import lean_makespans
from schedsim.io import atomic_write_text

DT = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--out", required=True, help="JSON written by rank 0")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--set", action="append", default=[], help="NAME=VALUE (the schedule's parameters)")
    return p


def params(args: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """The family's defaults (the shipped YAML's ``params``) overridden by ``--set NAME=VALUE``."""
    out = dict(defaults)
    for s in args.set:
        k, v = s.split("=", 1)
        out[k] = type(defaults[k])(v) if k in defaults and not isinstance(defaults[k], str) else v
    return out


def stage_gemms(tokens: int, hidden: int, chunks: int = 1) -> dict[str, tuple[int, int, int]]:
    """``(m, n, k)`` of the F, I and W GEMMs of one stage chunk of schedules/pipeline_schedules.yaml:
    F tokens×hidden @ hidden×f, I tokens×f @ f×hidden, W hidden×tokens @ tokens×f, f = 4·hidden/chunks."""
    f = 4 * hidden // chunks
    return {"F": (tokens, f, hidden), "I": (tokens, hidden, f), "W": (hidden, f, tokens)}


#: Pipeline programs (:meth:`Proc.pipeline`) are lists of actions ``(kind, stage, microbatch)`` in issue
#: order, stages numbered over the whole pipeline and placed round-robin (stage s on rank s mod p);
#: kind is F, B (= I then W), I, W, or a p2p kind: its torch call and the stage, relative to ``stage``,
#: of the peer (sendF passes stage s's output on to stage s+1, recvF takes stage s's input from s−1, ...).
P2P = {"sendF": (dist.isend, +1), "recvF": (dist.irecv, -1), "sendB": (dist.isend, -1), "recvB": (dist.irecv, +1)}


def peer(kind: str, stage: int, p: int) -> int:
    """The rank a p2p action of ``stage`` talks to (round-robin placement over ``p`` ranks)."""
    return (stage + P2P[kind][1]) % p


def waits_for(action: tuple[str, int, int], program: list[tuple[str, int, int]],
              overlapped: bool = False) -> list[tuple[str, int, int]]:
    """The actions of ``program`` on other streams that ``action`` waits for, in the lowered ops' order: a
    compute its input's recv (F the recvF, I or B the recvB of its stage and microbatch) when this rank
    receives it, a send the compute that produced what it sends (sendF its F; sendB its B, or its I when
    the backward is split). These are the cross-stream dependencies of the lowered ops
    (schedsim/spec/pipeline_block.py).

    With ``overlapped`` (Megatron-LM's interleaved 1F1B with ``overlap_p2p_comm``, lowered by
    ``schedsim/lower/pipeline_emitter.py`` ``_Emitter.megatron_overlap``), also: a recv waits for the compute
    issued before it (recvF the last F, recvB the last F or B: torch ``ProcessGroupNCCL`` makes the NCCL
    stream wait for the current stream at each call), and an F (a B) waits, after its own input's recv, for
    every other p2p of its direction (sendF/recvF; sendB/recvB) issued since the rank's previous F (B): the
    ``req.wait()`` on ``fwd_wait_handles`` / ``bwd_wait_handles`` before each pass (NVIDIA/Megatron-LM
    core_v0.9.0, 1afee592, ``megatron/core/pipeline_parallel/schedules.py``
    ``forward_backward_pipelining_with_interleaving``; the cool-down's blocking calls wait the same ops)."""
    kind, s, j = action
    dep = {"F": [("recvF", s, j)], "B": [("recvB", s, j)], "I": [("recvB", s, j)], "sendF": [("F", s, j)],
           "sendB": [("B", s, j), ("I", s, j)]}.get(kind, [])
    own = [d for d in dep if d in program][:1]
    if not overlapped or kind not in ("F", "B", "recvF", "recvB"):
        return own
    at = program.index(action)
    if kind.startswith("recv"):  # the last forward (recvF) or the last compute (recvB) issued before it
        prev = next((a for a in reversed(program[:at]) if a[0] in ("F" if kind == "recvF" else "FB")), None)
        return [] if prev is None else [prev]
    d = "F" if kind == "F" else "B"
    start = next((i + 1 for i in range(at - 1, -1, -1) if program[i][0] == kind), 0)
    held = [a for a in program[start:at] if a[0] in (f"send{d}", f"recv{d}")]
    return own + [a for a in held if a not in own]


class Proc:
    """torch.distributed set up the way the executor does it (NCCL with eager init, plus a gloo group); in a process
    whose group is already up (``harness.py ab``, below: the executor's, made the same way) it joins
    that one."""

    def __init__(self) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.cuda = torch.cuda.is_available()
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if self.cuda:
            torch.cuda.set_device(local)
            self.dev = torch.device("cuda", local)
            self.cpus = pin_process(local, cuda_pci_bus_id(torch, local))  # SCHEDSIM_PIN_CPUS, as the executor
            if not dist.is_initialized():
                dist.init_process_group("nccl", device_id=self.dev, timeout=datetime.timedelta(seconds=300))
            self.ctrl = dist.new_group(backend="gloo") if self.world > 1 else None
        else:
            self.dev = torch.device("cpu")
            self.cpus = None
            if not dist.is_initialized():
                dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
            self.ctrl = None
        self.gen = torch.Generator().manual_seed(self.rank)

    def rand(self, *shape: int, dtype: Any = torch.float32) -> Any:
        if not self.cuda and dtype in (torch.float16, torch.bfloat16):
            dtype = torch.float32
        return torch.rand(shape, generator=self.gen).to(dtype).to(self.dev)

    def empty(self, *shape: int, dtype: Any = torch.float32) -> Any:
        if not self.cuda and dtype in (torch.float16, torch.bfloat16):
            dtype = torch.float32
        return torch.empty(shape, dtype=dtype, device=self.dev)

    def copy_op(self, nbytes: float) -> Callable[[], Any]:
        """The executor's ``compute`` op with ``bytes``: ``torch.add(a, b, out=c)`` on three uint8 tensors of
        N/3 (an elementwise kernel, as the executor runs it)."""
        third = max(1, int(nbytes // 3))
        a = torch.randint(0, 4, (third,), dtype=torch.uint8, generator=self.gen).to(self.dev)
        b = torch.randint(0, 4, (third,), dtype=torch.uint8, generator=self.gen).to(self.dev)
        c = torch.empty(third, dtype=torch.uint8, device=self.dev)
        return lambda: torch.add(a, b, out=c)

    def pipeline_stage(self, tokens: int, hidden: int, chunks: int = 1) -> tuple[Callable[[], Any], Callable[[], Any],
                                                                                 Callable[[], Any], int]:
        """The stage work of schedules/pipeline_schedules.yaml (one model chunk), as the executor materialises
        it: ``(forward, backward_input, backward_weight, activation elements)``; each of the three is one bf16
        ``torch.matmul(out=)`` of :func:`stage_gemms`'s shape (tokens×hidden @ hidden×f; tokens×f @ f×hidden;
        hidden×tokens @ tokens×f, f = 4·hidden/chunks: with 2 model chunks per rank a chunk does half the
        work), and a p2p message holds tokens·hidden bf16 elements (``activation_bytes`` = tokens·hidden·2)."""
        T, H, bf = tokens, hidden, torch.bfloat16
        f = stage_gemms(T, H, chunks)["F"][1]
        x, w_f, out_f = self.rand(T, H, dtype=bf), self.rand(H, f, dtype=bf), self.empty(T, f, dtype=bf)
        g, w_i, out_i = self.rand(T, f, dtype=bf), self.rand(f, H, dtype=bf), self.empty(T, H, dtype=bf)
        xt, out_w = self.rand(H, T, dtype=bf), self.empty(H, f, dtype=bf)
        return (lambda: torch.matmul(x, w_f, out=out_f), lambda: torch.matmul(g, w_i, out=out_i),
                lambda: torch.matmul(xt, g, out=out_w), T * H)

    def pipeline(self, program: list[tuple[str, int, int]], tokens: int, hidden: int, chunks: int = 1,
                 batched: bool = False, overlapped: bool = False) -> tuple[Callable[[], Any], list[Any]]:
        """``(issue, streams)`` for :meth:`time`: one iteration of a rank's pipeline ``program`` (its actions
        in issue order, see :data:`P2P`), issued the way ``schedsim execute`` issues the lowered ops.

        F, B (= I then W), I and W run their GEMMs (:meth:`pipeline_stage`) on one compute stream. Each p2p
        kind (sendF, recvF, sendB, recvB) has a stream of its own, on which the call is a lone
        ``dist.isend``/``dist.irecv`` or, with ``batched``, a one-op ``batch_isend_irecv`` (torch's
        ``_batch_p2p``), then ``work.wait()``: the stream waits for NCCL, the host goes on. A stream waits
        (one event each) only for the actions :func:`waits_for` names (with ``overlapped``: Megatron's
        ``overlap_p2p_comm`` waits), and only when it changes does the host switch the current stream. On CPU
        ranks (gloo) p2p are asynchronous, an action waits on the host for the p2p it depends on, and
        ``issue`` returns the works left to wait for.
        """
        fwd, dgrad, wgrad, act = self.pipeline_stage(tokens, hidden, chunks)
        gemms = {"F": fwd, "B": lambda: (dgrad(), wgrad()), "I": dgrad, "W": wgrad}
        kinds = sorted({a[0] for a in program if a[0] in P2P})
        bufs = {k: (self.rand if k.startswith("send") else self.empty)(act, dtype=torch.bfloat16) for k in kinds}
        streams = {k: self.stream() for k in ["compute", *kinds]}
        deps = [waits_for(a, program, overlapped) for a in program]
        events = {d: torch.cuda.Event() for ds in deps for d in ds} if self.cuda else {}

        def p2p(kind: str, stage: int) -> Callable[[], list[Any]]:
            fn, buf, dst = P2P[kind][0], bufs[kind], peer(kind, stage, self.world)
            if batched:
                return lambda: dist.batch_isend_irecv([dist.P2POp(fn, buf, dst)])
            return lambda: [fn(buf, dst)]

        # per action: (stream, the actions it waits for, its event, launch, whether the launch returns works)
        calls = [(streams[a[0]], d, events.get(a), p2p(a[0], a[1]), True) if a[0] in P2P else
                 (streams["compute"], d, events.get(a), gemms[a[0]], False) for a, d in zip(program, deps, strict=True)]

        def issue_cuda() -> None:
            cur = None
            for st, dep, ev, launch, comm in calls:
                if st is not cur:
                    torch.cuda.set_stream(st)
                    cur = st
                for d in dep:
                    st.wait_event(events[d])
                if comm:
                    for w in launch():
                        w.wait()  # the current stream waits for NCCL; the host goes on
                else:
                    launch()
                if ev is not None:
                    ev.record(st)

        def issue_cpu() -> list[Any]:
            works: dict[Any, list[Any]] = {}
            for a, (_st, dep, _ev, launch, comm) in zip(program, calls, strict=True):
                for w in (w for d in dep for w in works.pop(d, [])):
                    w.wait()
                if comm:
                    works[a] = launch()
                else:
                    launch()
            return [w for ws in works.values() for w in ws]

        return (issue_cuda if self.cuda else issue_cpu), (list(streams.values()) if self.cuda else [])

    def stream(self) -> Any:
        return torch.cuda.Stream(device=self.dev) if self.cuda else None

    def barrier(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.dev)
        if self.world > 1:
            dist.barrier(group=self.ctrl)

    def time(self, issue: Callable[[], Any], streams: list[Any], iters: int, warmup: int) -> list[list[float]]:
        """``[anchor_ns, end_s]`` of each timed iteration (the module docstring's method).

        ``issue()`` enqueues one iteration (CUDA) or runs it and returns the works to wait for (CPU).
        """
        out = []
        self.host_rows: list[list[Any]] = []
        clock = IterationClock(self.dev, self.world, self.ctrl)
        if self.cuda:
            ends = [torch.cuda.Event(enable_timing=True) for _ in streams]
            default = torch.cuda.default_stream(self.dev)
        threads0: dict[int, Any] = {}
        gc0 = [0, 0, 0]
        snap = threads_snapshot_at(warmup)
        with contextlib.ExitStack() as timed:
            for k in range(warmup + iters):
                if k == snap:  # every thread's run time over the timed iterations and the last warm-up, as execute
                    threads0 = thread_run_times()
                if k == warmup:
                    clock.late_starts = 0  # count the timed iterations only
                    # SCHEDSIM_PIN_ISSUER=1: from here this thread on a CPU of its own (the threads the warm-up
                    # started on the others), as execute's timed iterations
                    timed.enter_context(issuer_alone())
                    gc0 = [g["collections"] for g in gc.get_stats()]
                anchor = clock.start(streams)
                if self.cuda:
                    issue()
                    for s, e in zip(streams, ends):  # each stream's end event, then the default stream: as execute's
                        e.record(s)  # step list (executor.lean.compile_cuda), the stream reset outside the window
                    torch.cuda.set_stream(default)
                    for e in ends:
                        e.synchronize()
                    end = max(clock.elapsed_s(e) for e in ends)
                else:
                    t0 = time.perf_counter_ns()
                    for w in issue() or []:
                        w.wait()
                    end = (time.perf_counter_ns() - t0) * 1e-9
                if k >= warmup:
                    out.append([anchor, end])
                    self.host_rows.append(clock.host_row())  # the issuing thread over the iteration, as execute
        self.late_starts = clock.late_starts
        self.threads = threads_between(threads0, thread_run_times(), threading.get_native_id())
        self.gc_collections = [g["collections"] - c for g, c in zip(gc.get_stats(), gc0, strict=True)]
        return out

    def report(self, family: str, prm: dict[str, Any], lean: list[list[float]], out: str, **extra: Any) -> None:
        """Gather every rank's iterations, compute the makespans, write the JSON on rank 0 and leave."""
        allr: list[Any] = [None] * self.world
        mine = (lean, getattr(self, "late_starts", 0), host_columns(getattr(self, "host_rows", [])),
                getattr(self, "threads", []), getattr(self, "gc_collections", None))
        if self.world > 1:
            dist.all_gather_object(allr, mine, group=self.ctrl)
        else:
            allr = [mine]
        if self.rank == 0:
            ms = lean_makespans([r[0] for r in allr])
            res = {"family": family, "params": prm, "world_size": self.world,
                   "device": torch.cuda.get_device_name(self.dev) if self.cuda else "CPU (gloo)",
                   "torch": torch.__version__, "makespans_s": ms, "makespan_median_s": statistics.median(ms),
                   "method": "executor.clock.IterationClock (synchronize, clock all-gather, aligned start, "
                             "anchor event), one end event per stream, executor.timing.lean_makespans",
                   "late_starts": sum(r[1] for r in allr), "pinned_cpus": self.cpus,
                   "host_thread": [r[2] for r in allr], "threads": [r[3] for r in allr],
                   "gc_collections": [r[4] for r in allr], **extra}
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out, json.dumps(res, indent=1))  # a temporary of its own (not OUT.tmp: the user's)
            print(f"{family} {prm}: median {res['makespan_median_s'] * 1e3:.4f} ms over {len(ms)} iterations",
                  flush=True)
        self.barrier()
        # CUDA graphs holding captured NCCL work can hang destroy_process_group (issue 15): leave at once
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


# -- the executor against a reference in one process (``harness.py ab``) ------------------------------------

AB_DOC = """Executor against hand-written PyTorch in one process: both loops timed alternately by one clock (issue 39).

    torchrun --standalone --nproc-per-node 1 benchmarks/accuracy/handwritten/harness.py ab SCHEDULE REF.py
        [--set NAME=VALUE ...] [--ref-arg ARG ...] [--eager | --cuda-graph] [--blocks 6] [--iters 20] [--warmup 5]
        --out ab.json

Why one process. The suite compares ``schedsim execute`` with its hand-written twin
(``benchmarks/accuracy/handwritten/``) across processes; on some H100 machines a host-bound process ran
in a fast or a slow mode, 1.5-2x apart and fixed for the process's life, in both programs alike (docs/validation.md,
"the host-bound process spread"), so two processes' medians differ by the draw before they differ by the program.
Here one process holds both programs and times them in alternating blocks (executor first in even blocks, the
reference first in odd ones), so that both see the same host mode, and the ratio is that of the code paths.

What each side runs, unchanged:

* the executor: the schedule's :class:`executor.runtime.RankRunner` (``setup_dist``, the materialised ops, the
  warm-up iterations and ``_prepare`` as ``execute`` runs them), then per block ``--warmup`` untimed and ``--iters``
  timed iterations of its uninstrumented loop (``RankRunner._lean``: the compiled step list, :mod:`executor.lean`)
  inside ``frozen_gc`` and ``issuer_alone``, as ``execute``'s timed phase;
* the reference: the script REF.py of ``benchmarks/accuracy/handwritten`` run as ``__main__`` with the same
  ``--set`` values and the ``--ref-arg`` ones (as ``one_gpu_suite.sh`` passes them), up to its call of
  ``Proc.time(issue, streams, ...)``: that call hands over its iteration, and per block the harness's own
  ``Proc.time`` times it (``--warmup`` untimed, ``--iters`` timed iterations). The process group is the
  executor's (``Proc`` joins it).

Both time with :class:`executor.clock.IterationClock`; a block's makespans come from
:func:`executor.timing.lean_makespans` over the ranks' ``[anchor_ns, end_s]`` pairs. Rank 0 writes ``--out``
(JSON: per block and side the median makespan, s; per side the median of its block medians; ``executor_vs_ref``,
executor / reference − 1 of those; ``pairs``: the same per block) and prints one line. On CPU ranks (gloo) it runs
for tests only: there the references make fp16/bf16 tensors fp32 (:meth:`Proc.rand`) and the executor keeps the
dtype, so a 16-bit case's CPU ratio compares different work.
"""


HANDWRITTEN = Path(__file__).resolve().parent


class _Handed(Exception):
    """Raised by the reference's ``Proc.time`` in place of timing: carries the iteration it was given."""

    def __init__(self, proc: Any, issue: Any, streams: list[Any]) -> None:
        super().__init__("reference iteration handed over")
        self.proc, self.issue, self.streams = proc, issue, streams


def reference_iteration(script: Path, argv: list[str]) -> tuple[Any, Any, list[Any], Any]:
    """Run ``script`` (a ``benchmarks/accuracy/handwritten`` reference) as ``__main__`` with ``argv`` up to its
    ``Proc.time`` call: ``(proc, issue, streams, time)``, ``time`` the harness's own method, bound to ``proc``
    (``time(issue, streams, iters, warmup)`` -> ``[[anchor_ns, end_s], ...]``).

    Raises
    ------
    RuntimeError
        The script ended without calling ``Proc.time``.
    """
    if str(HANDWRITTEN) not in sys.path:
        sys.path.insert(0, str(HANDWRITTEN))
    import harness

    timed = harness.Proc.time

    def hand_over(self: Any, issue: Any, streams: list[Any], iters: int, warmup: int) -> Any:
        raise _Handed(self, issue, streams)

    argv0 = sys.argv
    harness.Proc.time = hand_over  # type: ignore[method-assign]
    sys.argv = [str(script), *argv]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except _Handed as h:
        return h.proc, h.issue, h.streams, timed.__get__(h.proc)
    finally:
        harness.Proc.time = timed  # type: ignore[method-assign]
        sys.argv = argv0
    raise RuntimeError(f"{script} ended without timing an iteration (no Proc.time call)")


def executor_block(runner: Any, iters: int, warmup: int) -> list[list[float]]:
    """``[[anchor_ns, end_s], ...]`` of ``iters`` uninstrumented iterations of ``runner`` after ``warmup`` untimed
    ones, under the collector and pinning of ``execute``'s timed phase (:meth:`executor.runtime.RankRunner.run`)."""
    from executor.dist import issuer_alone
    from schedsim._gc import frozen_gc

    out: list[list[float]] = []
    with frozen_gc(), issuer_alone():
        for k in range(warmup + iters):
            runner.iteration += 1
            got = runner._lean()
            if k >= warmup:
                out.append(list(got))
    return out


def summarize(blocks: list[dict[str, list[float]]]) -> dict[str, Any]:
    """Per side the median of its blocks' medians (s), ``executor_vs_ref`` (executor / reference − 1 of those) and
    ``pairs``, the same ratio per block, from ``[{"executor": makespans_s, "reference": makespans_s}, ...]``.

    >>> r = summarize([{"executor": [1.0, 1.2, 1.1], "reference": [1.0]}, {"executor": [1.3], "reference": [1.2]}])
    >>> round(r["executor_s"], 6), r["reference_s"], round(r["executor_vs_ref"], 4), [round(p, 4) for p in r["pairs"]]
    (1.2, 1.1, 0.0909, [0.1, 0.0833])
    """
    med = {side: [statistics.median(b[side]) for b in blocks] for side in ("executor", "reference")}
    ex, ref = statistics.median(med["executor"]), statistics.median(med["reference"])
    return {"executor_s": ex, "reference_s": ref, "executor_vs_ref": ex / ref - 1,
            "pairs": [e / r - 1 for e, r in zip(med["executor"], med["reference"], strict=True)],
            "block_medians_s": med}


def ab_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="harness.py ab", description=AB_DOC.split("\n\n")[0])
    p.add_argument("schedule", type=Path)
    p.add_argument("reference", help="a script of benchmarks/accuracy/handwritten (its file name or a path)")
    p.add_argument("--set", action="append", default=[], help="NAME=VALUE, for the schedule and the reference")
    p.add_argument("--ref-arg", action="append", default=[], help="one more argument for the reference (--graph)")
    launch = p.add_mutually_exclusive_group()
    launch.add_argument("--eager", action="store_true")
    launch.add_argument("--cuda-graph", action="store_true")
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    if a.blocks < 1 or a.iters < 1 or a.warmup < 0:
        p.error("--blocks and --iters need at least 1, --warmup at least 0")

    from executor.dist import setup_dist
    from executor.execute import _groups_in_order
    from executor.runtime import RankRunner, RunOptions
    from schedsim.graph.build import build_graph
    from schedsim.spec.loader import load_schedule
    from schedsim.spec.overrides import parse_overrides

    spec = load_schedule(a.schedule, parse_overrides(a.set))
    G = build_graph(spec)
    opts = RunOptions(iters=a.iters, warmup=a.warmup, timeout_s=120.0)
    opts.cuda_graph = a.cuda_graph or (spec.launch == "cuda_graph" and not a.eager)
    ctx = setup_dist("auto", "auto", opts.timeout_s, _groups_in_order(G))
    if opts.cuda_graph and not ctx.cuda:
        if ctx.rank == 0:
            print(f"error: {a.schedule}: launch cuda_graph needs CUDA (CPU ranks have no CUDA graphs)\n"
                  "  fix: pass --eager on CPU", file=sys.stderr, flush=True)
        sys.exit(2)
    runner = RankRunner(G, ctx, opts)
    for k in range(opts.warmup):  # execute's warm-up, then its captures (RankRunner.run)
        runner.iteration = -opts.warmup + k
        runner._one(record=False)
    runner._prepare()

    script = Path(a.reference) if Path(a.reference).is_file() else HANDWRITTEN / a.reference
    ref_argv = [*(x for s in a.set for x in ("--set", s)), *a.ref_arg, "--out", os.devnull]
    _proc, issue, streams, ref_time = reference_iteration(script, ref_argv)

    def makespans(pairs: list[list[float]]) -> list[float]:
        if ctx.world <= 1:
            return lean_makespans([pairs])
        allr: list[Any] = [None] * ctx.world
        dist.all_gather_object(allr, pairs, group=ctx.ctrl)
        return lean_makespans(allr)

    blocks: list[dict[str, list[float]]] = []
    for b in range(a.blocks):
        got: dict[str, list[float]] = {}
        for side in (("executor", "reference") if b % 2 == 0 else ("reference", "executor")):
            pairs = (executor_block(runner, a.iters, a.warmup) if side == "executor"
                     else ref_time(issue, streams, a.iters, a.warmup))
            got[side] = makespans(pairs)
        blocks.append(got)
    if ctx.rank == 0:
        res = {"schedule": str(a.schedule), "reference": script.name, "set": a.set, "ref_args": a.ref_arg,
               "launch": "cuda_graph" if opts.cuda_graph else "eager", "world_size": ctx.world,
               "device": str(ctx.device), "blocks": blocks, "iters": a.iters, "warmup": a.warmup,
               **summarize(blocks)}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(a.out, json.dumps(res, indent=1))
        pr = res["pairs"]
        print(f"{spec.name} {' '.join(a.set)}: executor {res['executor_s'] * 1e3:.4f} ms, hand-written "
              f"{res['reference_s'] * 1e3:.4f} ms, executor vs hand-written {res['executor_vs_ref'] * 100:+.2f} % "
              f"(blocks {min(pr) * 100:+.2f} .. {max(pr) * 100:+.2f} %)", flush=True)
    runner.close()
    ctx.barrier()
    # CUDA graphs holding captured NCCL work can hang destroy_process_group (issue 15), as the references: leave
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:2] != ["ab"]:
        sys.exit("usage: harness.py ab SCHEDULE REF.py [options] (the references import this module; run alone it "
                 "only times the executor against one: see AB_DOC)")
    ab_main(sys.argv[2:])
