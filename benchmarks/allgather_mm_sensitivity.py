"""Sensitivity of the S0 8-chunk prediction to the borrowed/assumed numbers of `pcie2`.

Prints the predicted makespan of schedules/allgather_mm8.yaml (measured: 75.49 ms) over
alpha = compute slowdown beside comm in {0.1, 0.189, 0.3, 0.4} (0.1-0.4 is the range the literature
reports; 0.189 is arXiv 2507.03114's average) x beta = comm slowdown beside compute in {0, 0.1, 0.2},
and without the H200 shape-efficiency transfer. alpha and beta are the processor-sharing model's
(``--gpu-model sharing``); the default ``waves`` model has no such factors (its GEMMs and NCCL kernels share
SMs, rule 6 of schedsim/sim/gpu_model.py), so its figure is printed once, with and without the transfer.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedsim import build_graph, load_profile, load_schedule, simulate  # noqa: E402

MEASURED_MS = 75.49


def main() -> None:
    p = load_profile("pcie2")
    G = build_graph(load_schedule(Path(__file__).resolve().parents[1] / "schedules/allgather_mm8.yaml"))
    print(f"{'alpha':>6} {'beta':>5} {'predicted ms':>13} {'error':>8}")
    for a in (0.1, 0.189, 0.3, 0.4):
        for b in (0.0, 0.1, 0.2):
            c = p.contention.model_copy(update={"compute_slowdown_with_comm": a, "comm_slowdown_with_compute": b})
            ms = simulate(G, p.model_copy(update={"contention": c}), gpu_model="sharing").makespan_s * 1e3
            print(f"{a:6.3f} {b:5.2f} {ms:13.2f} {100 * (ms - MEASURED_MS) / MEASURED_MS:+7.1f}%")
    q = p.model_copy(update={"gemm": p.gemm.model_copy(update={"shape_curve_from": None})})
    for model in ("sharing", "waves"):
        for label, prof in (("with", p), ("without", q)):
            ms = simulate(G, prof, gpu_model=model).makespan_s * 1e3
            print(f"{model}, {label} the H200 shape curve (alpha 0.189, beta 0): {ms:.2f} ms "
                  f"({100 * (ms - MEASURED_MS) / MEASURED_MS:+.1f}%)")


if __name__ == "__main__":
    main()
