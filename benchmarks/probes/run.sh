#!/usr/bin/env bash
# Device runs of the probes: each runs a probe of this folder (plain PyTorch) and, where it says so, the
# `schedsim execute --compare` cases that check the model rule the probe informs.
#   OUT=dir [VARS...] bash benchmarks/probes/run.sh NAME
# Under each NAME, its comment says what it measures, the variables it reads and how long it runs.
# Every one runs from the repository root on the GPU machine and sources benchmarks/device_env.sh.
AG="--set world_size=1 --set M=16384"  # allgather_mm on one rank

collective_host() {
# Issue 8, held-out tp_allreduce (world 1, 64 layers, eager): which host-cost loop predicts a host-bound layer of
# matmul + all_reduce. Runs benchmarks/probes/host/collective_call.py in PROBES fresh processes (hand-written layer
# loop from an idle GPU, and the calibration's busy- and idle-GPU loops, in the same process), then
# `schedsim execute --compare --measure-host` of the same schedule in EXECS fresh processes. ~15 s a process.
#   OUT=dir [PROBES=6] [EXECS=3] [LAYERS=64] [PROFILE=h200x2] bash benchmarks/probes/run.sh collective_host
set -uo pipefail
OUT=${OUT:-probe_collective_host_out}; PROBES=${PROBES:-6}; EXECS=${EXECS:-3}; LAYERS=${LAYERS:-64}
PROFILE=${PROFILE:-h200x2}; W=/tmp/pch_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh  # multicast off, carried wheels, PYTHONPATH
for rep in $(seq "$PROBES"); do
  python3 -m torch.distributed.run --standalone --nproc-per-node 1 benchmarks/probes/host/collective_call.py \
    --layers "$LAYERS" > "$W/probe$rep.log" 2>&1 || { echo "probe $rep failed"; tail -5 "$W/probe$rep.log"; }
  grep '^PROBE ' "$W/probe$rep.log" | tee -a "$OUT/probe_rows.txt"
done
SETS="--set world_size=1 --set layers=$LAYERS --set launch=eager"
for rep in $(seq "$EXECS"); do
  d=$W/x$rep
  # shellcheck disable=SC2086
  python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute schedules/tp_allreduce_graph.yaml \
    $SETS --no-gantt --compare --measure-host --profile "$PROFILE" --iters 20 --warmup 5 --out "$d" \
    > "$W/x$rep.log" 2>&1 || { echo "execute $rep failed"; tail -5 "$W/x$rep.log"; continue; }
  python3 - "$d" "$rep" <<'PY' | tee -a "$OUT/exec_rows.txt"
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
meta = json.loads((d / "timeline.json").read_text())["meta"]
own = json.loads((d / "predicted" / "timeline.json").read_text())["makespan_s"]
print("EXEC " + json.dumps({"process": int(sys.argv[2]), "measured_ms": meta["makespan_uninstrumented_s"] * 1e3,
                            "own_host_pred_ms": own * 1e3, "host_costs_us": meta["host_costs_us"]}), flush=True)
PY
done
tar czf "$OUT/results.tgz" -C $W . 2>/dev/null
}

