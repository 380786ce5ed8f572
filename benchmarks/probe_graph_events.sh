#!/usr/bin/env bash
# Issue 8, per-op error of CUDA-graph cases: what the instrumented graph's timing events add to each op
# (benchmarks/probe_graph_events.py, PROBES fresh processes), then `schedsim execute --cuda-graph --compare` of
# small_ops_graph and of tp_allreduce_graph at world 1 (EXECS processes each), whose timelines (per-op spans of
# the instrumented graph, uninstrumented makespan) the model is then checked against. ~2 min on one H200.
#   OUT=dir [PROBES=3] [EXECS=2] [PROFILE=h200x2] bash benchmarks/probe_graph_events.sh
set -uo pipefail
OUT=${OUT:-probe_graph_events_out}; PROBES=${PROBES:-3}; EXECS=${EXECS:-2}; PROFILE=${PROFILE:-h200x2}
W=/tmp/pge_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh  # multicast off, carried wheels, PYTHONPATH
for rep in $(seq "$PROBES"); do
  python3 benchmarks/probe_graph_events.py > "$W/probe$rep.log" 2>&1 || { echo "probe $rep failed"; tail -5 "$W/probe$rep.log"; }
  grep '^GRAPH_EVENTS ' "$W/probe$rep.log" | tee -a "$OUT/probe_rows.txt"
done
for case in "small_ops_graph:" "tp_allreduce_graph:--set world_size=1 --set layers=64 --set launch=cuda_graph"; do
  sched=${case%%:*}; sets=${case#*:}
  for rep in $(seq "$EXECS"); do
    d=$W/$sched/x$rep; mkdir -p "$W/$sched"
    # shellcheck disable=SC2086
    python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute "schedules/$sched.yaml" $sets \
      --cuda-graph --no-gantt --compare --profile "$PROFILE" --iters 20 --warmup 5 --out "$d" > "$d.log" 2>&1 \
      || { echo "$sched $rep failed"; tail -5 "$d.log"; continue; }
    grep -E "makespan|per-op|median" "$d.log" | head -6 | sed "s/^/$sched $rep: /"
  done
done
tar czf "$OUT/results.tgz" -C $W . 2>/dev/null
