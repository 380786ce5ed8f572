"""Helpers for the executor tests (a plain module, not a conftest, so it cannot clash with
other folders' conftest imports): run ``torchrun -m schedsim ...`` on CPU ranks (gloo)."""

from __future__ import annotations

import json
import os
import re
import signal
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
    # On a timeout, SIGTERM: torchrun's agent then stops its ranks (SIGKILL after 30 s); killing the agent
    # outright would orphan the ranks, which run in sessions of their own.
    with subprocess.Popen(cmd, cwd=ROOT, env=_env(cuda), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.terminate()
            try:
                p.communicate(timeout=45)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


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
    with tempfile.TemporaryDirectory(prefix="schedsim_batch_") as d:
        spec = Path(d) / "jobs.json"
        spec.write_text(json.dumps(jobs))
        p = torchrun(nproc, [str(spec)], timeout=timeout, script=DATA / "batch_cli.py")
        end = time.time()
    outs, errs = split_jobs(p.stdout, len(jobs)), split_jobs(p.stderr, len(jobs))
    tail = f"\n[launch exit code {p.returncode}; stderr tail]\n{p.stderr[-3000:]}"
    return [Job(-1 if rc is None else rc, o, e + ("" if rc is not None else tail), end)
            for (o, rc), (e, _) in zip(outs, errs, strict=True)]


# -- the shared launches of the executor tests (the ``gloo2`` / ``gloo3`` fixtures of tests/conftest.py) ------
# Each torchrun start imports torch in every rank and in the agent: seconds on a 2-core CI machine. The tests
# that only read what a run wrote share one launch per world size; each command still runs end to end
# (``execute`` → timeline → ``--compare``) exactly as its own ``torchrun -m schedsim`` would. Tests that watch a
# launch itself (exit codes of every rank, a run that must fail) keep their own.

SMALL = ["--set", "M=64", "--set", "K=64", "--set", "N=64"]


def gloo2_jobs(base: Path) -> dict[str, list[str]]:
    return {
        "tp_ffn": ["execute", "schedules/tp_ffn.yaml", "--set", "tp=2", "--set", "hidden=32", "--set", "ffn=64",
                   "--set", "seq=8", "--set", "batch=2", "--set", "dtype=fp32", "--check", "--iters", "2",
                   "--warmup", "1", "--no-gantt", "--out", str(base / "tp")],
        "ag8": ["execute", "schedules/allgather_mm8.yaml", *SMALL, "--check", "--compare", "--profiler",
                "--iters", "3", "--warmup", "1", "--no-gantt", "--out", str(base / "ag8")],
        "pp_unit": ["execute", "tests/data/pp_unit.yaml", "--set", "p=2", "--set", "m=4", "--profiler",
                    "--iters", "2", "--warmup", "1", "--no-gantt", "--out", str(base / "pp_unit")],
        "calibrate": ["calibrate", "schedules/tp_ffn.yaml", "--set", "hidden=32", "--set", "ffn=64", "--set",
                      "seq=8", "--set", "batch=2", "--no-grid", "--gemm", "32x32x32", "--quick", "--iters", "3",
                      "--min-bytes", "1024", "--max-bytes", "16384", "--factor", "16", "--host-processes", "2",
                      "--out", str(base / "cpu_cal.yaml")],
        "lean_probe": ["python", str(DATA / "lean_order_probe.py"), str(base / "lean_order")],
        **{f"toy_comm_{k}": ["python", str(DATA / "toy_comm_kinds.py"), str(base / "toy_comm_kinds"), k]
           for k in ("toy", "shipped")},
        # the depth of the Python stack at each all_reduce execute issues (test_issuing_thread)
        "depth": ["python", str(DATA / "collective_depth_probe.py"), str(base / "depth"),
                  "schedules/tp_allreduce_graph.yaml", "--eager", "--set", "input_size=64", "--set", "output_size=64",
                  "--set", "layers=2", "--iters", "2", "--warmup", "1", "--no-gantt", "--measure-host", "--profiler",
                  "--out", str(base / "depth" / "run"), "--timeout", "30"],
        # last: test_lean times how soon the launch exits after this run's last write
        "tp_allreduce": ["execute", "schedules/tp_allreduce_graph.yaml", "--eager", "--set", "input_size=64",
                         "--set", "output_size=64", "--set", "layers=2", "--iters", "2", "--warmup", "1",
                         "--no-gantt", "--compare", "--measure-host", "--out", str(base / "ar"), "--timeout", "30"],
    }


def gloo3_jobs(base: Path) -> dict[str, list[str]]:
    jobs = {"all_kinds": ["execute", str(DATA / "all_kinds.yaml"), "--iters", "2", "--warmup", "1", "--lean-iters",
                          "0", "--timeout", "30", "--no-gantt", "--out", str(base / "all_kinds")]}
    for name in ("batched_interleaved_p3", "ring_batch_one_stream"):
        jobs[name] = ["execute", str(DATA / f"{name}.yaml"), "--backend", "gloo", "--device", "cpu", "--iters", "2",
                      "--warmup", "1", "--timeout", "60", "--no-gantt", "--out", str(base / name)]
    # Megatron-style 1F1B over 3 stages: a first, a middle (receives and sends both ways) and a last stage
    jobs["pp3"] = ["execute", "schedules/megatron_gpt_pp4.yaml", "--set", "p=3", "--set", "m=4", "--set", "layers=3",
                   "--set", "hidden=64", "--set", "ffn=128", "--set", "heads=2", "--set", "seq=8", "--set",
                   "vocab=512", "--iters", "2", "--warmup", "1", "--lean-iters", "0", "--timeout", "60",
                   "--no-gantt", "--compare", "--out", str(base / "pp3")]
    return jobs


def launch(nproc: int, base: Path, jobs: dict[str, list[str]]) -> dict[str, tuple[Job, Path]]:
    """Run ``jobs`` (name → argv) in one launch of ``nproc`` ranks: name → (Job, ``base``)."""
    done = torchrun_batch(nproc, list(jobs.values()))
    return {name: (job, base) for name, job in zip(jobs, done, strict=True)}