collective_after() {
# Issue 39: the host cost of an all_reduce after each kind of predecessor (calibrate's GEMV pair, the tp cases' own
# matmuls, idle or busy GPU, own buffer, events across streams) and the iteration's first matmul after the
# executor's IterationClock.start (benchmarks/probes/host/collective_call.py --after), in PROCS processes of each launch,
# alternating: plain python3 (as calibrate's fresh host processes, with the variable torchrun sets that they inherit)
# and torchrun (as schedsim execute); then EXECS `schedsim execute` processes of tpa_eager and tpffn_tp1 (the
# one-GPU suite's flags, less --profiler; --profile h200, nothing predicted is used) whose stamped iterations
# (meta.host_call_end_s) give the executor's own per-call figures on the same machine; and one plain process with
# PyTorch's NCCL Flight Recorder off (TORCH_NCCL_TRACE_BUFFER_SIZE=0). Pinned as the suite (PIN, default numa:4).
# ~15-25 s a process: ~3-4 min with the defaults.
#   OUT=dir [PROCS=2] [REPS=100] [EXECS=1] [PIN=numa:4] bash benchmarks/probes/run.sh collective_after
set -uo pipefail
OUT=${OUT:-probe_collective_after_out}; PROCS=${PROCS:-2}; REPS=${REPS:-100}; EXECS=${EXECS:-1}; mkdir -p "$OUT"
. benchmarks/device_env.sh  # multicast off, carried wheels, PYTHONPATH
export SCHEDSIM_PIN_CPUS=${PIN:-numa:4}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
P="benchmarks/probes/host/collective_call.py --after"
for i in $(seq "$PROCS"); do
  echo "=== plain $i ($(date -u +%H:%M:%S))"
  TORCH_NCCL_ASYNC_ERROR_HANDLING=1 timeout 45 python3 $P --reps "$REPS" > "$OUT/plain$i.log" 2>&1 \
    || { echo "plain $i failed"; tail -5 "$OUT/plain$i.log"; }
  grep '^PROBE ' "$OUT/plain$i.log" | sed "s/^PROBE /plain$i /" >> "$OUT/probe_rows.txt"
  echo "=== torchrun $i ($(date -u +%H:%M:%S))"
  timeout 45 python3 -m torch.distributed.run --standalone --nproc-per-node 1 $P --reps "$REPS" > "$OUT/torchrun$i.log" \
    2>&1 || { echo "torchrun $i failed"; tail -5 "$OUT/torchrun$i.log"; }
  grep '^PROBE ' "$OUT/torchrun$i.log" | sed "s/^PROBE /torchrun$i /" >> "$OUT/probe_rows.txt"
done
echo "=== plain, Flight Recorder off ($(date -u +%H:%M:%S))"  # PyTorch's NCCL Flight Recorder gathers the caller's
# Python stack on every collective (TORCH_NCCL_TRACE_BUFFER_SIZE, 2000 by default): its share of the call
TORCH_NCCL_TRACE_BUFFER_SIZE=0 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 timeout 45 python3 $P --reps "$REPS" \
  > "$OUT/plain_fr0.log" 2>&1 || { echo "plain_fr0 failed"; tail -5 "$OUT/plain_fr0.log"; }
grep '^PROBE ' "$OUT/plain_fr0.log" | sed "s/^PROBE /plain_fr0 /" >> "$OUT/probe_rows.txt"
python3 - "$OUT/probe_rows.txt" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    tag, _, js = line.partition(" ")
    r = json.loads(js)
    c = r["calibrate"]["collector_on"]
    it = r["iters"]
    print(tag, "calibrate pair", round(c["collective_after_kernel_us"], 2), "first mm after sync / start",
          r["calibrate"]["first_mm_after_sync_us"], r["calibrate"]["first_mm_after_start_us"], "warm-up layers",
          [round(c[f"warmup_layer{k}_us"], 1) for k in (1, 2, 3, 8)], "| loops ar_after:",
          {k: v["ar_after_us"] for k, v in r["pair_loops"].items()}, "| iters ar_after_mm:",
          {k: v["ar_after_mm_us"] for k, v in it.items()}, "| first ar:", {k: v["ar_layers_us"][0] for k, v in it.items()},
          "| first_mm:", {k: v["first_mm_us"] for k, v in it.items()}, "| its set_stream:", it["tpa"]["first_step_us"], "| issue:", {k: v["issue_us"] for k, v in it.items()})
PY
[ "$EXECS" -gt 0 ] && { python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || echo "build_ext failed"; }
for i in $(seq "$EXECS"); do
  for c in "tpa_eager tp_allreduce_graph --set world_size=1 --eager" "tpffn_tp1 tp_ffn --set tp=1"; do
    set -- $c; tag=$1; sched=$2; shift 2
    echo "=== execute $tag $i ($(date -u +%H:%M:%S))"
    timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute "schedules/$sched.yaml" \
      "$@" --no-gantt --compare --profile h200 --iters 20 --warmup 5 --timeout 30 \
      --out "$OUT/x_${tag}_$i" > "$OUT/x_${tag}_$i.log" 2>&1 || { echo "execute $tag failed"; tail -5 "$OUT/x_${tag}_$i.log"; }
    rm -f "$OUT/x_${tag}_$i/trace.json"
    python3 - "$OUT/x_${tag}_$i/timeline.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["meta"]
h = m.get("host_call_end_s") or {"none": 0.0}; ks = list(h); v = list(h.values())
d = [v[0]] + [v[j] - v[j - 1] for j in range(1, len(v))]
print("  per call µs (stamped):", " ".join(f"{k.split('@')[0]}:{x * 1e6:.1f}" for k, x in zip(ks, d)))
print("  lean issue ms:", [round(x * 1e3, 3) for x in m.get("host_issue_uninstrumented_s", [])][:20])
PY
  done
done
echo "=== done ($(date -u +%H:%M:%S))"
}

