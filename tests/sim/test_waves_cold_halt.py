"""The first pass of a ``waves`` run halts once the host has surely waited for the GPU (rule host-issue's cold
rerun, :func:`schedsim.sim.waves_columns.run_waves_program`), and is not run where a bound on the ends proves it
would halt (:func:`~schedsim.sim.waves_columns.host_surely_waited`): by hand on a chain of kernels, and the runs
equal to both passes run whole (the oracle ``tests/oracle/cold_rerun.py``) on training steps of the search grid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from schedsim.gpu import rules as gm
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim import waves_columns as wc
from schedsim.sim.engine import _rate_tables
from schedsim.sim.loop import compiled_loop
from schedsim.spec.loader import load_text
from tests.gpu.test_gpu_model import FULL, HEAD, waves_profile
from tests.oracle import numpy_helpers
from tests.oracle.cold_rerun import run_waves_program_whole
from tests.spec.test_training_block import TINY

ROOT = Path(__file__).resolve().parents[2]


def _runs(prog: Any, prof: Any, skip: bool = True) -> tuple[Any, Any, list[tuple[int, int]]]:
    """(the package's run, the oracle's, per loop call its result and the ops it ended); ``skip``: the first pass
    skipped where proved to halt (:data:`~schedsim.sim.waves_columns.SKIP_PROVED`)."""
    rules = gm.GpuRules.from_profile(prof, prog.graph_info().get("max_connections"))
    tab = _rate_tables(prof, rules)
    real = compiled_loop()
    calls: list[tuple[int, int]] = []

    class Counted:
        def __getattr__(self, k: str) -> Any:
            return getattr(real, k)

        def run(self, ints: Any, floats: Any, arrays: Any, *opt: Any) -> Any:
            got = real.run(ints, floats, arrays, *opt)
            calls.append((got, int((arrays[-9] >= 0.0).sum())))  # the end column (as test_cwaves reads it)
            return got

    saved, wc.SKIP_PROVED = wc.SKIP_PROVED, skip
    try:
        new = wc.run_waves_program(prog, prof, "eager", rules, tab, rules.p2p_serialized, False, Counted())
    finally:
        wc.SKIP_PROVED = saved
    old = run_waves_program_whole(prog, prof, "eager", rules, tab, rules.p2p_serialized, False, real)
    return new, old, calls


def _same(a: Any, b: Any) -> None:
    for f in a._fields:
        x, y = getattr(a, f), getattr(b, f)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f
        else:
            assert x == y, f


def test_the_first_pass_halts_at_the_first_end_past_the_cold_wait() -> None:
    """Five 10 µs GEMMs called 1 µs apart on one stream: the host's last call returns at 5 µs; the kernels end at
    11, 21, 31, 41, 51. With cold_wait_us 8, 11 - 5 = 6 < 8 and 21 - 5 = 16 >= 8: the first pass halts (result
    -1) after two ends; the cold pass (first call 1 + 4 µs) ends at 15, 25, ..., 55, as the oracle's."""
    body = "".join(f"  - {{name: g{i}, {FULL}}}\n" for i in range(5))
    launch = {"eager_per_op_us": 1.0, "cold_first_call_us": {"kernel": 4.0}, "cold_wait_us": 8.0}
    prog = lower(load_text(HEAD % 1 + body, "t.yaml"))
    new, old, calls = _runs(prog, waves_profile(launch=launch), skip=False)
    assert calls == [(-1, 2), (calls[1][0], 5)] and calls[1][0] >= 0
    assert np.round(new.end * 1e6, 9).tolist() == [15.0, 25.0, 35.0, 45.0, 55.0]
    _same(new, old)


def _prep(prog: Any, prof: Any) -> tuple[Any, Any, Any]:
    """(the first pass's preparation, the GPU rules, the rate tables) of ``prog`` on ``prof``, eager."""
    rules = gm.GpuRules.from_profile(prof, prog.graph_info().get("max_connections"))
    tab = _rate_tables(prof, rules)
    return wc._prepare(prog, prof, "eager", rules, rules.p2p_serialized, False, False, True), rules, tab


