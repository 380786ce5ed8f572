"""Merge a fresh 2-GPU calibration (``bash benchmarks/accuracy/two_gpu_suite.sh``) into the shipped ``h200x2`` profile.

Usage (repo root)::

    python benchmarks/accuracy/merge_profile.py RUN_DIR [--out schedsim/hardware/profiles/h200x2.yaml] [--when TEXT]

``RUN_DIR`` holds ``h200x2_calibrated.yaml`` and ``.json`` from ``schedsim calibrate``. What is taken from the
run, because the run measured it: the GEMM table (entries of the run replace the same (dtype, m, n, k); the
other shipped entries stay), every GPU-side collective table (R back-to-back calls behind ``torch.cuda._sleep``
between two events), copy bandwidths and latency, HBM bandwidth, the kernel floor, the NVLink figures, the
NCCL contention factors alpha and beta (read by no model since the sharing model was retired), the host
cost of p2p calls, batched p2p calls, event waits and
copies, the executor's extra per-op cost, the first launch's and first collective call's extra host cost,
``graph_launch_us``, and ``p2p_one_way_speedup`` (batched ring over
unbatched one way at 64 MiB, both GPU-side). What is kept from the probes ([evidence: 2xh200-concurrency]),
and why, is written into each ``source``:

* ``launch.eager_per_op_us`` and ``eager_per_collective_us``: the run's host loops (15.5 and 59.3 µs on
  2026-11-30 22:50) are contradicted by the run's own measured timelines: small_ops eager issues 128 matmuls
  and 65 copies in 2.276 ms, less than 128 × 15.5 + 65 × 6.5 µs; tp_allreduce eager runs a linear and an
  all_reduce per layer in 46 µs, less than 59.3 µs. The probes' figures (12.34 µs matmul(out=), 31.16 µs
  steady-state all_reduce) are consistent with both.
* ``nccl.slowdown_beside_gemm`` (1.06) and ``gemm_slowdown_beside_nccl`` (1.0): calibrate's 2.78 counts the
  wait for the running GEMM's SMs, which the waves model already gives (probes.md "NCCL beside GEMMs").
* ``launch.stream_switch_us``: set to 0, see the source text.

``gpu.cross_stream_latency_us`` is a per-kind statistic of a measured timeline (``--graph-run``, the run holding
``small_ops_graph_1gpu``): in a CUDA graph, the median gap from ``up{i}``'s end to the start event of
``side{i}`` (another stream) minus the gap to ``act{i}`` (same stream), over the 64 layers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from schedsim.hardware.profile import HardwareProfile
from schedsim.sim.timeline import atomic_write_text

SHIPPED = Path("schedsim/hardware/profiles/h200x2.yaml")
#: The probe-derived profile the merge starts from (the shipped h200x2 before the first merge, kept so the merge
#: can be rerun from the same base).
SHIPPED_BASE = Path("benchmarks/accuracy/h200x2_probe_base.yaml")


def _one_way_speedup(cal: dict[str, Any], size: int = 67108864) -> float | None:
    """Batched ring exchange / unbatched one way at ``size`` bytes, GPU-side (the GPU-bound point)."""
    ring = {int(e["size"]): e["time_us"] for e in cal["collectives"].get("sendrecv", [])}
    one = {int(e["size"]): e["time_us"] for e in cal["collectives"].get("p2p_unbatched", [])}
    if size in ring and size in one and one[size] > 0:
        return round(ring[size] / one[size], 3)
    return None


def cross_stream_latency_us(run: Path) -> tuple[float, float, float] | None:
    """``(extra, cross, same)`` µs from ``run/small_ops_graph_1gpu``'s measured timeline (medians over layers)."""
    import statistics

    p = run / "small_ops_graph_1gpu" / "execute" / "timeline.json"
    if not p.is_file():
        return None
    o = {x["name"]: x for x in json.loads(p.read_text())["ops"]}
    n = sum(1 for k in o if k.startswith("up"))
    same = statistics.median((o[f"act{i}"]["ready_s"] - o[f"up{i}"]["end_s"]) * 1e6 for i in range(n))
    cross = statistics.median((o[f"side{i}"]["ready_s"] - o[f"up{i}"]["end_s"]) * 1e6 for i in range(n))
    return round(cross - same, 2), round(cross, 2), round(same, 2)


