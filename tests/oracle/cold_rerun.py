"""Oracle: :func:`schedsim.sim.waves_columns.run_waves_program` as it was before its first pass could halt: the
first pass runs to its end, and :func:`schedsim.gpu.host.host_waited` on its ends decides the rerun with cold
first calls (rule host-issue). ``tests/sim/test_waves_cold_halt.py`` holds the package's runs equal to these."""

from __future__ import annotations

from typing import Any

from schedsim.gpu import host as gh
from schedsim.sim.waves_columns import COLD_RERUN_MAX, ProgramRun, _run_program_once, schedule_ops


def run_waves_program_whole(prog: Any, profile: Any, mode: str, rules: Any, tab: Any, serial: bool,
                            model_executor: bool, loop: Any) -> ProgramRun:
    """Both passes whole: the first, then (where the host waited for the GPU) the cold one."""
    keep: dict[str, Any] = {}
    run = _run_program_once(prog, profile, mode, rules, tab, serial, model_executor, loop, False, keep)
    assert run is not None
    waited = run.host_s is not None and gh.host_waited(run.end, run.host_s, profile, mode)
    if schedule_ops(prog) <= COLD_RERUN_MAX and waited:
        run = _run_program_once(prog, profile, mode, rules, tab, serial, model_executor, loop, True, keep)
        assert run is not None
    return run
