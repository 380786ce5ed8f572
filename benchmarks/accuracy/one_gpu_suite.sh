#!/usr/bin/env bash
# The one-GPU accuracy suite (issue 39), one device call (< 600 s) on any one-GPU kind: calibrate this GPU, then
# for every case `schedsim execute --compare --profiler` with that profile (the Kineto iterations give each op's
# kernel span, docs/metrics_spans.md) and, where one exists, its hand-written PyTorch reference
# (benchmarks/accuracy/handwritten/, timed by the same clock); host-bound eager cases once more with --measure-host (the
# process's own host costs against calibrate's; that process and a second reference process are the case's rep2/,
# and the case's makespans are the medians over its processes). Then OUT/summary.{csv,md} (benchmarks/accuracy/suite_summary.py)
# and OUT/runs.tgz (every case's timelines, compare.json, profiler_ops.json: replayed offline by
# python3 benchmarks/accuracy/replay_runs.py RUN --profile RUN/calibrated.yaml).
#   OUT=dir [BUDGET=540] [CASES="name ..."] [WAIT_AB=1|2] [PROFILE=calibrated.yaml] [PROCS=4] [WORK=/tmp/one_gpu_work]
#   bash benchmarks/accuracy/one_gpu_suite.sh          (WORK: the scratch folder, emptied first; runs.tgz is made of it)
# PROCS (default 4): a host-bound case (procs below) runs PROCS execute and PROCS reference processes in all,
# alternated (rep<N>/ past the first two: no --compare, --profiler or --measure-host; the --measure-host process of an
# mh case is its second, so PROCS=1 runs none: one execute and one reference process); the summary gives the median
# over processes, their min and max, and how many the drift warning flagged and ran in the slow mode (one H100 machine's
# processes ran 1.5-2x apart, per process: docs/validation.md, "the host-bound process spread").
# CAL_GEMMS: calibrate's shape arguments (default: every case's); HOST_PROCESSES: its --host-processes (3).
# PROFILE: skip calibration (a profile this kind calibrated earlier) and measure only the power onset
# (OUT/runs.tgz: power.json). benchmarks/probes/host/call_patterns.py --only after_profiler runs first (OUT/runs.tgz: probe_profiler_host.json).
# Cases (shipped one-GPU cases first, then held out; ref = hand-written reference):
#   chain2        gemm_chain 2 x 4096^3 bf16 (benchmarks/data/gemm_chain.yaml)          ref
#   so_eager      small_ops_graph eager                                                 ref, --measure-host, procs
#   so_graph      small_ops_graph cuda_graph                                            ref
#   tpa_eager     tp_allreduce_graph world 1 eager                                      ref, --measure-host, procs
#   tpa_graph     tp_allreduce_graph world 1 cuda_graph                                 ref
#   offload       offload                                                               ref
#   ag_c1/c4/c8   allgather_mm world 1 M=16384, chunks 1 / 4 / 8 (fp32)                 ref
#   ms_c4         matmul_streams (fp32 chunks 4)
#   tpffn_tp1     tp_ffn tp=1                                                           ref, procs
#   held out: chain8_2k (gemm_chain 8 x 2048^3 bf16, ref), so_T64 (small_ops eager T=64, ref, --measure-host, procs),
#             tpw_eager (tp_allreduce world 1 eager, 96 layers of 2048x2048, ref, --measure-host, procs),
#             ms_bf16_c16 (matmul_streams bf16 chunks 16), ag_bf16_c4 (allgather_mm world 1 bf16 chunks 4, ref),
#             so_seg (schedules/small_ops_segment.yaml: half its layers one CUDA graph segment on two streams beside
#             eager ops; ref: small_ops.py --segment), gbn_w1 (graph_beside_nccl world 1: a one-stream graph
#             relaunched per layer beside eager all_reduce calls; ref: tp_allreduce.py --beside-nccl); both run the
#             executor's CudaSegmentRunner
# WAIT_AB=1 (default) also runs chain2 with SCHEDSIM_WAIT=sleep (the executor's former wait) as chain2_sleep; 2 also
# ag_c8 as ag_c8_sleep.
# PIN (default numa:4): every process of the suite (calibrate and its host processes, execute, the references) runs
# with SCHEDSIM_PIN_CPUS=$PIN, its threads pinned to 4 of the GPU's NUMA-local cores (executor/dist.py, pinned_cpus);
# PIN=off leaves placement to the OS. SCHEDSIM_PIN_ISSUER=1 in the caller's environment reaches every process: the
# issuing thread alone on the last pinned core for the timed iterations (executor/dist.py, issuer_alone). SPREAD=N first runs the hand-written tpw_eager and so_T64 references N times
# each unpinned and N times pinned, alternating (OUT/spread.json: each process's makespan, the topology read).
# AB=N: instead of the cases' runs, N processes of `benchmarks/accuracy/handwritten/harness.py ab` per case with a
# reference (the executor's uninstrumented loop and the reference's in one process, timed in alternating blocks: a
# process's host mode is in both sides), no calibration, benchmarks/probes/host/collective_call.py once
# (OUT/collective_call.json); then OUT/ab.md and OUT/ab.json (suite_summary.py ab). BLOCKS (default 6): its --blocks.
# WHATIF=1 first runs benchmarks/accuracy/whatif_connections.py (spin and copy side work, CUDA_DEVICE_MAX_CONNECTIONS
# 8 and 1; ~30 s) into OUT/whatif.tgz: issue 37's what-if against a second real run, replayed on CPU.
set -uo pipefail
OUT=${OUT:-one_gpu_suite_out}; W=${WORK:-/tmp/one_gpu_work}; rm -rf "$W"; mkdir -p "$OUT" "$W"
BUDGET=${BUDGET:-540}; PROCS=${PROCS:-4}
. benchmarks/device_env.sh
python3 setup.py -q build_ext --inplace > $W/build.log 2>&1 || echo "no compiled waves loop (Python loop)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$W/gpu.txt"
if [ "${WHATIF:-0}" = 1 ]; then
  for side in spin copy; do for c in 8 1; do
    CUDA_DEVICE_MAX_CONNECTIONS=$c timeout 60 python3 benchmarks/accuracy/whatif_connections.py --side $side \
      --out "$W/whatif/${side}_conn$c" 2>&1 | tail -1
  done; done
  tar czf "$OUT/whatif.tgz" -C "$W/whatif" . 2>/dev/null
