"""Host cost of the elementwise add a bytes-only ``compute`` op runs as, against the kinds the model had for it.

Plain PyTorch on one GPU, no schedsim. In ``--processes`` fresh processes (host speed is a property of the
process: ``executor/calibrate_host.py``) it times, as loops of 200 calls behind a ``torch.cuda._sleep`` so
that no call waits for the device (median of 5 loops), host µs per call of:

* ``matmul64``: ``torch.matmul(a, b, out=c)`` 64×64 bf16 (the profile's ``eager_per_op_us``);
* ``add4k``: ``torch.add(x, y, out=z)`` on 4 KiB uint8 (``elementwise_call_us``, what calibrate now measures);
* ``add3m``: the same on 1 MiB uint8 tensors (the size of allgather_mm bf16 chunks 16's adds: 3 MB in all);
* ``copy4k``: ``d.copy_(h, non_blocking=True)`` of 4 KiB pinned host to device (``memcpy_call_us``, which
  the model charged a bytes-only compute op until 2026-12-03);
* ``pair``: ``torch.matmul`` bf16 1024×512×8192 into its output, then ``torch.add`` of 1 MiB uint8 tensors:
  one mm/add pair of allgather_mm chunks 16, against ``matmul64`` + ``add3m``.

    python benchmarks/probes/host/elementwise_call.py [--processes 5] [--out probe.json]

On CPU it prints a note and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

N = 200


def _child() -> dict[str, float]:
    import torch

    dev = torch.device("cuda")

    def loop(fn) -> float:  # type: ignore[no-untyped-def]
        ts = []
        for _ in range(6):
            torch.cuda.synchronize()
            torch.cuda._sleep(20_000_000)
            t0 = time.perf_counter()
            for _ in range(N):
                fn()
            ts.append((time.perf_counter() - t0) / N)
            torch.cuda.synchronize()
        return round(statistics.median(ts[1:]) * 1e6, 3)

    a, b = torch.rand(64, 64, device=dev).bfloat16(), torch.rand(64, 64, device=dev).bfloat16()
    c = torch.empty(64, 64, device=dev, dtype=torch.bfloat16)
    x4, y4, z4 = (torch.ones(4096, dtype=torch.uint8, device=dev) for _ in range(3))
    x3, y3, z3 = (torch.ones(1 << 20, dtype=torch.uint8, device=dev) for _ in range(3))
    h = torch.zeros(4096, dtype=torch.uint8).pin_memory()
    d = torch.empty(4096, dtype=torch.uint8, device=dev)
    A = torch.rand(1024, 8192, device=dev).bfloat16()
    B = torch.rand(8192, 512, device=dev).bfloat16()
    C = torch.empty(1024, 512, device=dev, dtype=torch.bfloat16)

    def pair() -> None:
        torch.matmul(A, B, out=C)
        torch.add(x3, y3, out=z3)

    return {"matmul64": loop(lambda: torch.matmul(a, b, out=c)), "add4k": loop(lambda: torch.add(x4, y4, out=z4)),
            "add3m": loop(lambda: torch.add(x3, y3, out=z3)), "copy4k": loop(lambda: d.copy_(h, non_blocking=True)),
            "pair": loop(pair)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child()), flush=True)
        return 0
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError
    except ImportError:
        print("no CUDA device: nothing to probe")
        return 0
    rows = []
    for i in range(args.processes):
        out = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, timeout=120)
        if out.returncode:
            print(f"process {i + 1} failed: {out.stderr[-400:]}")
            continue
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    keys = ["matmul64", "add4k", "add3m", "copy4k", "pair"]
    print("process | " + " | ".join(keys) + " | add4k/matmul64 | add4k/copy4k | pair - matmul64 - add3m (us)")
    for i, r in enumerate(rows, 1):
        print(f"{i} | " + " | ".join(f"{r[k]:.2f}" for k in keys)
              + f" | {r['add4k'] / r['matmul64']:.2f} | {r['add4k'] / r['copy4k']:.2f}"
              + f" | {r['pair'] - r['matmul64'] - r['add3m']:+.2f}")
    if rows:
        med = {k: statistics.median(r[k] for r in rows) for k in keys}
        print("median | " + " | ".join(f"{med[k]:.2f}" for k in keys))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