issuing_thread() {
# Issue 39, branch gpu39aa: execute's iterations issued from a thread of their own (a shallow Python stack, as a
# script's; executor.dist.on_issuing_thread) against main's form (SCHEDSIM_ISSUE_THREAD=0: the CLI's thread, ~26
# frames deep at each collective, where PyTorch's NCCL Flight Recorder gathers the stack), and the hand-written
# reference, in alternating fresh processes under torchrun: tpa_eager, tpffn_tp1 and tpw_eager with the one-GPU
# suite's flags less --compare/--profiler (no calibration). Per round and case: main's form, the thread, the reference
# (the two execute forms swap places every other round). Prints per process the uninstrumented makespan, the lean
# issue time and, from the stamped iterations (meta.host_call_end_s), the first all_reduce call and the median of the
# others; then per case the medians and execute/reference - 1 of each form. Then (DEPTH=1) tpa_eager once more per
# form and the reference with all_reduce wrapped (a sitecustomize on PYTHONPATH): the Python stack's depth at each
# call on NCCL. Then (SMOKE=1) the thread on CUDA's other paths, 3 + 2 iterations each: tpa as a captured CUDA graph,
# small_ops_segment (graph segments beside eager ops), tp_ffn tp=1 with --profiler --check (Kineto maps the ops, the
# check passes). Starts no case past BUDGET s. ~25 s a round and case: ~4.5 min with the defaults.
#   OUT=dir [ROUNDS=3] [BUDGET=180] [DEPTH=1] [SMOKE=1] [PIN=numa:4] bash benchmarks/probes/run.sh issuing_thread
set -uo pipefail
OUT=${OUT:-probe_issuing_thread_out}; ROUNDS=${ROUNDS:-3}; BUDGET=${BUDGET:-180}; mkdir -p "$OUT"
. benchmarks/device_env.sh  # multicast off, carried wheels, PYTHONPATH
export SCHEDSIM_PIN_CPUS=${PIN:-numa:4}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
# execute imports the compiled loop: build it here (a bare machine has none; the suite scripts do the same)
python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || echo "build_ext failed (see $OUT/build.log)"
T0=$(date +%s); ONE="--set world_size=1"
CASES=("tpa_eager|tp_allreduce_graph|$ONE --eager|tp_allreduce.py"
       "tpffn_tp1|tp_ffn|--set tp=1|tp_ffn.py"
       "tpw_eager|tp_allreduce_graph|$ONE --set layers=96 --set input_size=2048 --set output_size=2048 --eager|tp_allreduce.py")
x() {  # x TAG FORM(main|thread) SCHEDULE SETS...: one execute process
  local tag=$1 form=$2 sched=$3; shift 3; local d=$OUT/$tag
  SCHEDSIM_ISSUE_THREAD=$([ "$form" = main ] && echo 0 || echo 1) timeout 90 python3 -m torch.distributed.run \
    --standalone --nproc-per-node 1 -m schedsim execute "schedules/$sched.yaml" "$@" --no-gantt --iters 20 --warmup 5 \
    --timeout 60 --out "$d" > "$d.log" 2>&1 || { echo "$tag FAILED"; tail -3 "$d.log"; }
  rm -f "$d/trace.json"
}
for r in $(seq "$ROUNDS"); do
  for c in "${CASES[@]}"; do
    IFS='|' read -r case sched sets ref <<< "$c"
    [ $(( $(date +%s) - T0 )) -lt "$BUDGET" ] || { echo "budget spent: round $r stops before $case"; break 2; }
    forms="main thread"; [ $((r % 2)) = 0 ] && forms="thread main"
    echo "=== round $r $case ($(date -u +%H:%M:%S)): $forms, reference"
    for f in $forms; do
      # shellcheck disable=SC2086
      x "${case}_${f}_$r" "$f" "$sched" $sets
    done
    # shellcheck disable=SC2086
    timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 1 "benchmarks/accuracy/handwritten/$ref" \
      ${sets/--eager/} --iters 20 --warmup 25 --out "$OUT/${case}_ref_$r.json" > "$OUT/${case}_ref_$r.log" 2>&1 \
      || { echo "${case} ref FAILED"; tail -3 "$OUT/${case}_ref_$r.log"; }
  done
done
python3 - "$OUT" <<'PY' | tee "$OUT/table.txt"
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
def execute(d):
    try:
        m = json.loads((d / "timeline.json").read_text())["meta"]
    except (OSError, ValueError):
        return None
    calls = m.get("host_call_end_s") or {}
    ends = list(calls.values())
    us = {k: (v - (ends[i - 1] if i else 0.0)) * 1e6 for i, (k, v) in enumerate(calls.items())}
    ar = [v for k, v in us.items() if "allreduce" in k]
    issue = [x for x in m.get("host_issue_uninstrumented_s") or [] if x is not None]
    return {"ms": m["makespan_uninstrumented_s"] * 1e3, "issue_ms": issue[0] * 1e3 if issue else float("nan"),
            "ar1_us": ar[0] if ar else float("nan"), "ar_rest_us": statistics.median(ar[1:]) if ar[1:] else float("nan")}
rows = {}
print(f"{'case':10s} {'process':8s} {'makespan ms':>11s} {'lean issue ms':>13s} {'1st all_reduce us':>17s} {'others us':>9s}")
for case in ("tpa_eager", "tpffn_tp1", "tpw_eager"):
    for r in range(1, 99):
        got = {f: execute(out / f"{case}_{f}_{r}") for f in ("main", "thread")}
        try:
            got["ref"] = {"ms": json.loads((out / f"{case}_ref_{r}.json").read_text())["makespan_median_s"] * 1e3}
        except (OSError, ValueError):
            got["ref"] = None
        if all(v is None for v in got.values()):
            break
        for f, v in got.items():
            if v is None:
                print(f"{case:10s} {f}{r:<4d} failed")
                continue
            rows.setdefault((case, f), []).append(v["ms"])
            extra = "" if f == "ref" else f" {v['issue_ms']:13.4f} {v['ar1_us']:17.1f} {v['ar_rest_us']:9.1f}"
            print(f"{case:10s} {f + str(r):8s} {v['ms']:11.4f}{extra}")
print("\nper case, median over processes (ms); execute vs hand-written:")
for case in ("tpa_eager", "tpffn_tp1", "tpw_eager"):
    med = {f: statistics.median(rows[(case, f)]) for f in ("main", "thread", "ref") if rows.get((case, f))}
    if "ref" not in med:
        continue
    txt = "  ".join(f"{f} {v:.4f} ({v / med['ref'] * 100 - 100:+.1f} %)" for f, v in med.items() if f != "ref")
    print(f"{case:10s} ref {med['ref']:.4f}  {txt}  [n={len(rows[(case, 'ref')])}]")
PY
if [ "${DEPTH:-1}" = 1 ]; then  # the Python stack's depth at each all_reduce, on NCCL (cheap runs: 2 + 1 iterations)
  SC=/tmp/issuing_thread_depth; mkdir -p $SC
  cat > $SC/sitecustomize.py <<'PY'
import os
if os.environ.get("DEPTH_OUT"):
    import json, sys, threading
    import torch.distributed as dist
    _orig, _seen = dist.all_reduce, {}
    def all_reduce(*a, **k):
        f, names = sys._getframe(1), []
        while f is not None:
            names.append(f.f_code.co_name)
            f = f.f_back
        key = f"{len(names)} {threading.current_thread().name}: " + " < ".join(names[:8])
        if key not in _seen:
            _seen[key] = 1
            with open(os.environ["DEPTH_OUT"], "w") as fh:
                json.dump(sorted(_seen), fh, indent=0)
        return _orig(*a, **k)
    dist.all_reduce = all_reduce
PY
  for f in main thread; do
    DEPTH_OUT=$OUT/depth_$f.json PYTHONPATH=$SC:$PYTHONPATH SCHEDSIM_ISSUE_THREAD=$([ $f = main ] && echo 0 || echo 1) \
      timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute \
      schedules/tp_allreduce_graph.yaml $ONE --eager --no-gantt --iters 2 --warmup 1 --out "$OUT/depth_x_$f" \
      > "$OUT/depth_x_$f.log" 2>&1 || echo "depth $f FAILED"
  done
  DEPTH_OUT=$OUT/depth_ref.json PYTHONPATH=$SC:$PYTHONPATH timeout 60 python3 -m torch.distributed.run --standalone \
    --nproc-per-node 1 benchmarks/accuracy/handwritten/tp_allreduce.py $ONE --iters 2 --warmup 1 \
    --out "$OUT/depth_ref_run.json" > "$OUT/depth_ref.log" 2>&1 || echo "depth ref FAILED"
  for f in main thread ref; do echo "depth at all_reduce, $f:"; cat "$OUT/depth_$f.json" 2>/dev/null; echo; done \
    | tee "$OUT/depth.txt"
fi
if [ "${SMOKE:-1}" = 1 ]; then  # the thread on CUDA's other paths: a captured graph, graph segments, --profiler --check
  for c in "graph|tp_allreduce_graph|$ONE --cuda-graph" "segments|small_ops_segment|" "prof_check|tp_ffn|--set tp=1 --profiler --check"; do
    IFS='|' read -r tag sched sets <<< "$c"
    # shellcheck disable=SC2086
    timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute "schedules/$sched.yaml" \
      $sets --no-gantt --iters 3 --warmup 2 --timeout 30 --out "$OUT/smoke_$tag" > "$OUT/smoke_$tag.log" 2>&1
    rc=$?
    echo "smoke $tag: exit $rc $(grep -hoE 'check (PASSED|FAILED)|captured [0-9]+ CUDA graph segment' "$OUT/smoke_$tag.log" | head -1)" \
      "$( [ -f "$OUT/smoke_$tag/profiler_ops.json" ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
print('profiler maps', sum(len(v['ops']) for v in d.values()), 'ops')" "$OUT/smoke_$tag/profiler_ops.json")" | tee -a "$OUT/smoke.txt"
    rm -f "$OUT/smoke_$tag/trace.json"
  done
fi
echo "=== done ($(date -u +%H:%M:%S), $(( $(date +%s) - T0 )) s)"
}

