"""Does a torch.profiler session leave the process's launches slower? (issue 39: ``execute --measure-host`` ran
after the profiled iterations and read 13.3 µs per matmul call where the same process had issued at 10.3.)

One process, one GPU: the host µs per ``torch.matmul(a, b, out=c)`` (64×64 fp32) over loops of 200 calls with the
GPU kept busy (as ``executor.calibrate_host._loop_us`` measures ``eager_per_op_us``): before any profiler, then
after a ``torch.profiler.profile(activities=[CPU, CUDA])`` session of 3 such loops, then again 2 s later.
Prints one JSON line.  python3 benchmarks/probes/host/after_profiler.py
"""

import json
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

dev = torch.device("cuda")
a, b, c = (torch.rand(64, 64, device=dev) for _ in range(3))


def loop_us(n: int = 200, reps: int = 9) -> float:
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)
        t0 = time.perf_counter()
        for _ in range(n):
            torch.matmul(a, b, out=c)
        ts.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return round(statistics.median(ts[1:]), 3)


for _ in range(3):
    loop_us(reps=2)
before = loop_us()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
    for _ in range(3):
        loop_us(reps=2)
after = loop_us()
time.sleep(2.0)
later = loop_us()
print(json.dumps({"probe": "profiler_host", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "matmul_call_us_before": before, "after_profiler": after, "after_2s": later}))
