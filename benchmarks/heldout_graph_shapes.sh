#!/usr/bin/env bash
# small_ops_graph as a CUDA graph at shapes held out from rules 8 and 9 (issue 8), beside the five it was checked on,
# with a calibration on this GPU that measures every case's GEMM (graph rows and fork rows): ~7 min, one H200.
#   OUT=dir bash benchmarks/heldout_graph_shapes.sh
S=small_ops_graph; G=--cuda-graph; TP=tp_allreduce_graph; TPG="--set launch=cuda_graph --cuda-graph"
export GEMMS="--gemm 24x768x768 --gemm 48x1536x1536 --gemm 128x1024x1024 --gemm 16x1024x1024"
export CASES="$S|--set T=24 --set H=768 --set layers=96 $G|new_24x768;$S|--set T=48 --set H=1536 $G|new_48x1536;\
$S|--set T=128 --set H=1024 $G|new_128x1024;$S|--set T=16 --set H=1024 --set dtype=fp32 $G|new_16x1024_fp32;\
$S|--set T=16 --set H=512 --set layers=128 $G|so_16x512;$S|$G|so_32x1024;$S|--set T=64 --set H=2048 $G|so_64x2048;\
$S|--set T=8 --set H=256 --set layers=128 $G|so_8x256;$S|--set T=16 --set H=2048 $G|so_16x2048;\
$TP|--set world_size=1 --set layers=64 $TPG|tp_1024;\
$TP|--set world_size=1 --set layers=96 --set input_size=2048 --set output_size=2048 $TPG|tp_2048"
PROBE=0 exec bash benchmarks/probe_l2_residency.sh