coresidence() {
# One GPU, ~3 min: GEMM co-residence on several streams (benchmarks/probes/sm/coresidence.py), then allgather_mm's GEMM pattern
# measured by schedsim execute on one rank (world_size=1, M=16384: the 2-rank run's GEMM shapes), chunks
# 1 2 4 8 16 and chunks 8 with CUDA_DEVICE_MAX_CONNECTIONS=1: cases to replay offline with
# benchmarks/accuracy/replay_runs.py (OUT/<case>/execute/timeline.json).
#   OUT=dir bash benchmarks/probes/run.sh coresidence
set -uo pipefail
OUT=${OUT:-probe_coresidence_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
if [ -d .whl ] && ! $PY -c "import pydantic" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
echo "=== probe ($(date -u +%H:%M:%S))"
timeout 200 $PY benchmarks/probes/sm/coresidence.py ${PROBE_FLAGS:-} --out "$OUT/probe_coresidence.json" || echo "probe FAILED ($?)"
for c in 1 2 4 8 16; do
  echo "=== allgather_mm c$c on one rank ($(date -u +%H:%M:%S))"
  timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute schedules/allgather_mm.yaml \
    --set world_size=1 --set M=16384 --set chunks=$c --no-gantt --profile h200x2 --iters 20 --warmup 5 --timeout 60 \
    --out "$OUT/allgather_mm_x1_c$c/execute" > "$OUT/allgather_mm_x1_c$c.log" 2>&1 || echo "execute c$c FAILED ($?)"
  rm -f "$OUT/allgather_mm_x1_c$c/execute/trace.json"
done
echo "=== allgather_mm c8 conn=1 on one rank ($(date -u +%H:%M:%S))"
CUDA_DEVICE_MAX_CONNECTIONS=1 timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute \
  schedules/allgather_mm.yaml --set world_size=1 --set M=16384 --set chunks=8 --max-connections 1 --no-gantt \
  --profile h200x2 --iters 20 --warmup 5 --timeout 60 --out "$OUT/allgather_mm_x1_c8_conn1/execute" \
  > "$OUT/allgather_mm_x1_c8_conn1.log" 2>&1 || echo "execute conn1 FAILED ($?)"
rm -f "$OUT"/*/execute/trace.json
for f in "$OUT"/*.log; do echo "--- $f"; tail -3 "$f"; done
tar czf "$OUT/runs.tgz" -C "$OUT" $(cd "$OUT" && ls -d allgather_mm_x1_* 2>/dev/null | grep -v '\.log$') && rm -rf "$OUT"/allgather_mm_x1_*/
echo "=== done ($(date -u +%H:%M:%S))"
}

dispatch_order() {
# One GPU, ~4 min: which queued kernel gets the SMs a finishing kernel frees (rule wave-dispatch), in a plain-PyTorch probe
# (benchmarks/probes/sm/dispatch_order.py: Kineto kernel spans of queued GEMMs and adds) and in two GPU-bound
# schedules run by `schedsim execute --compare --measure-host` against the shipped h200 (meta.host_call_end_s:
# when each op's call returned on the host): allgather_mm bf16 chunks 4 and fp16 chunks 8 (one rank),
# matmul_streams bf16 chunks 8 (GPU-bound), small_ops_graph eager T=128 (host-bound). PROFILER=--profiler adds
# Kineto kernel spans (timeline_kernels.json) of two profiled iterations, whose host the profiler slows.
#   OUT=dir bash benchmarks/probes/run.sh dispatch_order
set -uo pipefail
OUT=${OUT:-probe_dispatch_order_out}; W=/tmp/pdo_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=${PROF:-h200}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "=== probe ($(date -u +%H:%M:%S))"
timeout 200 python3 benchmarks/probes/sm/dispatch_order.py --out "$OUT/probe_dispatch_order.json" || echo "probe FAILED"
run ag_bf16_c4 allgather_mm $AG --set dtype=bf16 --set chunks=4 --measure-host ${PROFILER:-}
run ms_bf16_c8 matmul_streams --set dtype=bf16 --set chunks=8 --measure-host ${PROFILER:-}
run ag_fp16_c8 allgather_mm $AG --set dtype=fp16 --set chunks=8 --measure-host
run so_T128 small_ops_graph --eager --set T=128 --measure-host
find $W -name "kineto_rank*.json.gz" -delete
tar czf "$OUT/runs.tgz" -C "$W" .
echo "=== done ($(date -u +%H:%M:%S))"
}

elementwise_host() {
# One GPU, ~5 min: the host cost of a bytes-only compute op (an elementwise torch.add in execute) by kind, then
# held-out host-bound and GPU-bound one-rank cases executed with --measure-host against the shipped h200 (each
# process's own host costs, elementwise_call_us among them, drive its prediction). Keeps OUT/runs.tgz (replay:
# python benchmarks/accuracy/replay_runs.py DIR --profile h200).
#   OUT=dir [CASES="..."] bash benchmarks/probes/run.sh elementwise_host
set -uo pipefail
OUT=${OUT:-probe_elementwise_host_out}; W=/tmp/peh_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "=== probe ($(date -u +%H:%M:%S))"
timeout 200 python3 benchmarks/probes/host/elementwise_call.py --processes 6 --out "$OUT/probe_elementwise_host.json"
CASES=${CASES:-"ag_bf16_c16 ag_bf16_c16_b ms_bf16_c8 ms_bf16_c8_b ag_c16 ms_c16 ag_c4 so_eager"}
for c in $CASES; do
  case $c in
    ag_bf16_c16*) run "$c" allgather_mm $AG --set dtype=bf16 --set chunks=16 --measure-host ;;
    ms_bf16_c8*) run "$c" matmul_streams --set dtype=bf16 --set chunks=8 --measure-host ;;
    ag_c*) run "$c" allgather_mm $AG --set chunks=${c#ag_c} --measure-host ;;
    ms_c*) run "$c" matmul_streams --set chunks=${c#ms_c} --measure-host ;;
    so_eager) run so_eager small_ops_graph --eager --measure-host ;;
  esac
