"""``schedsim execute`` issues its iterations on a thread of its own, from a shallow Python stack
(:func:`executor.dist.on_issuing_thread`; issue 39: PyTorch's NCCL Flight Recorder gathers the caller's whole stack on
every collective, ~26 frames under the CLI against ~4 in a hand-written script). What the thread must keep: results,
the same exceptions, Ctrl-C / SIGTERM with exit 130 and the failure file, the profiler's op mapping (tested with the
shared 2-rank launch, test_execute_cpu)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from exec_helpers import ROOT, _env

from executor import ExecError, ExecTimeout
from executor.dist import ISSUE_THREAD, issue_thread, on_issuing_thread


def _depth() -> int:
    f, n = sys._getframe(1), 0
    while f is not None:
        n += 1
        f = f.f_back
    return n


def test_the_function_runs_on_a_thread_of_its_own_from_a_fresh_stack(monkeypatch) -> None:
    monkeypatch.delenv(ISSUE_THREAD, raising=False)
    here = _depth()
    got = on_issuing_thread(lambda: (threading.current_thread().name, _depth()))
    # _bootstrap, _bootstrap_inner, run, the lambda: 4, however deep the caller
    assert got == ("schedsim-issuer", 4) and here > 4
    monkeypatch.setenv(ISSUE_THREAD, "0")  # the former form: on the calling thread
    assert on_issuing_thread(lambda: threading.current_thread() is threading.main_thread())


def test_the_same_exception_reaches_the_caller(monkeypatch) -> None:
    monkeypatch.delenv(ISSUE_THREAD, raising=False)
    err = ExecTimeout("timeout after 2.0 s: all_reduce 'ar' (ar@r0)", "ar@r0", [1])

    def fail() -> None:
        raise err

    with pytest.raises(ExecTimeout) as e:
        on_issuing_thread(fail)
    assert e.value is err and e.value.missing == [1]

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        on_issuing_thread(interrupted)


def test_a_bad_switch_is_refused(monkeypatch) -> None:
    monkeypatch.setenv(ISSUE_THREAD, "yes")
    with pytest.raises(ExecError, match="SCHEDSIM_ISSUE_THREAD='yes' is neither 0 nor 1"):
        issue_thread()


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_an_interrupted_wait_stops_the_thread_and_raises_in_the_caller(monkeypatch) -> None:
    """A signal handler raising in the main thread (execute's SIGTERM handler, Ctrl-C) while it waits: the thread
    gets KeyboardInterrupt at its next Python instruction and stops; the caller raises its own."""
    monkeypatch.delenv(ISSUE_THREAD, raising=False)
    seen: list[str] = []

    class Stop(Exception):
        pass

    def loop() -> None:
        try:
            end = time.monotonic() + 30
            while time.monotonic() < end:
                time.sleep(0.001)
        except KeyboardInterrupt:
            seen.append("interrupted")
            raise

    def handler(_s: int, _f: object) -> None:
        raise Stop

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(Stop):
            on_issuing_thread(loop)
        assert time.monotonic() - t0 < 10
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert seen == ["interrupted"]
    assert not [t for t in threading.enumerate() if t.name == "schedsim-issuer"]


@pytest.mark.slow
def test_execute_calls_its_collectives_from_a_shallow_stack(gloo2) -> None:
    """Every all_reduce of an execute run (warm-up, timed, uninstrumented, stamped, --measure-host's probes,
    --profiler's iterations) is called at most 11 frames deep on gloo ranks, however deep the caller (here the
    shared launch's job runner and the CLI, ~20 frames): on main, the lean loop's call was ~27 deep from the CLI.
    (gloo's collective is two lambdas below the loop, NCCL's a C partial: the lean loop's NCCL call is 7 deep.)"""
    r, base = gloo2["depth"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for rank in (0, 1):
        d = json.loads((base / "depth" / f"depth_rank{rank}.json").read_text())
        calls = d["calls"]
        assert d["caller_depth"] >= 5 and calls, d  # the launch's job runner, under the CLI's ~15 frames
        depth = {key: int(key.split()[0]) for key in calls}
        assert max(depth.values()) <= 11, calls
        lean = [n for key, n in depth.items() if "< run_cpu < _iter_cpu_lean <" in key]
        assert lean and max(lean) <= 10, calls
        assert all(" schedsim-issuer: " in key for key in calls), calls
        # the phases, each seen: instrumented, uninstrumented, --measure-host's tp layers, --profiler's
        for fn in ("< _iter_cpu < _one <", "< _iter_cpu_lean <", "< tp_layer_costs <", "< _profile_one <"):
            assert any(fn in key for key in calls), (fn, calls)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_ctrl_c_still_exit_130_with_the_failure_file(tmp_path, sig) -> None:
    """A signal reaches the main thread, which waits for the issuing one: the run still stops at once, with exit
    130, rank 0's message and failure_rank0.json saying it was interrupted and where."""
    (tmp_path / "s.yaml").write_text("schema_version: 1\nname: slow_one\nworld_size: 1\nops:\n"
                                     "  - {name: a, kind: compute, duration_us: 100000, stream: main}\n"
                                     "  - {name: b, kind: compute, duration_us: 100000, stream: main, deps: [a]}\n")
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "schedsim", "execute", str(tmp_path / "s.yaml"), "--backend", "gloo",
                          "--device", "cpu", "--iters", "200", "--warmup", "1", "--no-gantt", "--out", str(out)],
                         cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # not ignored, as in a
    # shell's background job: Python then installs its Ctrl-C handler
    try:
        assert p.stdout is not None
        line = p.stdout.readline()  # printed before the runner is made; the iterations take 0.2 s each
        assert line.startswith("schedsim execute slow_one"), line
        time.sleep(1.5)
        t0 = time.monotonic()
        os.kill(p.pid, sig)
        _out, err = p.communicate(timeout=30)
        assert time.monotonic() - t0 < 10
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "error: rank 0: interrupted (Ctrl-C or SIGTERM)" in err and "Traceback" not in err, err
    f = json.loads((out / "failure_rank0.json").read_text())
    assert f["interrupted"] and f["error"] == "interrupted (Ctrl-C or SIGTERM)" and f["phase"] == "timed", f
    assert f["completed_timed_iterations"] >= 1
    assert (out / "partial_rank0.json").exists()
