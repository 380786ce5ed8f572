"""S4: Megatron GPT PP4 (1F1B) vs PP4 with 2-layer virtual stages (interleaved, v=4).

Prints, per rank, the predicted communication shares next to those measured in S4's nsys
traces (its kernel-share table: "share" = kernel time / span of the profiled step, summed here over the
NCCL streams of one kind). NCCL kernels occupy their stream from the moment the stream reaches
them, spinning while the peer is late, so the comparable prediction is the *kernel view*:
each op from when its stream reached it (ready) to its end. Also printed: the busy share
(transfer time only), makespan and bubble, on the experiment's RTX 3090 profile and on the H200.

Usage: python benchmarks/accuracy/megatron_pp4_vp2_rtx3090.py
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from schedsim import load_profile, load_schedule, lower, simulate  # noqa: E402
from schedsim.sim.metrics import length, merge  # noqa: E402
from schedsim.sim.pipeline_metrics import pipeline_metrics  # noqa: E402

# S4 (docs/sources.md), kernel-share table rows (share of the profiled step), per device 0..3
MEASURED = {
    "megatron_gpt_pp4": {"sendrecv": [0.15, 0.26, 0.24, 0.06], "tied_allreduce": [0.07, None, None, 0.13],
                         "issue_summary": [0.15, 0.26, 0.24, 0.13]},
    "megatron_gpt_pp4_vp2": {"sendrecv": [0.62, 1.33, 0.79, 0.06], "tied_allreduce": [0.05, None, None, 0.06],
                             "issue_summary": [0.50, 0.70, 0.73, 0.12]},
}


def shares(tl):
    """Per rank: p2p kernel-view share (summed over p2p streams), tied all_reduce share, busy comm share."""
    mk = tl.makespan_s
    p2p_kv: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    ar: dict[int, float] = defaultdict(float)
    busy: dict[int, list] = defaultdict(list)
    for s in tl.spans:
        if s.resource != "comm":
            continue
        busy[s.rank].append((s.start_s, s.end_s))
        if s.kind in ("send", "recv"):
            p2p_kv[s.rank][s.stream].append((s.ready_s if s.ready_s is not None else s.start_s, s.end_s))
        else:
            ar[s.rank] += s.end_s - (s.ready_s if s.ready_s is not None else s.start_s)
    out = {}
    for r in range(tl.world_size):
        kv = sum(length(merge(iv)) for iv in p2p_kv[r].values())
        out[r] = (kv / mk, ar[r] / mk, length(merge(busy[r])) / mk)
    return out


def main() -> None:
    print("predicted vs measured communication share per rank (S4)\n")
    for name in ("megatron_gpt_pp4", "megatron_gpt_pp4_vp2"):
        spec_path = ROOT / "schedules" / f"{name}.yaml"
        for prof in ("rtx3090_pcie1x4", "h200"):
            tl = simulate(lower(load_schedule(spec_path)), load_profile(prof))
            pm = pipeline_metrics(tl)
            sh = shares(tl)
            print(f"{name} on {prof}: makespan {tl.makespan_s * 1e3:.1f} ms, bubble "
                  f"{pm['bubble_of_makespan']['overall']:.3f} of makespan")
            print(f"  {'rank':>4} {'p2p kernel view':>16} {'measured p2p':>13} {'tied AR (pred)':>15} "
                  f"{'tied AR (meas)':>15} {'busy comm':>10} {'issue summary':>14}")
            for r in range(4):
                meas = MEASURED[name] if prof == "rtx3090_pcie1x4" else None
                mp = f"{meas['sendrecv'][r]:.2f}" if meas else "-"
                ma = meas["tied_allreduce"][r] if meas else None
                mi = f"{meas['issue_summary'][r]:.2f}" if meas else "-"
                print(f"  {r:>4} {sh[r][0]:16.2f} {mp:>13} {sh[r][1]:15.2f} {'-' if ma is None else f'{ma:.2f}':>15} "
                      f"{sh[r][2]:10.3f} {mi:>14}")
            print()


if __name__ == "__main__":
    main()