done
tar czf "$OUT/runs.tgz" -C $W . 2>/dev/null
echo "=== done ($(date -u +%H:%M:%S))"
}

first_calls() {
# One GPU, ~3 min: what the first calls of an iteration cost the host (meta.host_call_end_s of `schedsim
# execute`, against the model's rule host-issue with the process's own host costs), by collective size and by whether
# the iteration is GPU-bound (the host waits for the GPU at its end) or host-bound: tp_allreduce world 1 with
# 8 and 8192 tokens (all_reduce of 64 KB and 64 MB), allgather_mm world 1 bf16 chunks 4 at M=K=N=1024 (512 KB
# all_gathers, host-bound) beside the GPU-bound M=16384 runs of benchmarks/accuracy/heldout.sh new_shapes SET=f.
#   OUT=dir bash benchmarks/probes/run.sh first_calls
set -uo pipefail
OUT=${OUT:-probe_first_calls_out}; W=/tmp/pfc_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
PROF=${PROF:-h200}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
run tp_ar_t8 tp_allreduce_graph --set world_size=1 --set layers=16 --set tokens=8 --eager --measure-host
run tp_ar_t8192 tp_allreduce_graph --set world_size=1 --set layers=4 --set tokens=8192 --eager --measure-host
run ag_tiny_c4 allgather_mm --set world_size=1 --set M=1024 --set K=1024 --set N=1024 --set dtype=bf16 \
  --set chunks=4 --measure-host
tar czf "$OUT/runs.tgz" -C "$W" .
echo "=== done ($(date -u +%H:%M:%S))"
}

