"""Which host-cost loop predicts a host-bound layer of matmul + all_reduce? (issue 8, held-out tp_allreduce.)

In one process (``torchrun --nproc-per-node N``, NCCL on CUDA, gloo on CPU) this prints one JSON line on rank 0:

* ``hand``: the tp_allreduce_graph layer written by hand (``x[1, k] @ W[k, n]`` fp32, then ``all_reduce`` of the
  ``[1, n]`` output on the current stream), ``--layers`` of them issued from an idle GPU (synchronize + barrier
  first, as the executor's aligned start leaves it), median of ``--reps``: ``host_us_per_layer`` (host loop time
  / layers) and ``total_us_per_layer`` (to the synchronize).
* ``hand_mm_only``: the same loop without the all_reduce.
* ``lean_keywords`` and ``lean_script_call``: the same layer from a step list, as ``execute``'s lean loop issues it
  (``partial(torch.matmul, x, w, out=y)``, then the all_reduce bound as ``partial(dist.all_reduce, y, group=None,
  async_op=False)``, the executor's former binding, or by :func:`executor.kernels.script_call`, its
  binding since: ``partial(dist.all_reduce, y)``, the call ``hand`` makes). The ways alternate, round by round.
* ``probe``: :func:`executor.calibrate_host.comm_host_costs` and :func:`executor.calibrate_host.host_costs` in the
  same process (busy-GPU loops of calls).

A layer's all_reduce share is ``hand.total_us_per_layer − hand_mm_only.total_us_per_layer``; calibrate's
``eager_per_collective_us`` (the loop of back-to-back calls, ``collective_loop_us``) estimates it, and the loop
alternating the call with a 64×64 matmul (``mixed_pair_us − matmul_loop_us``), its former source, is
printed for comparison. Results: [evidence: collective-host].

Usage: torchrun --standalone --nproc-per-node 1 benchmarks/probes/host/collective_call.py [--layers 64 --reps 20]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n-total", type=int, default=2048)
    a = ap.parse_args()
    import torch
    import torch.distributed as dist

    from executor.calibrate_bench import _Bench
    from executor.calibrate_host import comm_host_costs, host_costs
    from executor.dist import env_world, setup_dist
    from executor.kernels import script_call

    cuda = torch.cuda.is_available()
    world = env_world()[1]
    ctx = setup_dist("auto" if cuda else "gloo", "cuda" if cuda else "cpu", 60.0, [tuple(range(world))])
    b = _Bench(ctx, 1)
    dev = ctx.device
    n = a.n_total // ctx.world
    x = torch.rand(1, a.k, device=dev)
    ws = [torch.rand(a.k, n, device=dev) for _ in range(a.layers)]
    outs = [torch.empty(1, n, device=dev) for _ in range(a.layers)]

    def hand(with_ar: bool) -> None:
        for i in range(a.layers):
            torch.matmul(x, ws[i], out=outs[i])
            if with_ar:
                dist.all_reduce(outs[i])

    def lean(bind: Any) -> Any:
        steps = [f for i in range(a.layers) for f in (functools.partial(torch.matmul, x, ws[i], out=outs[i]),
                                                       bind(outs[i]))]

        def run() -> None:
            for f in steps:
                f()
        return run

    ways = {"hand": lambda: hand(True), "hand_mm_only": lambda: hand(False),
            "lean_keywords": lean(lambda t: functools.partial(dist.all_reduce, t, group=None, async_op=False)),
            "lean_script_call": lean(lambda t: script_call(dist.all_reduce, (t,), {"group": None, "async_op": False}))}

    def loop(issue: Any) -> tuple[float, float]:
        b.sync()
        ctx.barrier()
        b.sync()
        t0 = time.perf_counter()
        issue()
        t1 = time.perf_counter()
        b.sync()
        t2 = time.perf_counter()
        return (t1 - t0) / a.layers * 1e6, (t2 - t0) / a.layers * 1e6

    res: dict[str, object] = {"world": ctx.world, "layers": a.layers, "cuda": cuda}
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in ways}
    for rep in range(a.reps + 3):
        for key in ways:
            got = loop(ways[key])
            if rep >= 3:
                runs[key].append(got)
    for key, rs in runs.items():
        res[key] = {"host_us_per_layer": statistics.median(r[0] for r in rs),
                    "total_us_per_layer": statistics.median(r[1] for r in rs),
                    "total_us_per_layer_runs": [round(r[1], 2) for r in rs]}
    probe = host_costs(b, lambda _m: None) if ctx.rank == 0 else {}
    ctx.barrier()
    probe.update(comm_host_costs(b))
    res["probe"] = {k: round(v, 2) for k, v in probe.items()}
    if ctx.rank == 0:
        print("PROBE " + json.dumps(res), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