fi
date -u +%FT%TZ >> "$W/gpu.txt"
{ nvidia-smi topo -m; b=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr A-F a-f | sed 's/^0000//');
  echo "pci $b numa_node $(cat /sys/bus/pci/devices/$b/numa_node 2>/dev/null) local_cpulist $(cat /sys/bus/pci/devices/$b/local_cpulist 2>/dev/null)";
  nproc; grep -m1 "model name" /proc/cpuinfo; grep MHz /proc/cpuinfo | sort | uniq -c | head -5; } > "$W/topo.txt" 2>&1
head -c 1500 "$W/topo.txt"
PIN=${PIN:-numa:4}
if [ "${SPREAD:-0}" -gt 0 ]; then
  mkdir -p $W/spread
  for i in $(seq "$SPREAD"); do for pin in off "$PIN"; do
    for c in "tpw tp_allreduce.py --set world_size=1 --set layers=96 --set input_size=2048 --set output_size=2048" \
             "soT64 small_ops.py --set T=64"; do
      set -- $c; tag=$1; shift; ref=$1; shift
      # shellcheck disable=SC2068
      SCHEDSIM_PIN_CPUS=$pin timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
        "benchmarks/accuracy/handwritten/$ref" $@ --iters 20 --warmup 25 --out "$W/spread/${tag}_${pin/:/}_$i.json" \
        > "$W/spread/${tag}_${pin/:/}_$i.log" 2>&1 || echo "spread $tag $pin $i FAILED"
    done
  done; done
  python3 - "$W/spread" "$OUT/spread.json" <<'PY'
