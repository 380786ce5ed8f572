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
    name = event['name']
    if event["cat"] == "nvtx-kernel" and name.startswith("nccl"):
        op_name = name.split(",")[0]
        match = re.match(".*sizes = (.*?), input_op_ids", name)
        data = eval("np.ones({})".format(match.group(1).replace('[', "(").replace("]", ")")))
        # print(op_name,data.shape,data.size)
        traceEventsPerDevice[pid].append((op_name, data.size))
for k, v in traceEventsPerDevice.items():
    v.sort(key=lambda x: x[1], reverse=False)
for device, v in traceEventsPerDevice.items():
    print(f"-----------------------------{device}-----------------------------")
    totalDurPerKernel = {}
    for ev in v:
        name, size = ev
        if name not in totalDurPerKernel:
            totalDurPerKernel[name] = 0
        totalDurPerKernel[name] += size
    for name, size in sorted(totalDurPerKernel.items(), key=lambda d: d[1], reverse=True):
        print(f"{size:14.2f} {name}")