def test_the_first_pass_is_not_run_where_the_bound_proves_the_host_waited() -> None:
    """The chain above: its kernels are released at 1 .. 5 µs and take 10 µs each at the most a batch runs (8 CTAs
    on 8 SMs, rate 1, not memory-bound, no wave-tail gain), so the last ends no earlier than 1 + 5 · 10 = 51 µs
    (the warm pass's end exactly); 51 − 5 = 46 ≥ 8: the first pass is not run. One loop call, the cold pass, with
    the oracle's arrays. Where the margin is not met (cold_wait_us 46: 46 µs less 1e-6 of 51) it proves nothing."""
    body = "".join(f"  - {{name: g{i}, {FULL}}}\n" for i in range(5))
    launch = {"eager_per_op_us": 1.0, "cold_first_call_us": {"kernel": 4.0}, "cold_wait_us": 8.0}
    prog = lower(load_text(HEAD % 1 + body, "t.yaml"))
    prof = waves_profile(launch=launch)
    p, rules, tab = _prep(prog, prof)
    assert round(wc.latest_end_bound(p, 1, rules.sms, tab) * 1e6, 9) == 51.0
    assert wc.host_surely_waited(p, 1, rules.sms, tab, 8e-6)
    assert not wc.host_surely_waited(p, 1, rules.sms, tab, 46e-6)
    assert wc.host_surely_waited(p, 1, rules.sms, tab, 45.9e-6)
    new, old, calls = _runs(prog, prof)
    assert len(calls) == 1 and calls[0][0] >= 0 and calls[0][1] == 5
    assert np.round(new.end * 1e6, 9).tolist() == [15.0, 25.0, 35.0, 45.0, 55.0]
    _same(new, old)


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "schedules").glob("*.yaml")))
@pytest.mark.parametrize("profile", ["h200", "h200x2", "dgx_h100"])
def test_the_bound_is_no_later_than_the_latest_end(name: str, profile: str, monkeypatch: Any) -> None:
    """On every schedule of schedules/ (GEMMs on several streams, memory-bound kernels sharing HBM, copies, CUDA
    graphs beside NCCL, pipelines, a training step) the bound is no later than the latest end of the warm pass
    run whole, up to rounding (1e-12 relative; equal to it within 1e-6 where the host's calls bound the end:
    small_ops_graph); its compiled walk (``_cwaves.end_bound``) gives the numpy walk's bound (the oracle
    ``tests/oracle/numpy_helpers.end_bound``, the package's form before) to the bit."""
    prog = lower(load_text((ROOT / "schedules" / name).read_text(), name))
    prof = load_profile(profile)
    if prog.world_size > 1 and profile == "h200":
        pytest.skip("one GPU")
    p, rules, tab = _prep(prog, prof)
    bound = wc.latest_end_bound(p, prog.world_size, rules.sms, tab)
    with monkeypatch.context() as m:
        m.setattr(wc, "required", lambda fn: getattr(numpy_helpers, fn))
        assert repr(wc.latest_end_bound(p, prog.world_size, rules.sms, tab)) == repr(bound)
    run = wc._run_program_once(prog, prof, "eager", rules, tab, rules.p2p_serialized, False, compiled_loop(), False)
    assert run is not None and bound <= float(run.end.max()) * (1.0 + 1e-12)


def test_no_halt_where_the_host_did_not_wait() -> None:
    """cold_wait_us 100: no end is 100 µs past the host's last call; one whole pass, warm (11 .. 51)."""
    body = "".join(f"  - {{name: g{i}, {FULL}}}\n" for i in range(5))
    launch = {"eager_per_op_us": 1.0, "cold_first_call_us": {"kernel": 4.0}, "cold_wait_us": 100.0}
    prog = lower(load_text(HEAD % 1 + body, "t.yaml"))
    new, old, calls = _runs(prog, waves_profile(launch=launch))
    assert len(calls) == 1 and calls[0][0] >= 0 and calls[0][1] == 5
    assert np.round(new.end * 1e6, 9).tolist() == [11.0, 21.0, 31.0, 41.0, 51.0]
    _same(new, old)


@pytest.mark.parametrize("edit", [
    {},
    {"tp: 2": "tp: 1", "pp: 2": "pp: 4", "num_layers: 2": "num_layers: 4",
     "global_batch_size: 8": "global_batch_size: 16"},
    {"tp: 2": "tp: 4", "pp: 2": "pp: 1", "micro_batch_size: 1": "micro_batch_size: 2"},
    {"pp: 2": "pp: 2\n  context_parallel_size: 2\n  sequence_parallel: true\n  recompute_granularity: selective"},
])
def test_training_steps_equal_to_both_passes_whole(edit: dict[str, str]) -> None:
    """Training steps of a GPU-bound layer (h 2048, s 2048) on dgx_h100 (shared NICs, cold first calls): the
    halted first pass and the cold pass give the arrays of both passes run whole, bit for bit; the first pass
    halted before its last op ended. With the bound, the first pass is not run and the arrays are the same."""
    text = TINY.replace("hidden_size: 64", "hidden_size: 2048").replace("seq_length: 32", "seq_length: 2048")
    for a, b in edit.items():
        text = text.replace(a, b)
    prog = lower(load_text(text, "t.yaml"))
    new, old, calls = _runs(prog, load_profile("dgx_h100"), skip=False)
    assert len(calls) == 2 and calls[0][0] == -1 and calls[0][1] < prog.N and calls[1][1] == prog.N
    _same(new, old)
    # the bound proves the halt: the first pass is not run, the cold pass gives the same arrays
    new, old, calls = _runs(prog, load_profile("dgx_h100"))
    assert len(calls) == 1 and calls[0][0] >= 0 and calls[0][1] == prog.N
    _same(new, old)
