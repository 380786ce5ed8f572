# ruff: noqa  (seed 004's script, kept as written)
import json
import re
import os
import sys
import numpy as np

with open(sys.argv[1], "r") as f:
    traceEvents = json.load(f)
traceEventsPerDevice = {}
for event in traceEvents:
    pid = event["pid"]
    if pid not in traceEventsPerDevice:
        traceEventsPerDevice[pid] = []
    if event["cat"] == "cuda":
        epoch_str = event["args"]['NVTXRegions'][0]
        if event["name"] == "Kernel":
            event["name"] = epoch_str.split(",")[0]
        traceEventsPerDevice[pid].append((event["name"] + "_" + event["tid"], event["ts"], event["dur"]))
for k, v in traceEventsPerDevice.items():
    v.sort(key=lambda x: x[1], reverse=False)
for device, v in traceEventsPerDevice.items():
    print(f"-----------------------------{device}-----------------------------")
    totalDurPerKernel = {}
    durPerKernel = {}
    marginPerKernel = {"beg": float('inf'), "end": 0}
    for ev in v:
        name, ts, dur = ev
        if name not in totalDurPerKernel:
            totalDurPerKernel[name] = 0
            durPerKernel[name] = []
        totalDurPerKernel[name] += dur
        durPerKernel[name].append(dur)
        marginPerKernel["beg"] = min(marginPerKernel["beg"], ts)
        marginPerKernel["end"] = max(marginPerKernel["end"], ts)
    total_percent = 0
    total_dur = marginPerKernel["end"] - marginPerKernel["beg"]
    for name, dur in sorted(totalDurPerKernel.items(), key=lambda d: d[1], reverse=True):
        total_percent += (dur / total_dur)
        print(f"{dur / total_dur:7.2f} min:{np.min(durPerKernel[name]):10.2f} max:{np.max(durPerKernel[name]):10.2f} avg:{np.mean(durPerKernel[name]):10.2f} {name}")
    print(f"{total_percent:7.2f}")
