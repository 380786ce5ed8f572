"""The lean hot path (issue 15), p2p batching (issue 8 §4), exit after the last write (issue 9 §4),
bad input under torchrun (issue 12 §4) and --compare on CPU ranks (issue 9 §3)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from exec_helpers import ROOT, torchrun

from executor.lean import compile_cuda, p2p_batches, tf32_plan

torch = pytest.importorskip("torch")


@dataclass
class _Op:
    name: str
    kind: str
    stream: str
    peer: int | None = None
    p2p_batch: str | None = None


def test_p2p_batches_are_the_ops_of_one_p2p_batch_name_in_program_order() -> None:
    ops = [_Op("f", "compute", "compute"), _Op("s1", "send", "pp_send", 1, "b0"), _Op("r1", "recv", "pp_recv", 1, "b0"),
           _Op("s2", "send", "pp_send", 1, "b1"), _Op("r0", "recv", "pp_recv", 0, "b1"),
           _Op("g", "compute", "compute"), _Op("lone", "send", "p", 1),  # no name: a lone isend
           _Op("t1", "send", "x", 1, "a"), _Op("t3", "recv", "y", 0, "b"),
           _Op("t2", "recv", "y", 1, "a")]  # joins batch "a", posted at t1's position
    assert p2p_batches(ops) == [[1, 2], [3, 4], [7, 9], [8]]


class _Rec:
    """Fake stream/event that logs the calls compile_cuda binds."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def wait_event(self, ev: Any) -> None:
        self.log.append(f"{self.name}.wait({ev.name})")

    def record(self, s: Any) -> None:
        self.log.append(f"{self.name}.record({s.name})")


def test_compile_cuda_binds_launches_in_program_order_with_waits_only_across_streams() -> None:
    log: list[str] = []
    fake = SimpleNamespace(cuda=SimpleNamespace(set_stream=lambda s: log.append(f"set({s.name})")),
                           backends=SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=True))))
    s0, s1 = _Rec("s0", log), _Rec("s1", log)

    def impl(name: str, tf32: bool | None = None) -> Any:
        return SimpleNamespace(run=lambda: log.append(f"run:{name}"), fast=lambda: log.append(f"fast:{name}"),
                               tf32=tf32)

    impls = [impl("a", False), impl("b"), impl("c", False), impl("d")]
    streams = [s0, s0, s1, s1]
    cross = [[], [], [0], []]  # c (on s1) depends on a (on s0)
    dep = [_Rec("ev_a", log), None, None, None]
    ends = [(s0, _Rec("end0", log)), (s1, _Rec("end1", log))]
    for f in compile_cuda(fake, impls, streams, cross, dep, ends):
        f()
    # TF32 is not switched inside the timed steps: the runner sets tf32_plan once before the timed region
    assert fake.backends.cuda.matmul.allow_tf32 is True and tf32_plan(impls) is False
    assert log == ["set(s0)", "fast:a", "ev_a.record(s0)", "fast:b", "set(s1)", "s1.wait(ev_a)", "fast:c", "fast:d",
                   "end0.record(s0)", "end1.record(s1)"]


def test_compile_cuda_records_every_end_event_when_two_schedule_streams_share_a_cuda_stream() -> None:
    """PyTorch's pool hands out 32 streams round robin, so schedule streams 0 and 32 can be one CUDA stream: each
    still gets its end event recorded (a dict keyed by stream kept one, and the lean loop then waited on an
    event never recorded: "Both events must be recorded", matmul_streams chunks 32 on one H200, 2026-12-02)."""
    log: list[str] = []
    fake = SimpleNamespace(cuda=SimpleNamespace(set_stream=lambda s: log.append(f"set({s})")),
                           backends=SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=None))))
    s = _Rec("s", log)
    impls = [SimpleNamespace(run=lambda: log.append("run"), fast=None, tf32=None)] * 2
    ends = [(s, _Rec("end_a", log)), (s, _Rec("end_b", log))]
    for f in compile_cuda(fake, impls, [s, s], [[], []], [None, None], ends):
        f()
    assert log[-2:] == ["end_a.record(s)", "end_b.record(s)"]


def test_compile_cuda_keeps_run_when_matmuls_disagree_on_tf32() -> None:
    log: list[str] = []
    fake = SimpleNamespace(cuda=SimpleNamespace(set_stream=lambda s: None),
                           backends=SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=None))))
    impls = [SimpleNamespace(run=lambda k=k: log.append(f"run{k}"), fast=lambda k=k: log.append(f"fast{k}"), tf32=t)
             for k, t in enumerate([True, False])]
    s = _Rec("s", log)
    for f in compile_cuda(fake, impls, [s, s], [[], []], [None, None], []):
        f()
    assert log == ["run0", "run1"] and fake.backends.cuda.matmul.allow_tf32 is None
    assert tf32_plan(impls) is None


