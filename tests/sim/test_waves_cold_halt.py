"""The first pass of a ``waves`` run halts once the host has surely waited for the GPU (rule host-issue's cold
rerun, :func:`schedsim.sim.waves_columns.run_waves_program`): by hand on a chain of kernels, and the runs equal
to both passes run whole (the oracle ``tests/oracle/cold_rerun.py``) on training steps of the search grid."""

from __future__ import annotations

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
from tests.oracle.cold_rerun import run_waves_program_whole
from tests.spec.test_training_block import TINY


def _runs(prog: Any, prof: Any) -> tuple[Any, Any, list[tuple[int, int]]]:
    """(the package's run, the oracle's, per loop call its result and the ops it ended)."""
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

    new = wc.run_waves_program(prog, prof, "eager", rules, tab, rules.p2p_serialized, False, Counted())
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
    new, old, calls = _runs(prog, waves_profile(launch=launch))
    assert calls == [(-1, 2), (calls[1][0], 5)] and calls[1][0] >= 0
    assert np.round(new.end * 1e6, 9).tolist() == [15.0, 25.0, 35.0, 45.0, 55.0]
    _same(new, old)


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
    halted before its last op ended."""
    text = TINY.replace("hidden_size: 64", "hidden_size: 2048").replace("seq_length: 32", "seq_length: 2048")
    for a, b in edit.items():
        text = text.replace(a, b)
    prog = lower(load_text(text, "t.yaml"))
    new, old, calls = _runs(prog, load_profile("dgx_h100"))
    assert len(calls) == 2 and calls[0][0] == -1 and calls[0][1] < prog.N and calls[1][1] == prog.N
    _same(new, old)
