"""The host costs a process measures (calibrate's fresh processes, execute --measure-host) are those its timed
iterations pay: the reference call timed first and last, the lower kept; measured under the collector of the
timed loops."""

from __future__ import annotations

import gc
from types import SimpleNamespace
from typing import Any

import pytest


def test_the_reference_call_keeps_its_lower_loop_and_the_switch_follows():
    """The figures of one H100 process (execute --measure-host of small_ops_graph eager, 2026-12-06, so_eager
    rep2): the first 64x64 matmul loop 15.03 µs per call, the same call later 10.64; a switch loop of 11.80 per
    call (a set_stream and a launch). Kept: 10.64, so the switch costs 1.16, not 0 (11.80 - 15.03, clamped)."""
    from executor.calibrate_host import launch_fields, settle_costs

    res = settle_costs({"eager_per_op_us": 15.03, "eager_per_op_again_us": 10.64, "switch_call_us": 11.80,
                        "context_call_us": 15.93})
    assert res["eager_per_op_us"] == 10.64
    assert res["stream_switch_us"] == pytest.approx(1.16)
    assert res["stream_context_us"] == pytest.approx(5.29)
    assert launch_fields(res)["eager_per_op_us"] == 10.64 and launch_fields(res)["stream_switch_us"] == 1.16
    # a later loop slower than the first changes nothing: the first is kept
    assert settle_costs({"eager_per_op_us": 10.2, "eager_per_op_again_us": 10.6})["eager_per_op_us"] == 10.2


def test_measure_host_runs_under_the_collector_of_the_timed_loops(monkeypatch):
    """execute --measure-host: the host costs are measured with the collector as the timed iterations have it
    (disabled, the executor's objects frozen out of its reach), not with it scanning the executor's heap."""
    from executor import calibrate_host
    from executor.runtime import RankRunner

    seen: list[tuple[str, bool, bool]] = []

    def state(what: str) -> None:
        seen.append((what, gc.isenabled(), gc.get_freeze_count() > 0))

    class Probe(RankRunner):
        def __new__(cls, *a: Any, **k: Any) -> Probe:
            return object.__new__(cls)

        def __init__(self) -> None:
            self.opts = SimpleNamespace(warmup=0, iters=1, lean_iters=0, measure_host=True, profiler=False,
                                        check=False)
            self.ctx = SimpleNamespace(cuda=False, device=None)  # a CPU rank: run() reads no more
            self.times = None

        def _prepare(self) -> None:
            pass

        def _timed(self, o: Any) -> None:
            state("timed")

        def _host_call_iters(self, o: Any) -> int:
            return 0

    monkeypatch.setattr(calibrate_host, "measure_here", lambda ctx: state("host") or {"eager_per_op_us": 1.0})
    was = gc.isenabled()
    p = Probe()
    p.run()
    assert seen == [("timed", False, True), ("host", False, True)]
    assert p.host_costs == {"eager_per_op_us": 1.0}
    assert gc.isenabled() == was and gc.get_freeze_count() == 0


def test_measure_host_and_the_profiler_run_after_every_timed_iteration(monkeypatch):
    """execute --measure-host --profiler: the order of a process's phases. Once a profiler has run, a process's
    launches cost more (one H100, 2026-12-07: 12.3 -> 22.1 µs per matmul call, benchmarks/probes/host/
    call_patterns.py --only after_profiler), so a measurement before the timed iterations would slow the very
    makespans it is compared with. The real ``run`` and ``_timed``: warm-up, instrumented, the uninstrumented
    loop's warm-up, the timed uninstrumented iterations, the stamped ones, then the host costs, then the profiler."""
    from executor import calibrate_host
    from executor.runtime import RankRunner, RunOptions, _Times

    seen: list[str] = []

    class Probe(RankRunner):
        def __new__(cls, *a: Any, **k: Any) -> Probe:
            return object.__new__(cls)

        def __init__(self) -> None:
            self.opts = RunOptions(warmup=2, iters=3, lean_iters=4, measure_host=True, profiler=True)
            self.ctx, self.clock, self.times, self.profile_iters = SimpleNamespace(cuda=False), None, _Times(), 1
            self.log = lambda msg: None

        def _prepare(self) -> None:
            seen.append("prepare")

        def _one(self, record: bool, profile: bool = False) -> Any:
            seen.append(f"{self.phase} {self.iteration}")
            return 0, [0.0], [1.0]

        def _lean(self) -> tuple[int, float]:
            seen.append(f"{self.phase} {self.iteration}")
            return 0, 1.0

        def _host_call_iters(self, o: Any) -> int:
            return 2

        def _lean_stamped(self) -> list[float]:
            seen.append(f"stamped {self.iteration}")
            return [1.0]

        def _profile(self, base: int) -> Any:
            seen.append(f"profiled {base}")
            return "trace"

    monkeypatch.setattr(calibrate_host, "measure_here", lambda ctx: seen.append("host costs") or {"x": 1.0})
    p = Probe()
    assert p.run() is p.times
    assert seen == ["warm-up -2", "warm-up -1", "prepare", "timed 0", "timed 1", "timed 2",
                    "uninstrumented 3", "uninstrumented 4",  # the uninstrumented loop's own warm-up (untimed)
                    "uninstrumented 5", "uninstrumented 6", "uninstrumented 7", "uninstrumented 8",
                    "stamped 9", "stamped 10", "host costs", "profiled 11"]
    assert len(p.times.lean) == 4 and p.host_costs == {"x": 1.0} and p.prof_trace == "trace"


