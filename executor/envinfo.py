"""The run's environment for ``env.json``: GPU, driver, torch, CUDA, NCCL and relevant variables."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

__all__ = ["rank_env", "global_env", "ENV_PREFIXES"]

#: Environment variables recorded (prefix match).
ENV_PREFIXES = ("SCHEDSIM_",
                "NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED", "TORCH_SYMM_MEM", "CUDA_", "NVSHMEM_", "OMP_NUM_THREADS",
                "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "PYTORCH_", "NVIDIA_VISIBLE", "GLOO_")


def _driver_version() -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def rank_env(ctx: Any) -> dict[str, Any]:
    """Per-rank facts: host, pid, device name, capability, memory, SM count."""
    import torch

    d: dict[str, Any] = {"rank": ctx.rank, "local_rank": ctx.local_rank, "host": socket.gethostname(),
                         "pid": os.getpid(), "device": str(ctx.device),
                         "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}
    if ctx.cuda:
        p = torch.cuda.get_device_properties(ctx.device)
        d.update({"gpu": p.name, "capability": f"{p.major}.{p.minor}", "memory_GiB": round(p.total_memory / 2**30, 1),
                  "sm_count": p.multi_processor_count, "uuid": str(getattr(p, "uuid", ""))})
    else:
        d["cpu"] = platform.processor() or platform.machine()
        d["threads"] = torch.get_num_threads()
    return d


def global_env(ctx: Any) -> dict[str, Any]:
    """Versions and variables, read on rank 0."""
    import torch

    nccl = None
    if ctx.cuda:
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:
            nccl = None
    try:
        import nvtx  # noqa: F401

        nvtx_src = "nvtx package"
    except Exception:
        nvtx_src = "torch.cuda.nvtx"
    ver = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "driver": _driver_version() if ctx.cuda else None,
        "backend": ctx.backend,
        "world_size": ctx.world,
        "nvtx": nvtx_src if ctx.cuda else None,
        "nccl_on_op_stream": bool(ctx.cuda and ver >= (2, 8)),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
    }