def merge(shipped: dict[str, Any], fresh: dict[str, Any], cal: dict[str, Any], when: str,
          xs: tuple[float, float, float] | None = None, xs_when: str = "") -> dict[str, Any]:
    """The merged profile dict (see the module docstring for what comes from where)."""
    out = json.loads(json.dumps(shipped))
    env = f"2xH200 (NV18), {when}, torch {cal.get('torch')}, NCCL 2.28.9"
    g, fg = out["gpu"], fresh["gpu"]
    g["hbm_GBps"], g["kernel_floor_us"] = fg["hbm_GBps"], fg["kernel_floor_us"]
    g["source"] = (f"peaks: base profile 'h200' (published); hbm_GBps: measured d2d copy (read+write); "
                   f"kernel_floor_us: "
                   f"back-to-back time of a 1-element add; sms: the device's multiprocessor count; MEASURED by "
                   f"schedsim calibrate, {env}; max_connections: the CUDA default (8)")
    if xs is not None:
        g["cross_stream_latency_us"] = xs[0]
        g["source"] += (f"; cross_stream_latency_us: MEASURED timeline of small_ops_graph (one H200, CUDA graph, "
                        f"{xs_when}): median over 64 layers of the gap from a GEMM's end to the start event of its "
                        f"successor on another stream ({xs[1]} us) minus the gap to its same-stream successor "
                        f"({xs[2]} us)")
    # GEMM table: the run's entries replace the same shapes, the others stay
    key = lambda e: (e[0], e[1], e[2], e[3])  # noqa: E731
    fresh_e = {key(e): e for e in fresh["gemm"]["entries"]}
    kept = [e for e in out["gemm"]["entries"] if key(e) not in fresh_e]
    out["gemm"]["entries"] = list(fresh_e.values()) + kept
    fresh_c = {key(e): e for e in fresh["gemm"].get("ctas", [])}  # measured grids: the same merge
    out["gemm"]["ctas"] = list(fresh_c.values()) + [e for e in out["gemm"].get("ctas", []) if key(e) not in fresh_c]
    out["gemm"]["source"] = (f"MEASURED: {len(fresh_e)} shapes by schedsim calibrate, {env} (the shapes of the "
                             f"accuracy cases); {len(kept)} more from the calibration earlier that day "
                             "(../shared/data/h200x2_2026-11-30). Method: " + fresh["gemm"]["source"].split(": ", 1)[1])
    out["collectives"]["tables"] = fresh["collectives"]["tables"]
    out["collectives"]["source"] = f"MEASURED GPU-side by schedsim calibrate, {env}: " + \
        fresh["collectives"]["source"].split(": ", 1)[1]
    out["memcpy"] = fresh["memcpy"]
    out["links"]["nvlink"] = fresh["links"]["nvlink"]
    out["contention"] = fresh["contention"]
    lp, fl = out["launch"], fresh["launch"]
    for k in ("p2p_call_us", "batch_p2p_call_us", "event_wait_us", "memcpy_call_us", "graph_launch_us",
              "graph_per_op_us", "executor_extra_per_op_us"):
        lp[k] = fl[k]
    for k in ("first_op_extra_us", "first_collective_extra_us"):  # calibrations of 2026-12-01 on
        if k in fl:
            lp[k] = fl[k]
    lp["stream_switch_us"] = 0.0
    h = cal["host"]
    lp["source"] = (
        f"MEASURED host time per call of plain PyTorch, loops of calls with the GPU kept busy. "
        f"From schedsim calibrate, "
        f"{env} (executor/calibrate_host.py): p2p_call_us = one isend/irecv ({fl['p2p_call_us']}), batch_p2p_call_us "
        f"= one batch_isend_irecv of a send+recv ({fl['batch_p2p_call_us']}), event_wait_us = event.record + "
        f"wait_event ({fl['event_wait_us']}), memcpy_call_us = a 4 KiB copy_ ({fl['memcpy_call_us']}), "
        f"graph_launch_us = CUDAGraph.replay() ({fl['graph_launch_us']}), graph_per_op_us = GPU time per node of a "
        f"300-node graph minus back-to-back ({fl['graph_per_op_us']}), executor_extra_per_op_us = execute's lean loop "
        f"minus the same probe by hand ({fl['executor_extra_per_op_us']}). "
        "From the probes ([evidence: 2xh200-concurrency], "
        f"2xH200, 2026-11-30 earlier): eager_per_op_us = torch.matmul(a, b, out=c) 64x64 bf16 "
        f"({lp['eager_per_op_us']}; "
        f"add_ alone 9.67) and eager_per_collective_us = steady-state host cost of back-to-back 1 KiB all_reduce "
        f"({lp['eager_per_collective_us']}): calibrate's loops gave {h['eager_per_op_us']:.2f} and "
        f"{h['eager_per_collective_us']:.2f} in the run, which the run's own timelines rule out (small_ops eager "
        "issues 128 matmuls + 65 copies in 2.276 ms < 128 x 15.5 + 65 x 6.5 us; tp_allreduce eager runs a linear + "
        "an all_reduce per layer in 46 us < 59.3 us). stream_switch_us = 0: the executor and the hand-written "
        "references switch with torch.cuda.set_stream, a thread-local swap not measured separately; the probes' "
        "8.69 us is the `with torch.cuda.stream(s)` context manager, a different call "
        "(bash benchmarks/probes/run.sh host_calls measures both)."
    )
    nc = out["nccl"]
    sp = _one_way_speedup(cal)
    if sp is not None:
        nc["p2p_one_way_speedup"] = sp
    nc["source"] = (
        "slowdown_beside_gemm: MEASURED 2xH200, 2026-11-30 ([evidence: 2xh200-concurrency], 'NCCL beside GEMMs'): "
        "a 128 MiB "
        "all_gather / all_reduce issued beside a queue of four bf16 8192^3 GEMMs waits for the running GEMM to drain "
        "(the waves model gives that wait: NCCL needs free SMs), then runs 1.05x / 1.07x its solo time; schedsim "
        f"calibrate's {cal['nccl']['slowdown_beside_gemm']:.2f} ({when}) includes that wait, so it is not used here. "
        "sms_per_collective: the NCCL kernel's grid in a Kineto trace (24). gemm_slowdown_beside_nccl: 1.0 (the "
        "wave model charges GEMMs for the SMs NCCL holds; measured GEMMx4 +1-5 % beside it). "
        "unbatched_p2p_serialized: MEASURED behaviour (unbatched exchange = 2x one way, probes.md 'p2p'). "
        f"p2p_one_way_speedup: MEASURED GPU-side by schedsim calibrate, {env}: batched ring exchange / unbatched one "
        "way at 64 MiB (the GPU-bound point)."
    )
    out["description"] = (f"2xH200 (NVLink NV18): schedsim calibrate of {when} merged with the plain-PyTorch probes "
                          "([evidence: 2xh200-concurrency]) by benchmarks/accuracy/merge_profile.py; "
                          "torch 2.11.0+cu130, "
                          "NCCL 2.28.9. Each section's source says what was measured, when and how.")
    HardwareProfile.model_validate(out)  # fail here, not at load time
    return out