graph_events() {
# Issue 8, per-op error of CUDA-graph cases: what the instrumented graph's timing events add to each op
# (benchmarks/probes/graph/timing_events.py, PROBES fresh processes), then `schedsim execute --cuda-graph --compare` of
# small_ops_graph and of tp_allreduce_graph at world 1 (EXECS processes each), whose timelines (per-op spans of
# the instrumented graph, uninstrumented makespan) the model is then checked against. ~2 min on one H200.
#   OUT=dir [PROBES=3] [EXECS=2] [PROFILE=h200x2] bash benchmarks/probes/run.sh graph_events
set -uo pipefail
OUT=${OUT:-probe_graph_events_out}; PROBES=${PROBES:-3}; EXECS=${EXECS:-2}; PROFILE=${PROFILE:-h200x2}
W=/tmp/pge_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh  # multicast off, carried wheels, PYTHONPATH
for rep in $(seq "$PROBES"); do
  python3 benchmarks/probes/graph/timing_events.py > "$W/probe$rep.log" 2>&1 || { echo "probe $rep failed"; tail -5 "$W/probe$rep.log"; }
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
}

host_bound() {
# Sub-millisecond 2-rank cases (tp_allreduce eager, tp_ffn tp=2) measured three ways in one device call, to tell
# GPU-side slowness after the aligned start from host issue cost: (1) as benchmarks/accuracy/two_gpu_suite.sh does
# (2 ms start margin), (2) with SCHEDSIM_START_MARGIN_S=0, (3) `execute --profiler` (Kineto kernel times).
# Also the one-off 1F1B p=2 `execute --profiler` + `analyze` run of issue 13. ~4 min on 2xH200.
#   OUT=dir bash benchmarks/probes/run.sh host_bound
set -uo pipefail
OUT=${OUT:-probe_host_bound_out}; mkdir -p "$OUT"; FINAL=$OUT; OUT=/tmp/hb_stage; rm -rf $OUT; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
if [ -d .whl ] && ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
for margin in 0.002 0; do
  SCHEDSIM_START_MARGIN_S=$margin PART=1 PROFILE=h200x2 CASES="tp_allreduce_eager tp_ffn_tp2" \
    OUT=/tmp/hb_$margin WORK=/tmp/hbw_$margin bash benchmarks/accuracy/two_gpu_suite.sh > "$OUT/log_margin_$margin.txt" 2>&1
  cp /tmp/hb_$margin/summary.csv "$OUT/summary_margin_$margin.csv" 2>/dev/null
  tar czf "$OUT/work_margin_$margin.tgz" -C /tmp/hbw_$margin --exclude='*.png' . 2>/dev/null
done
tr() { python3 -m torch.distributed.run --standalone --nproc-per-node 2 "$@"; }
tr -m schedsim execute schedules/tp_allreduce_graph.yaml --eager --profiler --no-gantt --profile h200x2 \
  --out /tmp/prof_tpa > "$OUT/log_prof_tpa.txt" 2>&1
python3 -m schedsim analyze /tmp/prof_tpa/kineto_rank*.json.gz > "$OUT/analyze_tpa.txt" 2>&1
tr -m schedsim execute tests/data/pp_unit.yaml --set p=2 --set m=4 --profiler --no-gantt --out /tmp/pp \
  > "$OUT/log_pp.txt" 2>&1
python3 -m schedsim analyze /tmp/pp/kineto_rank*.json.gz --charts /tmp/pp/charts > "$OUT/analyze_pp.txt" 2>&1
tar czf "$OUT/profiler.tgz" -C /tmp prof_tpa pp 2>/dev/null
cp "$OUT"/summary_margin_*.csv "$OUT/analyze_tpa.txt" "$FINAL/"; tar czf "$FINAL/all.tgz" -C "$OUT" .
ls -la "$FINAL"; cat "$OUT"/summary_margin_*.csv; tail -30 "$OUT/analyze_tpa.txt"; tail -5 "$OUT/log_pp.txt" "$OUT/analyze_pp.txt"
}

host_calls() {
# Follow-up probes of the 2xH200 accuracy pass (one GPU, plain PyTorch, ~1 min): host cost of set_stream vs
# `with torch.cuda.stream`, a mixed small_ops-like sequence vs looped calls, fp32 GEMM co-residence on 1/2/8
# streams, and a Kineto trace of that GEMM (grid, registers, shared memory). See benchmarks/probes/host/call_patterns.py.
#   bash benchmarks/probes/run.sh host_calls      # writes OUT (default probe_host_calls.json) and KINETO
set -euo pipefail
export NCCL_NVLS_ENABLE=0
${PYTHON:-python3} benchmarks/probes/host/call_patterns.py --out "${OUT:-probe_host_calls.json}" \
  --kineto "${KINETO:-probe_host_calls_kineto.json}"
}