import json, pathlib, statistics, sys
rows = {}
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    tag, pin, i = f.stem.rsplit("_", 2)
    d = json.loads(f.read_text())
    rows.setdefault(f"{tag} {pin}", []).append((d["makespan_median_s"] * 1e3, d.get("pinned_cpus")))
out = {k: {"ms": [round(m, 4) for m, _ in v], "cpus": v[0][1], "max/min": round(max(m for m, _ in v) / min(m for m, _ in v), 3),
           "median": round(statistics.median(m for m, _ in v), 4)} for k, v in rows.items()}
json.dump(out, open(sys.argv[2], "w"), indent=1)
for k, v in out.items():
    print(k, v)
PY
fi
export SCHEDSIM_PIN_CPUS=$PIN
timeout 60 python3 benchmarks/probes/host/call_patterns.py --only after_profiler 2>&1 | tail -1 | tee "$W/probe_profiler_host.json"
PROF=$W/calibrated.yaml
AB=${AB:-0}
if [ "$AB" -gt 0 ]; then  # A/B mode: nothing is predicted
  timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node 1 benchmarks/probes/host/collective_call.py \
    --layers 96 --reps 20 2>&1 | grep "^PROBE " | cut -c7- > "$OUT/collective_call.json" || echo "collective_call FAILED"
  head -c 600 "$OUT/collective_call.json"; echo
elif [ -n "${PROFILE:-}" ]; then  # a profile calibrated earlier on this kind: no calibration; the power onset alone
  cp "$PROFILE" "$PROF"
  timeout 60 python3 -c "import json, torch; from executor.calibrate_power import measure_power
print(json.dumps(measure_power(torch, torch.device('cuda'), print)))" > "$W/power.json" 2>&1; tail -1 "$W/power.json"
else
echo "=== calibrate ($(date -u +%H:%M:%S))"
timeout 200 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim calibrate --no-grid \
  --dtypes fp32,bf16,fp16 --iters 10 --max-bytes 67108864 --factor 4 \
  ${CAL_GEMMS:---gemm 4096x4096x4096 --gemm 2048x2048x2048 --gemm 32x1024x1024 --gemm 64x1024x1024 \
  --gemm 1x1024x1024 --gemm 1x2048x1024 --gemm 1x2048x2048 --gemm 16384x8192x8192 --gemm 4096x2048x8192 \
  --gemm 2048x1024x8192 --gemm 1024x512x8192 --gemm 4096x4096x512 --gemm 4096x512x4096 schedules/offload.yaml} \
  --host-processes "${HOST_PROCESSES:-3}" --name calibrated --base h200 --out "$PROF" > $W/calibrate.log 2>&1 \
  || { echo "calibrate failed"; tail -20 $W/calibrate.log; }
