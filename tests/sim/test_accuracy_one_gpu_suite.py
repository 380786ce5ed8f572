"""benchmarks/accuracy/one_gpu_suite.sh's processes per host-bound case, counted on CPU: the script runs with
``python3`` and ``nvidia-smi`` replaced by stand-ins on ``PATH`` that log their arguments and succeed, so what is
counted is the script's own logic (which processes it starts for ``PROCS``), not any GPU work."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "benchmarks" / "accuracy" / "one_gpu_suite.sh"


def _stub(bin_dir: Path, name: str, log: Path) -> None:
    p = bin_dir / name
    p.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit 0\n')
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def _run(tmp_path: Path, procs: int, case: str, **extra: str) -> list[str]:
    """The stand-in python3 calls of one suite run of ``case`` with ``PROCS=procs`` and a given profile."""
    bin_dir, log = tmp_path / "bin", tmp_path / f"calls_{procs}.log"
    bin_dir.mkdir(exist_ok=True)
    for name in ("python3", "nvidia-smi"):
        _stub(bin_dir, name, log)
    prof = tmp_path / "profile.yaml"
    prof.write_text("name: stand-in\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / f"out{procs}"),
           "WORK": str(tmp_path / f"work{procs}"), "PROFILE": str(prof), "CASES": case, "PROCS": str(procs),
           "WAIT_AB": "0", **extra}
    subprocess.run(["bash", str(SUITE)], cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    return log.read_text().splitlines()


def _count(calls: list[str], what: str) -> int:
    return sum(what in c for c in calls)


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash, timeout")
@pytest.mark.parametrize(("procs", "execute", "measure_host", "references"), [(1, 1, 0, 1), (2, 2, 1, 2), (4, 4, 1, 4)])
def test_procs_is_the_count_of_execute_and_reference_processes_of_a_host_bound_case(tmp_path, procs, execute,
                                                                                     measure_host, references):
    """tpa_eager (an mh case): PROCS execute processes and PROCS references, the second execute process the
    --measure-host one; PROCS=1 runs one of each and no --measure-host process (it ran two execute processes)."""
    calls = _run(tmp_path, procs, "tpa_eager")
    assert _count(calls, "-m schedsim execute") == execute
    assert _count(calls, "--measure-host") == measure_host
    assert _count(calls, "handwritten/tp_allreduce.py") == references
    assert _count(calls, "suite_summary.py case") == 1


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash, timeout")
def test_a_case_with_procs_but_no_measure_host_runs_procs_of_each(tmp_path):
    """tpffn_tp1 (procs, no --measure-host): PROCS=1 one of each, PROCS=3 three of each, none --measure-host."""
    for procs in (1, 3):
        calls = _run(tmp_path, procs, "tpffn_tp1")
        assert (_count(calls, "-m schedsim execute"), _count(calls, "handwritten/tp_ffn.py")) == (procs, procs)
        assert _count(calls, "--measure-host") == 0


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash, timeout")
def test_ab_mode_runs_the_in_process_ab_per_case_with_a_reference_and_nothing_else(tmp_path):
    """AB=2: per case with a reference two `harness.py ab` processes, with the case's sets, its launch flag (not
    --profiler) and the reference's flags as --ref-arg; a case without a reference (ms_c4) none; no execute,
    reference or calibrate process; the collective binding probe once; then the A/B table (suite_summary.py ab)."""
    calls = _run(tmp_path, 4, "tpa_eager tpa_graph so_seg ms_c4", AB="2")
    ab = [c for c in calls if "harness.py ab " in c]
    assert len(ab) == 6
    assert sum("schedules/tp_allreduce_graph.yaml tp_allreduce.py --set world_size=1" in c for c in ab) == 4
    assert sum(" --eager " in c for c in ab) == 2 and sum("--cuda-graph --ref-arg=--graph " in c for c in ab) == 2
    # so_seg: its schedule's own launch (no flag: eager with the captured segment), the reference's --segment
    assert sum("schedules/small_ops_segment.yaml small_ops.py --ref-arg=--segment " in c for c in ab) == 2
    assert not any("--profiler" in c for c in ab)
    assert _count(calls, "-m schedsim") == 0 and _count(calls, "handwritten/") == len(ab)  # the A/B processes only
    assert _count(calls, "collective_call.py") == 1 and _count(calls, "suite_summary.py ab") == 1
    assert _count(calls, "suite_summary.py collect") == 0
