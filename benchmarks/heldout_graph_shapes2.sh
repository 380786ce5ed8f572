#!/usr/bin/env bash
# A second set of small_ops_graph shapes held out from rules 4, 8 and 9 (issue 8), as CUDA graphs, plus the suite's
# eager small_ops with the process's own host costs and T16 H512 again; a calibration on this GPU that measures
# every case's GEMM. ~6 min, one H200.   OUT=dir bash benchmarks/heldout_graph_shapes2.sh
S=small_ops_graph; G=--cuda-graph
export GEMMS="--gemm 32x2048x2048 --gemm 8x1024x1024 --gemm 64x512x512 --gemm 32x512x512"
export CASES="$S|--set T=32 --set H=2048 $G|new_32x2048;$S|--set T=8 --set H=1024 --set layers=128 $G|new_8x1024;\
$S|--set T=64 --set H=512 --set layers=128 $G|new_64x512;$S|--set T=32 --set H=512 --set dtype=fp32 $G|new_32x512_fp32;\
$S|--set T=16 --set H=512 --set layers=128 $G|so_16x512;$S|--measure-host|so_eager"
PROBE=0 exec bash benchmarks/probe_l2_residency.sh