fi
[ -f "$PROF" ] || PROF=h200
grep -E "\[power\]|plain PyTorch host" $W/calibrate.log 2>/dev/null | cut -c1-300
want() { [ -z "${CASES:-}" ] || [[ " $CASES " == *" $1 "* ]]; }
# case TAG SCHEDULE "SETS" "EXECUTE FLAGS" REF "REF FLAGS" [mh|procs] [ENV]  (mh: --measure-host and PROCS processes;
# procs: PROCS processes)
case_() {
  local tag=$1 sched=$2 sets=$3 xf=$4 ref=$5 rf=$6 mh=${7:-} envset=${8:-}
  want "$tag" || return 0
  if [ "$SECONDS" -gt "$BUDGET" ]; then echo "$tag skipped: budget"; return 0; fi
  local d=$W/$tag; mkdir -p "$d"
  echo "=== $tag ($(date -u +%H:%M:%S), ${SECONDS}s)"
  if [ "$AB" -gt 0 ]; then  # harness.py ab: the launch flag of the execute flags, the reference's flags as --ref-arg
    local i launch=""; [[ " $xf " == *" --eager "* ]] && launch=--eager; [[ " $xf " == *" --cuda-graph "* ]] && launch=--cuda-graph
    [ -n "$ref" ] || { echo "$tag: no reference"; return 0; }
    for i in $(seq "$AB"); do
      [ "$SECONDS" -lt "$BUDGET" ] || { echo "$tag A/B $i.. skipped: budget"; break; }
      # shellcheck disable=SC2046,SC2086
      env $envset timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
        benchmarks/accuracy/handwritten/harness.py ab "$sched" "$ref" $sets $launch \
        $(for f in $rf; do echo "--ref-arg=$f"; done) \
        --blocks "${BLOCKS:-6}" --out "$d/ab_$i.json" > "$d/ab_$i.log" 2>&1 || echo "$tag A/B $i FAILED ($?)"
      tail -1 "$d/ab_$i.log"
    done
    tar czf "$OUT/runs.tgz" -C "$W" . 2>/dev/null
    return 0
  fi
  # shellcheck disable=SC2086
  env $envset timeout 100 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute \
    "$sched" $sets $xf --no-gantt --compare --profile "$PROF" --iters 20 --warmup 5 --timeout 60 \
    --out "$d/execute" > "$d/execute.log" 2>&1 || echo "$tag execute FAILED ($?)"
  grep -E "without per-op|per-op duration" "$d/execute.log"
  if [ -n "$ref" ]; then
    # shellcheck disable=SC2086
    timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 1 "benchmarks/accuracy/handwritten/$ref" \
      $sets $rf --iters 20 --warmup 25 --out "$d/handwritten.json" > "$d/ref.log" 2>&1 || echo "$tag ref FAILED ($?)"
    tail -1 "$d/ref.log"
  fi
  if [ "$mh" = mh ] && [ "$PROCS" -ge 2 ] && [ "$SECONDS" -lt "$BUDGET" ]; then  # the second of PROCS processes
    # shellcheck disable=SC2086
    timeout 100 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute "$sched" \
      $sets $xf --no-gantt --compare --measure-host --profile "$PROF" --iters 20 --warmup 5 --timeout 60 \
      --out "$d/rep2/execute" > "$d/mh.log" 2>&1 || echo "$tag --measure-host FAILED ($?)"
    grep -E "without per-op|predicts with" "$d/mh.log"
    # a second reference process: host-bound processes differ by up to a third ([evidence: executor-overhead])
    [ -n "$ref" ] && { timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
      "benchmarks/accuracy/handwritten/$ref" $sets $rf --iters 20 --warmup 25 --out "$d/rep2/handwritten.json" \
      > "$d/ref2.log" 2>&1 || echo "$tag ref 2 FAILED ($?)"; tail -1 "$d/ref2.log"; }
  fi
  if [ -n "$mh" ]; then  # host-bound: PROCS execute and PROCS reference processes in all, alternated; the extra
    # ones cheap (no --compare, --profiler, --measure-host): only their makespans and host-thread columns are read
    local i first=2; [ "$mh" = mh ] && first=3
    for i in $(seq "$first" "$PROCS"); do
      [ "$SECONDS" -lt "$BUDGET" ] || { echo "$tag: processes $i.. skipped: budget"; break; }
      mkdir -p "$d/rep$i"
      # shellcheck disable=SC2086
      timeout 100 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m schedsim execute "$sched" \
        $sets ${xf//--profiler/} --no-gantt --iters 20 --warmup 5 --timeout 60 --out "$d/rep$i/execute" \
        > "$d/x$i.log" 2>&1 || echo "$tag execute $i FAILED ($?)"
      # shellcheck disable=SC2086
      [ -n "$ref" ] && { timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
        "benchmarks/accuracy/handwritten/$ref" $sets $rf --iters 20 --warmup 25 --out "$d/rep$i/handwritten.json" \
        > "$d/ref$i.log" 2>&1 || echo "$tag ref $i FAILED ($?)"; }
      rm -f "$d/rep$i/execute/trace.json"
    done
  fi
  python3 benchmarks/accuracy/suite_summary.py case "$d" "$tag" --line || true
  find "$d" -name trace.json -delete; find "$d" -name 'kineto_rank*.json.gz' -delete
  tar czf "$OUT/runs.tgz" -C $W . 2>/dev/null
}
S=schedules; P="--profiler"; ONE="--set world_size=1"; AGS="$ONE --set M=16384"
case_ chain2 benchmarks/data/gemm_chain.yaml "" "$P" gemm_chain.py ""
[ "${WAIT_AB:-1}" = 1 ] && case_ chain2_sleep benchmarks/data/gemm_chain.yaml "" "" "" "" "" SCHEDSIM_WAIT=sleep
case_ so_eager $S/small_ops_graph.yaml "" "--eager $P" small_ops.py "" mh
case_ so_graph $S/small_ops_graph.yaml "" "--cuda-graph" small_ops.py "--graph"
case_ so_seg schedules/small_ops_segment.yaml "" "" small_ops.py "--segment"
case_ gbn_w1 $S/graph_beside_nccl.yaml "$ONE" "" tp_allreduce.py "--beside-nccl"
case_ tpa_eager $S/tp_allreduce_graph.yaml "$ONE" "--eager $P" tp_allreduce.py "" mh
case_ tpa_graph $S/tp_allreduce_graph.yaml "$ONE" "--cuda-graph" tp_allreduce.py "--graph"
case_ offload $S/offload.yaml "" "--eager $P" offload.py ""
case_ ag_c1 $S/allgather_mm.yaml "$AGS --set chunks=1" "$P" allgather_mm.py ""
case_ ag_c8 $S/allgather_mm.yaml "$AGS --set chunks=8" "$P" allgather_mm.py ""
[ "${WAIT_AB:-1}" = 2 ] && case_ ag_c8_sleep $S/allgather_mm.yaml "$AGS --set chunks=8" "" "" "" "" SCHEDSIM_WAIT=sleep
case_ ms_c4 $S/matmul_streams.yaml "" "$P" "" ""
case_ tpffn_tp1 $S/tp_ffn.yaml "--set tp=1" "$P" tp_ffn.py "" procs
case_ chain8_2k benchmarks/data/gemm_chain.yaml "--set count=8 --set M=2048 --set N=2048 --set K=2048" "$P" gemm_chain.py ""
case_ so_T64 $S/small_ops_graph.yaml "--set T=64" "--eager $P" small_ops.py "" mh
case_ tpw_eager $S/tp_allreduce_graph.yaml "$ONE --set layers=96 --set input_size=2048 --set output_size=2048" \
  "--eager $P" tp_allreduce.py "" mh
case_ ag_bf16_c4 $S/allgather_mm.yaml "$AGS --set chunks=4 --set dtype=bf16" "$P" allgather_mm.py ""
case_ ms_bf16_c16 $S/matmul_streams.yaml "--set dtype=bf16 --set chunks=16" "$P" "" ""
case_ ag_c4 $S/allgather_mm.yaml "$AGS --set chunks=4" "$P" allgather_mm.py ""
if [ "$AB" -gt 0 ]; then python3 benchmarks/accuracy/suite_summary.py ab "$W" "$OUT"
else python3 benchmarks/accuracy/suite_summary.py collect $W "$OUT" | cut -c1-250; fi
cp "$PROF" "${PROF%.yaml}.json" "$W/calibrate.log" "$OUT/" 2>/dev/null
tar czf "$OUT/runs.tgz" -C $W . 2>/dev/null; ls -la "$OUT"; echo "done in ${SECONDS}s"
