"""Does the way the host waits for the GPU set what its first calls cost after the wait? (issue 39: calibrate's
``cold_first_call_us`` read kernel +94 µs and +35 µs on two H100 machines, where ``schedsim execute``'s first
matmul of a GPU-bound iteration on the same machines paid about +12 µs over its steady call.)

One process, one GPU. ``schedsim calibrate`` waits for a sleep kernel with ``torch.cuda.synchronize()``
(``executor.calibrate_host._first_call_times``); ``schedsim execute`` and the hand-written references spin on
``Event.query()`` (``executor.clock.wait_events``). For each wait (``sync`` / ``spin``) and sleep length (about
0.35 and 2 ms), interleaved rep by rep: the host µs of the first ``torch.add`` and the ``torch.matmul`` after it
(64×64 fp32) right after the wait, against the same two calls after a plain synchronize without a sleep (warm).
Prints one JSON line of medians (µs).  python3 benchmarks/probes/host/cold_wait.py
"""

import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from executor.clock import wait_events  # noqa: E402

dev = torch.device("cuda")
a, b, c = (torch.rand(64, 64, device=dev) for _ in range(3))
x, y, z = (torch.rand(1024, device=dev) for _ in range(3))


def calls() -> tuple[float, float]:
    t0 = time.perf_counter()
    torch.add(x, y, out=z)
    t1 = time.perf_counter()
    torch.matmul(a, b, out=c)
    t2 = time.perf_counter()
    return (t1 - t0) * 1e6, (t2 - t1) * 1e6


def first_calls(wait: str, cycles: int) -> tuple[float, float]:
    torch.cuda.synchronize()
    if cycles:
        torch.cuda._sleep(cycles)
        if wait == "sync":
            torch.cuda.synchronize()
        else:
            ev = torch.cuda.Event()
            ev.record()
            wait_events([ev], how="spin")
    got = calls()
    torch.cuda.synchronize()
    return got


for _ in range(20):  # warm-up
    first_calls("sync", 0)
res: dict[str, list[tuple[float, float]]] = {}
for _ in range(25):
    for key, wait, cycles in [("warm", "sync", 0), ("sync_0.35ms", "sync", 700_000), ("spin_0.35ms", "spin", 700_000),
                              ("sync_2ms", "sync", 4_000_000), ("spin_2ms", "spin", 4_000_000)]:
        res.setdefault(key, []).append(first_calls(wait, cycles))
out = {"probe": "cold_wait", "device": torch.cuda.get_device_name(), "torch": torch.__version__}
for key, v in res.items():
    out[key] = {"add_us": round(statistics.median(t[0] for t in v), 2),
                "matmul_us": round(statistics.median(t[1] for t in v), 2)}
print(json.dumps(out))
