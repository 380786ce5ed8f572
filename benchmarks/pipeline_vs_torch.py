"""Ours vs torch.distributed.pipelining's simulator on interleaved 1F1B, pp=32, m=512, v=4.

torch: `_PipelineScheduleRuntime` lowers ScheduleInterleaved1F1B with sends/recvs (~390k actions);
we time `_simulate_comms_compute(pipeline_order_with_comms, stage_to_rank, num_stages)`, its lock-step
dry run (no durations, streams or contention).

ours: the *same* compute order (torch's, as inline custom actions) goes through schedsim's pipeline
expansion, DAG build and discrete-event simulation with durations (unit F/I/W costs), p2p on their own
streams and the processor-sharing contention model. Printed per phase, with the ratio of torch's
simulation time to ours (simulate only, and end to end), all measured in this one run.

Usage: python benchmarks/pipeline_vs_torch.py [--pp 32 --m 512 --v 4]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


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
    t0 = time.perf_counter()
    _simulate_comms_compute(with_comms, lambda s: stage_to_rank[s], pp * v)
    t_torch = time.perf_counter() - t0
    return compute, n_actions, t_torch


def ours(compute, pp: int, m: int):
    from schedsim.graph.build import build_graph
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate
    from schedsim.spec.model import ScheduleSpec
    from schedsim.spec.pipeline_block import expand_pipeline

    actions = {r: " ".join("_" if a is None else str(a) for a in acts) for r, acts in compute.items()}
    t0 = time.perf_counter()
    spec = ScheduleSpec.model_validate({
        "schema_version": 1, "name": "bench", "world_size": pp,
        "pipeline": {"schedule": "custom", "p": pp, "m": m, "actions": actions, "p2p": "overlapped",
                     "stage": {"forward": [{"kind": "compute", "duration_us": 1}],
                               "backward_input": [{"kind": "compute", "duration_us": 1}],
                               "backward_weight": [{"kind": "compute", "duration_us": 1}]}}})
    expand_pipeline(spec)  # cached on the spec; build_graph reuses it
    t1 = time.perf_counter()
    G = build_graph(spec)
    t2 = time.perf_counter()
    tl = simulate(G, load_profile(str(ROOT / "tests/data/unit_profile.yaml")))
    t3 = time.perf_counter()
    return {"expand": t1 - t0, "build": t2 - t1, "simulate": t3 - t2, "ops": len(tl.spans),
            "makespan_us": tl.makespan_s * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", type=int, default=32)
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--v", type=int, default=4)
    a = ap.parse_args()
    from schedsim.pipeline import generate

    t0 = time.perf_counter()
    generate("interleaved_1f1b", a.pp, a.m, a.v)
    t_gen = time.perf_counter() - t0
    compute, n_actions, t_torch = torch_side(a.pp, a.m, a.v)
    gc.collect()
    o = ours(compute, a.pp, a.m)
    print(f"interleaved 1F1B pp={a.pp} m={a.m} v={a.v}")
    print(f"{'':44s} {'seconds':>9s}")
    print(f"{'torch _simulate_comms_compute (' + str(n_actions) + ' actions)':44s} {t_torch:9.2f}")
    print(f"{'schedsim generate the Megatron order (goal < 1 s)':44s} {t_gen:9.2f}")
    print(f"{'schedsim expand pipeline block':44s} {o['expand']:9.2f}")
    print(f"{'schedsim build DAG + static checks':44s} {o['build']:9.2f}")
    print(f"{'schedsim simulate (' + str(o['ops']) + ' ops)':44s} {o['simulate']:9.2f}")
    total = o["expand"] + o["build"] + o["simulate"]
    print(f"{'schedsim end to end':44s} {total:9.2f}")
    print(f"ratio torch / schedsim simulate: {t_torch / o['simulate']:.2f}x; end to end: {t_torch / total:.2f}x")
    print(f"predicted makespan (unit costs): {o['makespan_us']:.0f} units")


if __name__ == "__main__":
    main()
