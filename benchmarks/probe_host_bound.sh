#!/usr/bin/env bash
# Sub-millisecond 2-rank cases (tp_allreduce eager, tp_ffn tp=2) measured three ways in one device call, to tell
# GPU-side slowness after the aligned start from host issue cost: (1) as benchmarks/accuracy_x2.sh does
# (2 ms start margin), (2) with SCHEDSIM_START_MARGIN_S=0, (3) `execute --profiler` (Kineto kernel times).
# Also the one-off 1F1B p=2 `execute --profiler` + `analyze` run of issue 13. ~4 min on 2xH200.
#   OUT=dir bash benchmarks/probe_host_bound.sh
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
    OUT=/tmp/hb_$margin WORK=/tmp/hbw_$margin bash benchmarks/accuracy_x2.sh > "$OUT/log_margin_$margin.txt" 2>&1
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
