"""The ``waves`` loop writes each op's deps_t into the release column where that column is the pass's own
(:func:`schedsim.sim.waves_columns._run_program_once`, ``_cwaves.c`` LAYOUT 17): it reads an op's release before
it writes the op's deps_t. A pass that writes into that column (no preparation kept) gives the same run as one
that keeps it (a separate deps_t), on ops bound by the host and ops bound by their predecessors."""

from __future__ import annotations

import pytest

from schedsim.gpu import rules as gm
from schedsim.lower import lower
from schedsim.sim import waves_columns as wc
from schedsim.sim.engine import _rate_tables
from schedsim.sim.loop import HOST, compiled_loop
from schedsim.spec.loader import load_text
from tests.gpu.test_gpu_model import FULL, HEAD, TINY, waves_profile
from tests.sim.test_waves_cold_halt import _same


@pytest.mark.parametrize("per_op_us", [1.0, 20.0])
def test_deps_written_into_the_release_column_give_the_same_run(per_op_us: float) -> None:
    """Two streams of GEMMs (10 µs and 2 µs kernels), the second waiting for the first's ops, calls of
    ``per_op_us`` launched 0.8 of the way through (so the release column is not the issue column): with 1 µs
    calls the kernels wait for their predecessors, with 20 µs ones for the host; both runs equal, the first op's
    deps_t 0 (no predecessor)."""
    body = "".join(f"  - {{name: a{i}, stream: s0, {FULL}}}\n  - {{name: b{i}, stream: s1, {TINY}, deps: [a{i}]}}\n"
                   for i in range(4))
    prog = lower(load_text(HEAD % 1 + body, "t.yaml"))
    prof = waves_profile(launch={"eager_per_op_us": per_op_us, "call_launch_fraction": 0.8})
    rules = gm.GpuRules.from_profile(prof, prog.graph_info().get("max_connections"))
    tab = _rate_tables(prof, rules)
    args = (prog, prof, "eager", rules, tab, rules.p2p_serialized, False, compiled_loop(), False)
    into = wc._run_program_once(*args, None)  # no preparation kept: deps_t in the release column
    apart = wc._run_program_once(*args, {})  # the preparation kept for a second pass: a deps_t of its own
    assert into is not None and apart is not None
    _same(into, apart)
    assert into.stream_t[0] == 0.0  # no predecessor, its call begun at 0: not its release (0.8 µs or more)
    # both of the loop's branches: ops released by their predecessors (1 µs calls), by the host (20 µs ones)
    assert into.binding.tolist() == ([HOST, 0, 0, 2, 2, 4, 4, 6] if per_op_us == 1.0 else [HOST] * 8)