def test_run_with_deadline_abandons_a_teardown_that_never_returns() -> None:
    from executor.dist import run_with_deadline

    t0 = time.perf_counter()
    assert run_with_deadline(lambda: time.sleep(30), 0.2) is False
    assert time.perf_counter() - t0 < 2.0
    assert run_with_deadline(lambda: None, 2.0) is True


@pytest.mark.slow
def test_lean_loop_issues_exactly_the_instrumented_ops_in_order_2_ranks(gloo2) -> None:
    p, base = gloo2["lean_probe"]  # data/lean_order_probe.py in the shared 2-rank launch (tests/conftest.py)
    assert p.returncode == 0, p.stderr[-3000:]
    tmp_path = base / "lean_order"
    for rank in (0, 1):
        res = json.loads((tmp_path / f"order_rank{rank}.json").read_text())
        assert res["instrumented"] == res["program"]
        assert res["lean"] == res["instrumented"]
    r0 = json.loads((tmp_path / "order_rank0.json").read_text())
    r1 = json.loads((tmp_path / "order_rank1.json").read_text())
    # Megatron 1F1B, p=2, m=3: stage 0 runs send_forward_recv_backward in the steady state, stage 1
    # send_backward_recv_forward; each _communicate call (lone ones too) is one batch_isend_irecv
    assert r0["batches"] == [["sendF0.0"], ["sendF0.1", "recvB0.0"], ["sendF0.2", "recvB0.1"], ["recvB0.2"]]
    assert r1["batches"] == [["recvF1.0"], ["sendB1.0", "recvF1.1"], ["sendB1.1", "recvF1.2"], ["sendB1.2"]]


@pytest.mark.slow
def test_execute_2_ranks_exits_within_seconds_of_its_last_write_and_warns_on_cpu_compare(gloo2) -> None:
    r, base = gloo2["tp_allreduce"]  # the last command of the shared 2-rank launch (tests/conftest.py)
    out = base / "ar"
    t_exit = r.launch_exit
    assert r.returncode == 0, r.stderr[-3000:]
    last_write = max(p.stat().st_mtime for p in out.rglob("*") if p.is_file())
    # torchrun's own shutdown is included; a hung teardown would take the subprocess timeout
    assert t_exit - last_write < 15.0
    assert "--compare on CPU ranks predicts with profile 'h200'" in r.stdout + r.stderr
    assert "calibrate --backend gloo" in r.stdout + r.stderr
    tl = json.loads((out / "timeline.json").read_text())
    assert tl["meta"]["makespan_uninstrumented_s"] > 0


def test_measure_host_compares_with_this_process_host_costs(gloo2, tmp_path) -> None:
    """``--measure-host``: rank 0's host costs by kind land in the meta, and ``--compare`` predicts with them in
    place of the profile's: the same prediction made here from h200 and those costs agrees to the ns."""
    from executor.calibrate_host import launch_fields
    from schedsim.api import predict_to_dir
    from schedsim.gpu.power import iteration_gap_of
    from schedsim.hardware.profile import HardwareProfile, load_profile
    from schedsim.sim.timeline import Timeline

    r, base = gloo2["tp_allreduce"]
    out = base / "ar"
    assert r.returncode == 0, r.stderr[-3000:]
    tl = Timeline.read_json(out / "timeline.json")
    host = tl.meta["host_costs_us"]
    assert host["eager_per_op_us"] > 0 and host["memcpy_call_us"] > 0 and host["p2p_call_us"] > 0
    assert "first_op_extra_us" in host and "event_wait_us" not in host
    # a collective's host cost is the loop of back-to-back calls (2026-12-02 probes), not the loop alternating
    # it with a matmul, which stays in the JSON
    assert host["eager_per_collective_us"] == host["collective_loop_us"] > 0 and host["mixed_pair_us"] > 0
    assert "--compare predicts with 'h200' and this process's host costs: eager_per_op_us" in r.stdout
    pred = Timeline.read_json(out / "predicted" / "timeline.json")
    assert pred.profile == "h200+host_of_this_run"
    d = load_profile("h200").model_dump()
    d["launch"].update(launch_fields(host))
    sets = ["input_size=64", "output_size=64", "layers=2"]
    kw = {"max_connections": None, "iteration_gap_s": iteration_gap_of(tl.meta, tl.world_size)}
    yml = ROOT / "schedules" / "tp_allreduce_graph.yaml"
    ours, _m, _p = predict_to_dir(yml, sets, HardwareProfile.model_validate(d), tmp_path / "ours", "eager",
                                  gantt=False, **kw)
    plain, _m, _p = predict_to_dir(yml, sets, "h200", tmp_path / "plain", "eager", gantt=False, **kw)
    assert ours.makespan_s == pytest.approx(pred.makespan_s, rel=0, abs=1e-9)
    assert plain.makespan_s != pytest.approx(pred.makespan_s, rel=1e-3)  # the host costs did change it


