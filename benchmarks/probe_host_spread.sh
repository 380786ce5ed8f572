#!/usr/bin/env bash
# Run-to-run spread of a host-bound one-GPU case (issue 8 / 15: small_ops eager moved 1.9–3.4 ms between runs).
# Alternates `schedsim execute` (uninstrumented makespan) and the hand-written reference in fresh processes,
# REPS times per placement: unpinned, and pinned to one core of the GPU's NUMA node (taskset). Prints each
# process's median and the spread, plus the host's CPU facts. ~3 min on one H200.
#   OUT=dir REPS=4 [PINS='none core'] [LAUNCHES='eager graph'] bash benchmarks/probe_host_spread.sh
set -uo pipefail
OUT=${OUT:-probe_host_spread_out}; REPS=${REPS:-4}; W=/tmp/hs_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh  # multicast off, carried wheels, PYTHONPATH
{
lscpu | grep -E "Model name|^CPU\(s\)|NUMA|MHz|Thread"
cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo "no cpufreq governor visible"
nvidia-smi topo -m 2>/dev/null | head -5
} > "$OUT/host.txt" 2>&1
cat "$OUT/host.txt"
AFF=$(nvidia-smi topo -m 2>/dev/null | awk '/^GPU0/{for(i=1;i<=NF;i++) if($i ~ /^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$/ && i>2){print $i; exit}}')
CORE=${AFF%%[-,]*}; CORE=$((CORE + 2))
echo "GPU0 CPU affinity: ${AFF:-?}; pinned runs use core $CORE"
tr1() { python3 -m torch.distributed.run --standalone --nproc-per-node 1 "$@"; }
for rep in $(seq "$REPS"); do
  for pin in ${PINS:-none core}; do
    P=(); [ "$pin" = core ] && P=(taskset -c "$CORE")
    for launch in ${LAUNCHES:-eager graph}; do
      xf="--eager"; rf=""; [ "$launch" = graph ] && { xf="--cuda-graph"; rf="--graph"; }
      d=$W/${launch}_${pin}_$rep; mkdir -p "$d"
      "${P[@]}" python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute \
        schedules/small_ops_graph.yaml $xf --no-gantt --profile h200x2 --iters ${ITERS:-20} --warmup 5 \
        --out "$d/execute" > "$d/exec.log" 2>&1 || echo "execute failed $d"
      "${P[@]}" python3 -m torch.distributed.run --standalone --nproc-per-node 1 benchmarks/handwritten/small_ops.py \
        $rf --iters ${ITERS:-20} --warmup 25 --out "$d/ref.json" > "$d/ref.log" 2>&1 || echo "ref failed $d"
      python3 - "$d" "$launch" "$pin" "$rep" <<'PY'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
def get(f, k):
    try:
        j = json.loads(f.read_text()); return (j.get("meta", j)).get(k)
    except Exception: return None
x = get(d / "execute" / "timeline.json", "makespan_uninstrumented_s")
r = get(d / "ref.json", "makespan_median_s")
f = lambda v: "nan" if v is None else f"{v*1e3:.4f}"
print(f"ROW {sys.argv[2]} pin={sys.argv[3]} rep={sys.argv[4]} execute_ms={f(x)} ref_ms={f(r)}", flush=True)
PY
    done
  done
done 2>&1 | tee "$OUT/rows.txt"
python3 - "$OUT/rows.txt" <<'PY'
import re, statistics, sys
rows = [dict(kv.split("=") for kv in l.split()[2:]) | {"launch": l.split()[1]} for l in open(sys.argv[1]) if l.startswith("ROW")]
for launch in ("eager", "graph"):
    for pin in ("none", "core"):
        for side in ("execute_ms", "ref_ms"):
            v = [float(r[side]) for r in rows if r["launch"] == launch and r["pin"] == pin and r[side] != "nan"]
            if v:
                print(f"{launch:5s} pin={pin:4s} {side:10s} n={len(v)} median={statistics.median(v):.4f} "
                      f"min={min(v):.4f} max={max(v):.4f} spread={(max(v)-min(v))/statistics.median(v)*100:.1f}%")
PY
tar czf "$OUT/work.tgz" -C $W --exclude='trace.json' . 2>/dev/null; ls -la "$OUT"
