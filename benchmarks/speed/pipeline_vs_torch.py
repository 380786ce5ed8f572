"""Ours vs torch.distributed.pipelining's simulator on interleaved 1F1B, pp=32, m=512, v=4.

torch: `_PipelineScheduleRuntime` lowers ScheduleInterleaved1F1B with sends/recvs (~390k actions);
we time `_simulate_comms_compute(pipeline_order_with_comms, stage_to_rank, num_stages)`, its lock-step
dry run (no durations, streams or contention).

ours: the *same* compute order (torch's, as inline custom actions) goes through schedsim's pipeline
expansion, DAG build, static checks, discrete-event simulation with durations (unit F/I/W costs), p2p
on their own streams, metrics and timeline.json, twice: with the unit profile's dependency-only model
(``replay``, a Python event loop) and with the default ``waves`` model (compiled loop). Printed
per phase in wall and CPU seconds (``time.process_time``: this process only, so other jobs on the
machine do not count), with torch's time over ours (simulate only, and end to end), all measured in
this one run with the cyclic GC paused on both sides (as ``schedsim predict`` runs).

With ``--builtin`` it also times the expansion alone (``expand_pipeline`` into a fresh table, min of 3 runs,
CPU s) and ``lower()`` without checks of the built-in schedules at the same pp and m: interleaved 1F1B
(Megatron's order, v), 1F1B and ZB-H1 (torch's lowering).

Usage: python benchmarks/speed/pipeline_vs_torch.py [--pp 32 --m 512 --v 4] [--json] [--builtin]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# as the CLI starts (schedsim.cli.main): numpy's OpenBLAS with one thread, whose pool would otherwise spin on
# the other cores at import and count in this process's CPU time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


#: The GPU models timed: the unit profile's own (``replay``: dependencies only, the pipeline papers' ideal kernels;
#: its event loop is Python) and the default ``waves`` (compiled event loop, fed from the Program's columns).
MODELS = {"replay": "the unit profile's, Python loop", "waves": "the default, compiled loop"}
PHASES = ("expand", "build", "checks", "simulate", "timeline")


def torch_side(pp: int, m: int, v: int):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import (
        ScheduleInterleaved1F1B,
        _PipelineScheduleRuntime,
        _simulate_comms_compute,
    )

    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank = 0
    stage.group_size = pp
    stage.submod = None
    stages = [stage for _ in range(v)]
    for s in stages:
        s.num_stages = v * pp
    sched = ScheduleInterleaved1F1B(stages, m)
    compute = {r: [a for a in acts] for r, acts in sched.pipeline_order.items()}
    rt = _PipelineScheduleRuntime(stages, m)
    rt._prepare_schedule_with_comms(sched.pipeline_order)
    from torch.distributed.pipelining.schedules import _ComputationType as CT

    keep = {CT.FORWARD, CT.FULL_BACKWARD, CT.BACKWARD_INPUT, CT.BACKWARD_WEIGHT, CT.SEND_F, CT.RECV_F,
            CT.SEND_B, CT.RECV_B}
    # _simulate_comms_compute rejects the UNSHARD/RESHARD/REDUCE_GRAD bookkeeping actions the lowering adds
    with_comms = {r: [a for a in acts if a is None or a.computation_type in keep]
                  for r, acts in rt.pipeline_order_with_comms.items()}
    n_actions = sum(len([a for a in acts if a is not None]) for acts in with_comms.values())
    stage_to_rank = {s: s % pp for s in range(pp * v)}
    gc.collect()
    gc.disable()
    t0, c0 = time.perf_counter(), time.process_time()
    _simulate_comms_compute(with_comms, lambda s: stage_to_rank[s], pp * v)
    t_torch = (time.perf_counter() - t0, time.process_time() - c0)
    gc.enable()
    return compute, n_actions, t_torch


def ours(compute, pp: int, m: int, model: str):
    """schedsim on torch's compute order with GPU model ``model``; per phase (wall s, CPU s): expand (pipeline
    block into op columns), build (link the columns into the Program's dependency, collective and p2p
    arrays), checks (on the arrays), simulate (from the Program, no networkx), timeline."""
    from dataclasses import replace

    from schedsim.hardware.profile import load_profile
    from schedsim.lower import check_program, lower
    from schedsim.lower.pipeline import expand_pipeline
    from schedsim.lower.table import Table
    from schedsim.sim.engine import simulate
    from schedsim.sim.metrics import compute_metrics
    from schedsim.spec.model import ScheduleSpec

    actions = {r: " ".join("_" if a is None else str(a) for a in acts) for r, acts in compute.items()}
    prof = load_profile(str(ROOT / "tests/data/unit_profile.yaml"))
    gc.collect()
    gc.disable()
    marks = [(time.perf_counter(), time.process_time())]

    def mark() -> None:
        marks.append((time.perf_counter(), time.process_time()))

    spec = ScheduleSpec.model_validate({
        "schema_version": 1, "name": "bench", "world_size": pp,
        "pipeline": {"schedule": "custom", "p": pp, "m": m, "actions": actions, "p2p": "overlapped",
                     "stage": {"forward": [{"kind": "compute", "duration_us": 1}],
                               "backward_input": [{"kind": "compute", "duration_us": 1}],
                               "backward_weight": [{"kind": "compute", "duration_us": 1}]}}})
    held = Table()  # kept to the end: freeing it is not part of the expansion (the Program keeps its objects)
    expand_pipeline(spec, held)  # the expansion alone (lower() below repeats it; "build" is the rest)
    mark()
    prog = lower(spec, check=False)  # expansion + linking into the Program's arrays
    mark()
    prog = replace(prog, warnings=prog.warnings + tuple(check_program(prog)), checked=True)
    mark()
    tl = simulate(prog, prof, gpu_model=model)
    mark()
    with tempfile.TemporaryDirectory() as d:
        tl.write_json(f"{d}/timeline.json", compute_metrics(tl))
    mark()
    del held
    gc.enable()
    d = [(marks[i + 1][0] - marks[i][0], marks[i + 1][1] - marks[i][1]) for i in range(5)]
    out = {"expand": d[0], "build": (d[1][0] - d[0][0], d[1][1] - d[0][1]), "checks": d[2], "simulate": d[3],
           "timeline": d[4]}
    return {**out, "ops": len(tl), "makespan_us": tl.makespan_s * 1e6}


BUILTIN = ("interleaved_1f1b", "1f1b", "zb_h1")


def builtin_expansions(pp: int, m: int, v: int, repeat: int = 3) -> dict[str, tuple[int, float, float]]:
    """Per built-in schedule: (ops, expand CPU s, lower CPU s), each the min of ``repeat`` runs, GC paused."""
    from schedsim.lower import lower
    from schedsim.lower.pipeline import expand_pipeline
    from schedsim.lower.table import Table
    from schedsim.spec.model import ScheduleSpec

    out = {}
    for name in BUILTIN:
        blk = {"schedule": name, "p": pp, "m": m, "stage": {
            "forward": [{"kind": "compute", "duration_us": 1}],
            "backward_input": [{"kind": "compute", "duration_us": 1}],
            "backward_weight": [{"kind": "compute", "duration_us": 1}]}}
        if name == "interleaved_1f1b":
            blk["v"] = v
        spec = ScheduleSpec.model_validate({"schema_version": 1, "name": name, "world_size": pp, "pipeline": blk})
        ex, lo, n = [], [], 0
        for _ in range(repeat):
            gc.collect()
            gc.disable()
            held = Table()
            c0 = time.process_time()
            expand_pipeline(spec, held)
            c1 = time.process_time()
            prog = lower(spec, check=False)
            c2 = time.process_time()
            n = prog.N
            del held, prog
            gc.enable()
            ex.append(c1 - c0)
            lo.append(c2 - c1)
        out[name] = (n, min(ex), min(lo))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", type=int, default=32)
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--v", type=int, default=4)
    ap.add_argument("--json", action="store_true", help="Print one JSON object instead of the table.")
    ap.add_argument("--builtin", action="store_true",
                    help="Also time the expansion and lower() of the built-in schedules at this pp and m.")
    a = ap.parse_args()
    from schedsim.pipeline import generate

    t0 = time.perf_counter()
    generate("interleaved_1f1b", a.pp, a.m, a.v)
    t_gen = time.perf_counter() - t0
    compute, n_actions, t_torch = torch_side(a.pp, a.m, a.v)
    runs = {model: ours(compute, a.pp, a.m, model) for model in MODELS}
    total = {model: tuple(sum(o[k][i] for k in PHASES) for i in (0, 1)) for model, o in runs.items()}
    built = builtin_expansions(a.pp, a.m, a.v) if a.builtin else {}
    if a.json:
        print(json.dumps({"torch": t_torch, "actions": n_actions, "generate_wall": t_gen,
                          **{model: {**o, "total": total[model]} for model, o in runs.items()},
                          **({"builtin": built} if built else {})}))
        return
    print(f"interleaved 1F1B pp={a.pp} m={a.m} v={a.v}")
    print(f"{'':48s} {'wall s':>8s} {'CPU s':>8s}")
    print(f"{'torch _simulate_comms_compute (' + str(n_actions) + ' actions)':48s} {t_torch[0]:8.2f} {t_torch[1]:8.2f}")
    print(f"{'schedsim generate the Megatron order':48s} {t_gen:8.2f}")
    for model, o in runs.items():
        print(f"-- schedsim, gpu_model {model} ({MODELS[model]})")
        for k, label in (("expand", "expand pipeline block"), ("build", "build DAG"), ("checks", "static checks"),
                         ("simulate", f"simulate ({o['ops']} ops)"), ("timeline", "metrics + timeline.json")):
            print(f"{'schedsim ' + label:48s} {o[k][0]:8.2f} {o[k][1]:8.2f}")
        print(f"{'schedsim end to end':48s} {total[model][0]:8.2f} {total[model][1]:8.2f}")
        print(f"torch / schedsim, CPU s: simulate {t_torch[1] / o['simulate'][1]:.2f}x; "
              f"end to end {t_torch[1] / total[model][1]:.2f}x (goal >= 10x)")
        print(f"predicted makespan (unit costs): {o['makespan_us']:.0f} units")
    if built:
        print(f"-- built-in schedules, pp={a.pp} m={a.m} (v={a.v} for interleaved), CPU s, min of 3")
        print(f"{'schedule':24s} {'ops':>9s} {'expand':>8s} {'lower':>8s}")
        for name, (n, ex, lo) in built.items():
            print(f"{name:24s} {n:9d} {ex:8.2f} {lo:8.2f}")


if __name__ == "__main__":
    main()
