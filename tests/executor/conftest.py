"""Shared torchrun launches of the executor tests.

Each torchrun start imports torch in every rank and in the agent: seconds on a 2-core CI machine. The tests
that only read what a run wrote share one launch per world size (:func:`exec_helpers.torchrun_batch`); each
command still runs end to end (``execute`` → timeline → ``--compare``) exactly as its own ``torchrun -m
schedsim`` would. Tests that watch a launch itself (exit codes of every rank, a run that must fail, a probe
script) keep their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from exec_helpers import DATA, Job, torchrun_batch

SMALL = ["--set", "M=64", "--set", "K=64", "--set", "N=64"]


def _gloo2_jobs(base: Path) -> dict[str, list[str]]:
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
                      "--min-bytes", "1024", "--max-bytes", "16384", "--factor", "16", "--out",
                      str(base / "cpu_cal.yaml")],
        "lean_probe": ["python", str(DATA / "lean_order_probe.py"), str(base / "lean_order")],
        # last: test_lean times how soon the launch exits after this run's last write
        "tp_allreduce": ["execute", "schedules/tp_allreduce_graph.yaml", "--eager", "--set", "input_size=64",
                         "--set", "output_size=64", "--set", "layers=2", "--iters", "2", "--warmup", "1",
                         "--no-gantt", "--compare", "--out", str(base / "ar"), "--timeout", "30"],
    }


def _gloo3_jobs(base: Path) -> dict[str, list[str]]:
    jobs = {"all_kinds": ["execute", str(DATA / "all_kinds.yaml"), "--iters", "2", "--warmup", "1", "--lean-iters",
                          "0", "--timeout", "30", "--no-gantt", "--out", str(base / "all_kinds")]}
    for name in ("batched_interleaved_p3", "ring_batch_one_stream"):
        jobs[name] = ["execute", str(DATA / f"{name}.yaml"), "--backend", "gloo", "--device", "cpu", "--iters", "2",
                      "--warmup", "1", "--timeout", "60", "--no-gantt", "--out", str(base / name)]
    return jobs


def _launch(nproc: int, base: Path, jobs: dict[str, list[str]]) -> dict[str, tuple[Job, Path]]:
    pytest.importorskip("torch")
    done = torchrun_batch(nproc, list(jobs.values()))
    return {name: (job, base) for name, job in zip(jobs, done, strict=True)}


@pytest.fixture(scope="session")
def gloo2(tmp_path_factory) -> dict[str, tuple[Job, Path]]:
    """The 2-rank commands of ``_gloo2_jobs``, run in one launch: name → (Job, output base folder)."""
    base = tmp_path_factory.mktemp("gloo2")
    return _launch(2, base, _gloo2_jobs(base))


@pytest.fixture(scope="session")
def gloo3(tmp_path_factory) -> dict[str, tuple[Job, Path]]:
    """The 3-rank commands of ``_gloo3_jobs``, run in one launch: name → (Job, output base folder)."""
    base = tmp_path_factory.mktemp("gloo3")
    return _launch(3, base, _gloo3_jobs(base))
