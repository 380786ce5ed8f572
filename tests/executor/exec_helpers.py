"""Helpers for the executor tests (a plain module, not a conftest, so it cannot clash with
other folders' conftest imports): run ``torchrun -m schedsim ...`` on CPU ranks (gloo)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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




@dataclass(frozen=True)
class Job:
    """One command of a shared torchrun launch (:func:`torchrun_batch`): its exit code, rank 0's output between
    its markers, and the launch's end time (``time.time()``, for tests of how fast a run exits)."""

    returncode: int
    stdout: str
    stderr: str
    launch_exit: float


def split_jobs(text: str, n: int) -> list[tuple[str, int | None]]:
    """Cut the output of :file:`data/batch_cli.py` into ``n`` pieces ``(text, exit code)``; a command that
    never reached its end marker (the launch died in it) has exit code None.

    >>> split_jobs("==== schedsim job 0 begin\\nhi\\n==== schedsim job 0 end rc=2\\n", 1)
    [('hi\\n', 2)]
    """
    out: list[tuple[str, int | None]] = []
    for i in range(n):
        m = re.search(rf"^==== schedsim job {i} begin\n(.*?)(?:^==== schedsim job {i} end rc=(\d+)\n|\Z)", text,
                      re.S | re.M)
        out.append(("", None) if m is None else (m[1], None if m[2] is None else int(m[2])))
    return out


def torchrun_batch(nproc: int, jobs: list[list[str]], timeout: float = 300.0) -> list[Job]:
    """Run several ``schedsim`` commands (argv lists) in one ``torchrun --nproc-per-node N`` launch, in order,
    through :file:`data/batch_cli.py`; one :class:`Job` per command. Torch is imported once per rank, not once
    per command: the executor tests that only read a run's outputs share a launch."""
    spec = Path(tempfile.mkdtemp(prefix="schedsim_batch_")) / "jobs.json"
    spec.write_text(json.dumps(jobs))
    p = torchrun(nproc, [str(spec)], timeout=timeout, script=DATA / "batch_cli.py")
    end = time.time()
    outs, errs = split_jobs(p.stdout, len(jobs)), split_jobs(p.stderr, len(jobs))
    tail = f"\n[launch exit code {p.returncode}; stderr tail]\n{p.stderr[-3000:]}"
    return [Job(-1 if rc is None else rc, o, e + ("" if rc is not None else tail), end)
            for (o, rc), (e, _) in zip(outs, errs, strict=True)]