@pytest.mark.slow
def test_bad_input_under_torchrun_prints_once_and_every_rank_exits_2(tmp_path) -> None:
    r = torchrun(2, ["execute", "schedules/tp_allreduce_graph.yaml", "--set", "layers=zz", "--out",
                     str(tmp_path / "x")], timeout=120)
    both = r.stdout + r.stderr
    assert r.returncode != 0
    assert both.count("error:") == 1, both[-3000:]
    assert both.count("exitcode  : 2") == 2 or both.count("exitcode: 2") == 2, both[-3000:]
    assert not (tmp_path / "x").exists()  # nothing written before the check


def test_cpu_profile_note_only_for_gpu_profiles_on_cpu_ranks() -> None:
    from executor.execute import cpu_profile_note
    from schedsim.hardware.profile import load_profile

    h200 = load_profile("h200")
    cpu = h200.model_copy(update={"gpu": h200.gpu.model_copy(update={"name": "CPU (gloo ranks)"})})
    assert "calibrate --backend gloo" in (cpu_profile_note(h200, "h200", cuda=False) or "")
    assert cpu_profile_note(cpu, "cpu.yaml", cuda=False) is None
    assert cpu_profile_note(h200, "h200", cuda=True) is None


def test_split_jobs_cuts_each_commands_output_and_exit_code() -> None:
    from exec_helpers import split_jobs

    text = ("noise\n==== schedsim job 0 begin\na\nb\n==== schedsim job 0 end rc=0\n"
            "==== schedsim job 1 begin\nerror: x\n==== schedsim job 1 end rc=2\n==== schedsim job 2 begin\nhung\n")
    assert split_jobs(text, 4) == [("a\nb\n", 0), ("error: x\n", 2), ("hung\n", None), ("", None)]


def test_the_uninstrumented_loop_is_warmed_up_untimed_before_its_timed_iterations() -> None:
    """--warmup 2, --iters 3, --lean-iters 4: 3 instrumented, then 2 untimed and 4 timed uninstrumented iterations,
    then the stamped ones; only the 4 timed ones are kept, and every iteration has its own number (each rank
    counts alike, so the aligned starts pair)."""
    from executor.runtime import RankRunner, RunOptions, _Times, lean_warmup

    calls: list[tuple[str, int]] = []

    class Probe(RankRunner):
        def __new__(cls, *a: Any, **k: Any) -> Probe:
            return object.__new__(cls)

        def __init__(self) -> None:
            self.times = _Times()
            self.log = lambda s: None
            self.last_issue_s = None
            self.clock = None

        def _one(self, record: bool, profile: bool = False) -> tuple[int, list[float], list[float]]:
            calls.append(("timed", self.iteration))
            return 0, [0.0], [1.0]

        def _lean(self) -> tuple[int, float]:
            calls.append(("lean", self.iteration))
            self.last_issue_s = 1e-6 * self.iteration
            return self.iteration, 1e-3 * self.iteration

        def _host_call_iters(self, o: Any) -> int:
            return 1

        def _lean_stamped(self) -> list[float]:
            calls.append(("stamped", self.iteration))
            return [0.0]

    o = RunOptions(iters=3, warmup=2, lean_iters=4)
    p = Probe()
    p._timed(o)
    assert lean_warmup(o) == 2
    assert calls == [("timed", 0), ("timed", 1), ("timed", 2), ("lean", 3), ("lean", 4), ("lean", 5), ("lean", 6),
                     ("lean", 7), ("lean", 8), ("stamped", 9)]
    assert p.times.lean == [[5, 0.005], [6, 0.006], [7, 0.007], [8, 0.008]]  # the warm-up's two are not kept
    assert p.times.lean_issue_s == pytest.approx([5e-6, 6e-6, 7e-6, 8e-6])
    assert lean_warmup(RunOptions(iters=3, warmup=2, lean_iters=0)) == 0
    assert lean_warmup(RunOptions(iters=0, warmup=2)) == 0 and lean_warmup(RunOptions(iters=2, warmup=0)) == 0


