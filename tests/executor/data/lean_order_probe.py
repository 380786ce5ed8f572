"""Run under ``torchrun --nproc-per-node 2`` (gloo): record the ops each loop issues and write them as JSON.

For the test that the lean (uninstrumented, compiled) loop issues exactly the ops of the instrumented
loop, in the same order. The schedule mixes a collective, unbatched p2p and a ``p2p: batched`` 1F1B
pipeline, so batches, lone sends and cross-stream waits all occur. argv: output folder.
"""

import json
import sys
from pathlib import Path

from executor.dist import setup_dist
from executor.runtime import RankRunner, RunOptions
from schedsim.graph.build import build_graph
from schedsim.spec.loader import load_text

TEXT = """
schema_version: 1
name: lean_order
world_size: 2
pipeline:
  schedule: 1f1b
  p: 2
  m: 3
  p2p: batched
  activation_bytes: 1024
  stage:
    forward: [{name: f, kind: compute, bytes: 4096}]
    backward_input: [{name: i, kind: compute, bytes: 4096}]
    backward_weight: [{name: w, kind: compute, bytes: 4096}]
ops:
  - {name: ar, kind: all_reduce, bytes: 4096, stream: comm, ranks: [0, 1], group: [0, 1]}
  - {name: mm, kind: matmul, m: 8, n: 8, k: 8, stream: side, deps: [ar]}
  - {name: s, kind: send, peer: 1, bytes: 2048, stream: p, ranks: [0], deps: [mm]}
  - {name: r, kind: recv, peer: 0, bytes: 2048, stream: p, ranks: [1], deps: [mm]}
"""


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    G = build_graph(load_text(TEXT, "<lean order>"))
    ctx = setup_dist("gloo", "cpu", 30.0, [(0, 1)])
    runner = RankRunner(G, ctx, RunOptions(iters=1, warmup=0, lean_iters=1, timeout_s=30.0))
    issued: list[str] = []

    def wrap(name: str, fn):  # type: ignore[no-untyped-def]
        def rec():  # type: ignore[no-untyped-def]
            issued.append(name)
            return fn()
        return rec

    for impl in runner.impls:
        impl.run = wrap(impl.op.name, impl.run)
        if impl.fast is not None:
            impl.fast = wrap(impl.op.name, impl.fast)
    runner._iter_cpu(record=True)
    instrumented = list(issued)
    issued.clear()
    runner._iter_cpu_lean()
    lean = list(issued)
    res = {"rank": ctx.rank, "instrumented": instrumented, "lean": lean, "program": [o.name for o in runner.ops],
           "batches": [[runner.ops[i].name for i in b] for b in runner.batches]}
    (out / f"order_rank{ctx.rank}.json").write_text(json.dumps(res))
    runner.close()
    ctx.barrier()
    ctx.close()


if __name__ == "__main__":
    main()