class _Dumper(yaml.SafeDumper):
    """Lists of scalars (table rows, peak tables) in flow style, as the hand-written profiles have them."""


def _repr_list(d: yaml.SafeDumper, v: list[Any]) -> Any:
    flow = all(not isinstance(x, (list, dict)) for x in v)
    return d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=flow)


_Dumper.add_representer(list, _repr_list)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--out", type=Path, default=SHIPPED)
    ap.add_argument("--when", default="2026-11-30 22:50 UTC")
    ap.add_argument("--graph-run", type=Path, default=None,
                    help="run holding small_ops_graph_1gpu (cross-stream latency)")
    ap.add_argument("--graph-when", default="2026-11-30 23:00 UTC")
    a = ap.parse_args(argv)
    shipped = yaml.safe_load(SHIPPED_BASE.read_text())
    fresh = yaml.safe_load((a.run / "h200x2_calibrated.yaml").read_text())
    cal = json.loads((a.run / "h200x2_calibrated.json").read_text())
    xs = cross_stream_latency_us(a.graph_run) if a.graph_run else None
    out = merge(shipped, fresh, cal, a.when, xs, a.graph_when)
    head = (f"# h200x2: 2xH200 profile. Generated by benchmarks/accuracy/merge_profile.py from the calibration of "
            f"{a.when}\n# (benchmarks/accuracy/two_gpu_suite.sh) and the probes of 2026-11-30; "
            "each `source` says what was "
            "measured.\n")
    atomic_write_text(a.out, head + yaml.dump(out, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
