"""Write small Kineto traces shaped like torch.profiler's (schemaVersion 1, PyTorch 2.x).

Each rank runs the schedule ops ``mm0`` (a GEMM on stream 7) and ``ar0`` (an
NCCL all-reduce on stream 20) for ``iterations`` iterations; ``record_function``
ranges named after the ops appear as ``user_annotation`` (CPU) and
``gpu_user_annotation`` (GPU), as the executor's ``--profiler`` run writes them.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def kineto_doc(rank: int, world: int = 2, base_ns: int = 1_700_000_000_000_000_000, iterations: int = 2,
               t0_us: float = 1000.0, mm_us: float = 100.0, ar_us: float = 50.0) -> dict[str, Any]:
    ev: list[dict[str, Any]] = []
    corr = 100
    ext = 1
    t = t0_us
    for it in range(iterations):
        # mm0: two kernels on stream 7
        ev.append({"ph": "X", "cat": "user_annotation", "name": "mm0", "pid": 4000 + rank, "tid": 4000 + rank,
                   "ts": t - 20, "dur": 10, "args": {"External id": ext}})
        k1 = {"ph": "X", "cat": "kernel", "name": "void gemm_kernel<float, 128>(float const*, float*, int)",
              "pid": 0, "tid": 7, "ts": t, "dur": mm_us * 0.8,
              "args": {"External id": ext, "device": 0, "stream": 7, "correlation": corr, "grid": [1, 1, 1]}}
        k2 = {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>(int)",
              "pid": 0, "tid": 7, "ts": t + mm_us * 0.8, "dur": mm_us * 0.2,
              "args": {"External id": ext, "device": 0, "stream": 7, "correlation": corr + 1}}
        ev += [k1, k2]
        ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": "mm0", "pid": 0, "tid": 7, "ts": t,
                   "dur": mm_us, "args": {"External id": ext}})
        corr += 2
        ext += 1
        t += mm_us + 5
        # ar0: record_param_comms + nccl:all_reduce on CPU, NCCL kernel on stream 20
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 4000 + rank, "tid": 4000 + rank,
                   "ts": t - 30, "dur": 20, "args": {"External id": ext, "Collective name": "allreduce",
                                                     "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
                                                     "Group size": world, "dtype": "Float",
                                                     "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}})
        ev.append({"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 4000 + rank,
                   "tid": 4000 + rank, "ts": t - 25, "dur": 10, "args": {"External id": ext + 1}})
        ev.append({"ph": "X", "cat": "user_annotation", "name": "ar0", "pid": 4000 + rank, "tid": 4000 + rank,
                   "ts": t - 26, "dur": 12, "args": {"External id": ext + 2}})
        ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                   "pid": 0, "tid": 20, "ts": t, "dur": ar_us,
                   "args": {"External id": ext + 1, "device": 0, "stream": 20, "correlation": corr,
                            "Collective name": "allreduce", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
                            "Group size": world, "dtype": "Float", "Process Group Name": "0",
                            "Process Group Ranks": "[0, 1]"}})
        ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": "ar0", "pid": 0, "tid": 20, "ts": t,
                   "dur": ar_us, "args": {"External id": ext + 2}})
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
                   "ts": t + 1, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": corr + 1, "bytes": 4096}})
        corr += 2
        ext += 3
        t += ar_us + 100
    ev.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "traceEvents": ev, "traceName": f"rank{rank}.json", "displayTimeUnit": "ms", "baseTimeNanoseconds": base_ns}


def write_kineto(path: Path, doc: dict[str, Any]) -> Path:
    text = json.dumps(doc, indent=1)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path