def test_the_compiled_loop_leaves_no_python_object_behind_per_op() -> None:
    """The uninstrumented steps of the executor's launches (``functools.partial(torch.matmul, a, b, out=c)``, the
    elementwise ``torch.add(..., out=)``, stream switches, event records) run 200 iterations of 40 ops on CPU
    tensors: no Python memory and no object the collector tracks is left per op (tracemalloc's current size and
    gc's generation-0 count unchanged), so nothing in the timed loop feeds the collector, which the executor
    keeps disabled there anyway (``schedsim._gc.frozen_gc``)."""
    import functools
    import gc
    import tracemalloc

    a, b, c = torch.rand(1, 8), torch.rand(8, 8), torch.empty(1, 8)
    x, y, z = torch.rand(64), torch.rand(64), torch.empty(64)
    fake = SimpleNamespace(cuda=SimpleNamespace(set_stream=id),
                           backends=SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=None))))
    s0, s1 = SimpleNamespace(wait_event=id), SimpleNamespace(wait_event=id)
    ev = SimpleNamespace(record=id)
    impls = [SimpleNamespace(run=None, tf32=None, fast=functools.partial(torch.matmul, a, b, out=c) if k % 2 == 0
                             else functools.partial(torch.add, x, y, out=z)) for k in range(40)]
    streams = [s0 if k % 4 < 2 else s1 for k in range(40)]
    cross = [[k - 2] if k % 4 == 2 and k >= 2 else [] for k in range(40)]
    dep = [ev if k % 4 == 0 else None for k in range(40)]
    steps = compile_cuda(fake, impls, streams, cross, dep, [(s0, ev), (s1, ev)])

    def iterate(n: int) -> None:
        for _ in range(n):
            for f in steps:
                f()

    iterate(20)  # warm: the interpreter's caches and torch's first calls
    was = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    try:
        iterate(5)
        mem0, count0 = tracemalloc.get_traced_memory()[0], gc.get_count()[0]
        iterate(200)
        mem1, count1 = tracemalloc.get_traced_memory()[0], gc.get_count()[0]
    finally:
        tracemalloc.stop()
        if was:
            gc.enable()
    assert len(steps) > 40 and count1 == count0 and mem1 - mem0 < 200  # bytes: no growth with 8000 calls


def test_a_collectives_lean_call_is_bound_as_a_script_writes_it() -> None:
    """The lean loop's NCCL collective (``OpImpl.fast``) is the call a hand-written script makes: at world 1 (the
    default group) ``dist.all_reduce(buf)``, no ``group=None, async_op=False`` keywords (a keyword partial through
    torch.distributed's ``_exception_logger`` wrapper cost ~1 µs more per call, executor.kernels.script_call); on a
    sub-group ``dist.all_reduce(buf, group=g)``; a rooted one ``dist.broadcast(buf, 0)``. Materializer's NCCL
    branch with a stand-in context (no GPU: the branch only binds the call); each bound call checked against what
    it passes."""
    import functools

    import torch
    import torch.distributed as dist

    from executor.kernels import Materializer

    got: list[Any] = []

    @functools.wraps(dist.all_reduce)
    def all_reduce(*args: Any, **kwargs: Any) -> None:
        got.append((args, kwargs))

    sub = object()
    m = object.__new__(Materializer)
    m.torch, m.dist, m.async_comm, m.nccl_current_stream = torch, dist, False, True
    m.ctx = SimpleNamespace(groups={(0,): None, (0, 1): sub}, rank=0)
    buf = torch.zeros(4)
    for group, kwargs in (((0,), {}), ((0, 1), {"group": sub})):
        impl = m._collective(SimpleNamespace(kind="all_reduce", group=group), all_reduce, (buf,))
        assert impl.fast.args == (buf,) and impl.fast.keywords == kwargs
        assert impl.run is impl.fast  # the instrumented loop makes the same call
        got.clear()
        impl.fast()
        assert len(got) == 1 and got[0][0] == (buf,) and got[0][1] == kwargs
    bc = m._collective(SimpleNamespace(kind="broadcast", group=(0,)), dist.broadcast, (buf,), src=0)
    assert bc.fast.func is dist.broadcast and bc.fast.args == (buf, 0) and bc.fast.keywords == {}
