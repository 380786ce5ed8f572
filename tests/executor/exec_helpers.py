"""Helpers for the executor tests (a plain module, not a conftest, so it cannot clash with
other folders' conftest imports): run ``torchrun -m schedsim ...`` on CPU ranks (gloo)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"


def _env(cuda: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if not cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""  # CPU ranks (gloo) even on a GPU machine
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env["PYTHONWARNINGS"] = "ignore"
    return env


def torchrun(nproc: int, args: list[str], timeout: float = 180.0, script: Path | None = None,
             cuda: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``torchrun --standalone --nproc-per-node N -m schedsim ARGS`` (or ``SCRIPT ARGS``) from the repo root,
    on CPU ranks unless ``cuda``."""
    target = [str(script)] if script is not None else ["-m", "schedsim"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           *target, *args]
    return subprocess.run(cmd, cwd=ROOT, env=_env(cuda), capture_output=True, text=True, timeout=timeout)


def schedsim(args: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run ``python -m schedsim ARGS`` (one process, no torchrun)."""
    return subprocess.run([sys.executable, "-m", "schedsim", *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


