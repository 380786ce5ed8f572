"""Executor against hand-written PyTorch in one process: both loops timed alternately by the same clock (issue 39).

    torchrun --standalone --nproc-per-node 1 benchmarks/accuracy/executor_ab.py SCHEDULE REF.py [--set NAME=VALUE ...]
        [--ref-arg ARG ...] [--eager | --cuda-graph] [--blocks 6] [--iters 20] [--warmup 5] --out ab.json

Why one process. The suite compares ``schedsim execute`` with its hand-written twin
(``benchmarks/accuracy/handwritten/``) across processes; on the H100 machines of 2026-12-07 a host-bound process ran
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
  executor's (``Proc`` joins it: ``harness.Proc``).

Both time with :class:`executor.clock.IterationClock`; a block's makespans come from
:func:`executor.timing.lean_makespans` over the ranks' ``[anchor_ns, end_s]`` pairs. Rank 0 writes ``--out``
(JSON: per block and side the median makespan, s; per side the median of its block medians; ``executor_vs_ref``,
executor / reference − 1 of those; ``pairs``: the same per block) and prints one line.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HANDWRITTEN = ROOT / "benchmarks" / "accuracy" / "handwritten"


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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    from executor.timing import lean_makespans
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

    import torch.distributed as dist

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
        tmp = a.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(res, indent=1))
        os.replace(tmp, a.out)
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
    main()