host_same_process() {
# Does the model predict each process right once it knows that process's host speed? (issue 8, host-bound
# cases.) Runs small_ops eager in REPS fresh processes, each `schedsim execute --compare --measure-host`:
# the comparison predicts with the profile's host costs replaced by those measured in the same process after
# its timed iterations. Prints, per process, the uninstrumented makespan, the prediction with its own host
# costs and with the profile's, and the measured matmul launch cost. ~25 s per process on one H200.
#   OUT=dir REPS=6 [PROFILE=h200x2] [SCHEDULE=small_ops_graph] [XFLAGS=--eager] [SETS="--set k=v ..."] \
#     [TAG=name] bash benchmarks/probes/run.sh host_same_process
set -uo pipefail
OUT=${OUT:-probe_host_same_process_out}; REPS=${REPS:-6}; PROFILE=${PROFILE:-h200x2}; W=/tmp/hsp_work
SCHEDULE=${SCHEDULE:-small_ops_graph}; XFLAGS=${XFLAGS:---eager}; SETS=${SETS:-}; TAG=${TAG:-$SCHEDULE}
W=$W/$TAG; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh  # multicast off, carried wheels, PYTHONPATH
for rep in $(seq "$REPS"); do
  d=$W/p$rep
  # shellcheck disable=SC2086
  python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute "schedules/$SCHEDULE.yaml" \
    $SETS $XFLAGS --no-gantt --compare --measure-host --profile "$PROFILE" --iters 20 --warmup 5 --out "$d" \
    > "$W/p$rep.log" 2>&1 || { echo "process $rep failed"; tail -5 "$W/p$rep.log"; continue; }
  # shellcheck disable=SC2086
  python3 -m schedsim predict "schedules/$SCHEDULE.yaml" $SETS --profile "$PROFILE" --no-gantt --out "$d/plain" \
    ${XFLAGS/--eager/} > /dev/null 2>&1
  python3 - "$d" "$rep" "$TAG" <<'PY' | tee -a "$OUT/rows.txt"
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
meta = json.loads((d / "timeline.json").read_text())["meta"]
own = json.loads((d / "predicted" / "timeline.json").read_text())["makespan_s"]
plain = json.loads((d / "plain" / "timeline.json").read_text())["makespan_s"]
m = meta["makespan_uninstrumented_s"]
h = meta["host_costs_us"]
print(f"ROW case={sys.argv[3]} process={sys.argv[2]} measured_ms={m*1e3:.4f} own_host_pred_ms={own*1e3:.4f} "
      f"own_err_pct={(own/m-1)*100:+.1f} profile_pred_ms={plain*1e3:.4f} profile_err_pct={(plain/m-1)*100:+.1f} "
      f"matmul_call_us={h['eager_per_op_us']:.2f} event_wait_us={h.get('event_wait_us', float('nan')):.2f} "
      f"switch_us={h.get('stream_switch_us', float('nan')):.2f}", flush=True)
PY
done
tar czf "$OUT/results_$TAG.tgz" -C $W . 2>/dev/null
}

host_spread() {
# Run-to-run spread of a host-bound one-GPU case (issue 8 / 15: small_ops eager moved 1.9–3.4 ms between runs).
# Alternates `schedsim execute` (uninstrumented makespan) and the hand-written reference in fresh processes,
# REPS times per placement: unpinned, and pinned to one core of the GPU's NUMA node (taskset). Prints each
# process's median and the spread, plus the host's CPU facts. ~3 min on one H200.
#   OUT=dir REPS=4 [PINS='none core'] [LAUNCHES='eager graph'] bash benchmarks/probes/run.sh host_spread
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
      "${P[@]}" python3 -m torch.distributed.run --standalone --nproc-per-node 1 benchmarks/accuracy/handwritten/small_ops.py \
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
}

l2_residency() {
# Operands in L2 or from HBM (issue 8): benchmarks/probes/memory/l2_residency.py, then a calibration on this GPU and
# `schedsim execute --compare --cuda-graph` of small_ops_graph at five T x H shapes and tp_allreduce_graph at world
# 1 (1024 and 2048 wide; the 2048-wide one eagerly too), each timeline kept for replay on CPU. ~9 min, one H200.
# PROBE=0 skips the probe.
#   OUT=dir [PROBE=0] [GEMMS="--gemm MxNxK ..."] [CASES="schedule|flags|tag;..."] bash benchmarks/probes/run.sh l2_residency
set -uo pipefail
OUT=${OUT:-l2_out}; W=/tmp/l2_work; rm -rf $W; mkdir -p "$OUT" $W
. benchmarks/device_env.sh
[ -f schedsim/sim/_cwaves.c ] && python3 setup.py build_ext --inplace -q > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${PROBE:-1}" = 1 ]; then
  timeout 150 python3 benchmarks/probes/memory/l2_residency.py > "$OUT/probe.log" 2>&1 || echo "probe rc $?"
  grep -E "^L2_(BYTES|SWEEP|LAYERS)" "$OUT/probe.log" | cut -c1-400
fi
PROF=$W/h200x1_calibrated.yaml
timeout 240 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim calibrate --no-grid \
  --dtypes fp32,bf16 --iters 10 --max-bytes 67108864 --factor 4 --gemm 1x1024x1024 --gemm 1x2048x1024 \
  --gemm 1x2048x2048 --gemm 32x1024x1024 --gemm 16x512x512 --gemm 64x2048x2048 --gemm 8x256x256 \
  --gemm 16x2048x2048 ${GEMMS:-} --host-processes 1 schedules/small_ops_graph.yaml \
  --name h200x1_calibrated --base h200 --out "$PROF" > $W/calibrate.log 2>&1 || { echo "calibrate failed"; tail -20 $W/calibrate.log; }
cp "$PROF" "${PROF%.yaml}.json" $W/calibrate.log "$OUT/" 2>/dev/null
[ -f "$PROF" ] || PROF=h200x2
S=small_ops_graph; TP=tp_allreduce_graph
G="--cuda-graph"; TPG="--set launch=cuda_graph --cuda-graph"
CASES=${CASES:-"$S|--set T=16 --set H=512 --set layers=128 $G|so_16x512;$S|$G|so_32x1024;$S|--set T=64 --set H=2048 $G|so_64x2048;$S|--set T=8 --set H=256 --set layers=128 $G|so_8x256;$S|--set T=16 --set H=2048 $G|so_16x2048;$TP|--set world_size=1 --set layers=64 $TPG|tp_1024;$TP|--set world_size=1 --set layers=96 --set input_size=2048 --set output_size=2048 $TPG|tp_2048;$TP|--set world_size=1 --set layers=96 --set input_size=2048 --set output_size=2048 --set launch=eager --measure-host|tp_2048_eager"}
IFS=';' read -r -a CASELIST <<< "$CASES"
for case in "${CASELIST[@]}"; do
  IFS='|' read -r sched sets tag <<< "$case"
  d=$W/$tag
  # shellcheck disable=SC2086
  timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute "schedules/$sched.yaml" \
    $sets --no-gantt --compare --profile "$PROF" --iters 20 --warmup 5 --out "$d" \
    > "$d.log" 2>&1 || { echo "$tag failed"; tail -5 "$d.log"; }
  grep -E "without per-op|per-op duration" "$d.log" | sed "s/^/$tag: /"
done
tar czf "$OUT/cases.tgz" -C $W . 2>/dev/null
}

