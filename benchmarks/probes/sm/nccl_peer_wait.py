"""Does an NCCL kernel hold its SMs while it waits for a slower peer? (assumption of the ``waves`` model, rule nccl-sms)

    bash benchmarks/probes/run.sh scenarios_peer_wait            # 2 GPUs, NCCL, about 1 minute

Rank 0 issues an all_reduce on stream ``cs`` and, right after it, four bf16 8192³ GEMMs on stream ``gs``; rank 1
issues the same all_reduce ``delay`` ms later (host ``time.sleep``), so rank 0's NCCL kernel is resident and
waiting for that long while rank 0's GEMMs run. Printed per delay (median of ``--reps``, rank 0, CUDA events):
the four GEMMs' time beside the waiting collective and alone, and the collective's start→end.

Reading it: if the waiting NCCL kernel holds ``nccl.sms_per_collective`` SMs (24 on 2×H200), the GEMMs run on
the other SMs for the whole delay and lose about delay × 24/132 (0.55 ms at 3 ms); if it does not hold them (what
the model assumes), the GEMMs lose nothing beyond the collective's own transfer time.
Writes ``--out`` (JSON) on rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="peer_wait.json")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--bytes", type=int, default=1 << 20)
    o = ap.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(dev)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    x = torch.ones(o.bytes // 4, device=dev)
    cs, gs = torch.cuda.Stream(), torch.cuda.Stream()
    for _ in range(3):
        dist.all_reduce(x)
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()

    def ev() -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=True)

    def gemms() -> tuple[torch.cuda.Event, torch.cuda.Event]:
        """Issue four GEMMs on ``gs`` between two timing events."""
        g0, g1 = ev(), ev()
        with torch.cuda.stream(gs):
            g0.record()
            for _ in range(4):
                torch.matmul(a, b, out=c)
            g1.record()
        return g0, g1

    alone = []
    for _ in range(o.reps):
        g0, g1 = gemms()
        torch.cuda.synchronize()
        alone.append(g0.elapsed_time(g1))
    res = {"env": {"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                   "gpu": torch.cuda.get_device_name(), "bytes": o.bytes,
                   "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())},
           "gemm4_alone_ms": statistics.median(alone), "delays": {}}
    for delay_ms in (0.0, 1.0, 3.0, 6.0):
        g_t, c_t = [], []
        for _ in range(o.reps):
            dist.barrier()
            torch.cuda.synchronize()
            if rank == 1:
                time.sleep(delay_ms / 1e3)
            c0, c1 = ev(), ev()
            with torch.cuda.stream(cs):
                c0.record()
                dist.all_reduce(x)
                c1.record()
            if rank == 0:
                g0, g1 = gemms()
            torch.cuda.synchronize()
            c_t.append(c0.elapsed_time(c1))
            if rank == 0:
                g_t.append(g0.elapsed_time(g1))
        if rank == 0:
            res["delays"][str(delay_ms)] = {"gemm4_beside_ms": statistics.median(g_t),
                                           "coll_ms": statistics.median(c_t)}
            print(f"delay {delay_ms:4.1f} ms: GEMMx4 {statistics.median(g_t):.3f} ms (alone "
                  f"{res['gemm4_alone_ms']:.3f}), all_reduce start->end {statistics.median(c_t):.3f} ms", flush=True)
    if rank == 0:
        with open(o.out, "w") as f:
            json.dump(res, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