def test_the_threads_snapshot_comes_one_untimed_iteration_before_the_first_timed_one(monkeypatch):
    """Reading every thread's run time opens three procfs files per thread (hundreds of µs); just before the
    first timed iteration it made that iteration the slowest of both programs in the H100 runs (tp_allreduce world
    1 eager: +19 % executor, +28 % hand-written over the process's median). Both now take it before their last
    warm-up iteration (executor.clock.threads_snapshot_at): the real ``_timed`` with stub iterations, and the
    references' ``Proc.time`` on a CPU rank with a stub issue."""
    import importlib
    import sys

    from exec_helpers import ROOT

    from executor import runtime
    from executor.runtime import RankRunner, RunOptions, _Times

    seen: list[str] = []
    snap = lambda *a: seen.append("threads") or {}  # noqa: E731
    monkeypatch.setattr(runtime, "thread_run_times", snap)

    class Probe(RankRunner):
        def __new__(cls, *a: Any, **k: Any) -> Probe:
            return object.__new__(cls)

        def __init__(self) -> None:
            self.opts = RunOptions(warmup=3, iters=1, lean_iters=2, host_call_iters=0)
            self.ctx, self.clock, self.times, self.profile_iters = SimpleNamespace(cuda=False), None, _Times(), 1
            self.log = lambda msg: None

        def _one(self, record: bool, profile: bool = False) -> Any:
            return 0, [0.0], [1.0]

        def _lean(self) -> tuple[int, float]:
            seen.append(f"lean {self.iteration}")
            return 0, 1.0

    p = Probe()
    p._timed(p.opts)
    # iteration 0 is the instrumented one; 1, 2, 3 the loop's warm-up; 4, 5 timed
    assert seen == ["lean 1", "lean 2", "threads", "lean 3", "lean 4", "lean 5", "threads"]
    assert [row[1] for row in p.times.lean] == [1.0, 1.0]

    sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy" / "handwritten"))
    harness = importlib.import_module("harness")
    monkeypatch.setattr(harness, "thread_run_times", snap)
    import torch

    pr = object.__new__(harness.Proc)
    pr.cuda, pr.dev, pr.world, pr.ctrl = False, torch.device("cpu"), 1, None
    seen.clear()
    k = iter(range(100))
    out = pr.time(lambda: seen.append(f"issue {next(k)}") and [], [], iters=2, warmup=2)
    assert seen == ["issue 0", "threads", "issue 1", "issue 2", "issue 3", "threads"]
    assert len(out) == 2
    seen.clear()
    pr.time(lambda: seen.append("issue") and [], [], iters=1, warmup=0)  # no warm-up: before the first, as before
    assert seen == ["threads", "issue", "threads"]


def test_the_first_calls_start_as_the_programs_iterations_with_the_stream_switch_in_the_first_call(monkeypatch):
    """calibrate's first-call probe (first_op_extra_us, first_collective_extra_us, cold_first_call_us) starts each
    repetition with the executor's IterationClock.start and times the switch to the iteration's stream with the
    first call, as execute's lean loop (its first step) and the hand-written references (their issue()) do."""
    import executor.calibrate_host as H

    tick = [0.0]
    events: list[Any] = []

    def advance(dt: float, ev: Any) -> None:
        tick[0] += dt
        events.append(ev)

    cuda = SimpleNamespace(set_stream=lambda s: advance(2.0, ("set_stream", s)),
                           default_stream=lambda dev: "default", _sleep=lambda c: events.append(("sleep", c)))
    b = SimpleNamespace(torch=SimpleNamespace(cuda=cuda), ctx=SimpleNamespace(device="dev", barrier=lambda: None),
                        sync=lambda: events.append("sync"))
    clock = SimpleNamespace(start=lambda streams: events.append(("start", list(streams))))
    monkeypatch.setattr(H.time, "perf_counter", lambda: tick[0])
    out = H._first_call_times(b, [lambda: advance(10.0, "mm"), lambda: advance(20.0, "ar")], 2, sleep_cycles=7,
                              start=(clock, "s"))
    assert out == [[12.0, 12.0], [20.0, 20.0]]  # the switch (2) counts with the first call (10)
    one = [("sleep", 7), ("start", ["s"]), ("set_stream", "s"), "mm", "ar", ("set_stream", "default")]
    assert events == one + one + ["sync"]  # no synchronize or barrier of its own: the start's synchronize waits
    events.clear()
    assert H._first_call_times(b, [lambda: advance(10.0, "mm")], 1) == [[10.0]]  # without a start: as before
    assert events == ["sync", "mm", "sync"]