post_start() {
# Kernel and all_reduce spans vs time since the executor's aligned start, on 2 ranks (~30 s on 2xH200; runs on
# CPU/gloo as a smoke test). See benchmarks/probes/gpu_state/after_aligned_start.py and [evidence: accuracy-h200] ("Host-bound cases").
#   bash benchmarks/probes/run.sh post_start      # writes OUT (default probe_post_start.json)
set -euo pipefail
export NCCL_NVLS_ENABLE=0
export PYTHONPATH="${PYTHONPATH:-$PWD}"
${TORCHRUN:-torchrun} --standalone --nproc_per_node 2 benchmarks/probes/gpu_state/after_aligned_start.py --out "${OUT:-probe_post_start.json}" "$@"
}

scenarios_peer_wait() {
# Assumption (1) of the waves model: an NCCL kernel waiting for a slower peer does not hold its SMs.
# Needs 2 GPUs. Output: OUT (default peer_wait.json, rank 0) and a printed table.
set -euo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
torchrun --nproc-per-node 2 benchmarks/probes/sm/nccl_peer_wait.py --out "${OUT:-peer_wait.json}" "$@"
}

stream_dispatch() {
# One GPU, ~3 min: how the GPU dispatches kernels queued on several streams (issue 8, rule wave-dispatch). allgather_mm on
# one rank (world_size=1, M=16384: the 2-rank run's GEMM shapes, fp32, one wave of 128 CTAs per GEMM on an
# H200) at chunks 4, 8, 16 and 8 with CUDA_DEVICE_MAX_CONNECTIONS=1, and matmul_streams at chunks 8, each under
# `schedsim execute --compare --profiler` with the shipped h200: event spans (timeline.json), the GPU's own
# kernel start/end (Kineto: timeline_kernels.json, profiler_ops.json) and the prediction, to replay offline with
# benchmarks/accuracy/replay_runs.py and to read which queued kernel the GPU starts when SMs free up.
# CASES may add so_graph / so_eager: small_ops_graph as a CUDA graph and eagerly (--measure-host).
#   OUT=dir [PROFILE=h200] [CASES="c4 c8 c16 c8conn1 ms8"] bash benchmarks/probes/run.sh stream_dispatch
set -uo pipefail
OUT=${OUT:-probe_stream_dispatch_out}; PROFILE=${PROFILE:-h200}; mkdir -p "$OUT"
. benchmarks/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
CASES=${CASES:-"c4 c8 c16 c8conn1 ms8"}
run() {  # run TAG ENV SCHEDULE ARGS...
  local tag=$1 envset=$2 sched=$3; shift 3
  echo "=== $tag ($(date -u +%H:%M:%S))"
  env $envset timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute \
    "schedules/$sched.yaml" "$@" --no-gantt --compare --profiler --profile "$PROFILE" --iters 20 --warmup 5 \
    --timeout 60 --out "$OUT/$tag" > "$OUT/$tag.log" 2>&1 || echo "$tag FAILED ($?)"
  grep -E "without per-op|per-op duration" "$OUT/$tag.log"
  rm -f "$OUT/$tag/trace.json"
}
AG="--set world_size=1 --set M=16384"
for c in $CASES; do
  case $c in
    c4|c8|c16) run "ag_$c" "" allgather_mm $AG --set chunks=${c#c} ;;
    c8conn1) run ag_c8conn1 CUDA_DEVICE_MAX_CONNECTIONS=1 allgather_mm $AG --set chunks=8 --max-connections 1 ;;
    ms8) run ms_c8 "" matmul_streams --set chunks=8 ;;
    so_graph) run small_ops_graph "" small_ops_graph --cuda-graph ;;  # its act/join: bytes-only compute ops
    so_eager) run small_ops_eager "" small_ops_graph --eager --measure-host ;;
  esac
done
find "$OUT" -name 'kineto_rank*.json.gz' -size +20M -delete
tar czf "$OUT/runs.tgz" -C "$OUT" $(cd "$OUT" && ls -d */) && rm -rf "$OUT"/*/
echo "=== done ($(date -u +%H:%M:%S))"
}

case "${1:-}" in
  collective_after|collective_host|coresidence|dispatch_order|elementwise_host|first_calls|graph_events|host_bound|host_calls|host_same_process|host_spread|issuing_thread|l2_residency|post_start|scenarios_peer_wait|stream_dispatch) name=$1; shift; "$name" "$@" ;;
  *) echo "usage: [VAR=...] bash benchmarks/probes/run.sh NAME [ARGS...]; NAME is one of: collective_after collective_host coresidence dispatch_order elementwise_host first_calls graph_events host_bound host_calls host_same_process host_spread issuing_thread l2_residency post_start scenarios_peer_wait stream_dispatch" >&2; exit 2 ;;
esac
