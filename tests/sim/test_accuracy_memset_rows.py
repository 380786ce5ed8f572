"""benchmarks/accuracy/replay_runs.py --memset-rows: which GEMMs of a run launched a memset, its gap on an idle GPU."""

from __future__ import annotations

from tests.conftest import accuracy_script


def _mod():
    return accuracy_script("replay_runs")


# Kineto records of two H100 runs' --profiler iterations (2026-12-07, profiler_ops.json, times in µs less an offset):
# chain2's two bf16 4096³ GEMMs and tpffn_tp1's fp16 fc1 (memset + coopA), fc2 (one kernel) and an all_reduce
# that ran nothing on the GPU (one rank)
CHAIN2 = [("mm0@r0", {"cpu_start_us": 192.409, "cpu_dur_us": 64.173, "gpu_start_us": 231.147, "gpu_end_us": 411.436,
                      "gpu_busy_us": 169.824, "kernels": ["Memset (Device)", "nvjet_sm90_tst_256x128_coopA_NNT"]}),
          ("mm1@r0", {"cpu_start_us": 276.276, "cpu_dur_us": 42.822, "gpu_start_us": 414.668, "gpu_end_us": 578.764,
                      "gpu_busy_us": 162.592, "kernels": ["Memset (Device)", "nvjet_sm90_tst_256x128_coopA_NNT"]})]
TPFFN = [("fc1_0@r0", {"cpu_start_us": 151.311, "cpu_dur_us": 59.858, "gpu_start_us": 186.244, "gpu_end_us": 228.644,
                       "gpu_busy_us": 29.376, "kernels": ["Memset (Device)", "nvjet_sm90_hsh_coopA_NNT"]}),
         ("fc2_0@r0", {"cpu_start_us": 225.838, "cpu_dur_us": 50.754, "gpu_start_us": 268.196, "gpu_end_us": 297.668,
                       "gpu_busy_us": 29.472, "kernels": ["nvjet_sm90_hsh_128x128_NNT"]}),
         ("allreduce_0@r0", {"cpu_start_us": 291.688, "cpu_dur_us": 90.525, "gpu_start_us": None, "gpu_end_us": None,
                             "gpu_busy_us": None, "kernels": None})]


def test_a_memset_gemm_on_an_idle_gpu_gives_its_gap_and_one_behind_queued_work_none():
    m = _mod()
    # mm0: nothing ahead, span 411.436 - 231.147 = 180.289 less busy 169.824 = 10.465 µs. mm1: its call returned
    # at 319.098, while mm0 ran until 411.436: queued, no gap (its span less busy, 1.5 µs, is the queue's)
    got = m.idle_memset_gaps(CHAIN2)
    assert set(got) == {"mm0@r0", "mm1@r0"} and got["mm1@r0"] is None
    assert abs(got["mm0@r0"] - 10.465) < 1e-6
    # fc1: 228.644 - 186.244 - 29.376 = 13.024; fc2 launches no memset; the all_reduce has no GPU record
    got = m.idle_memset_gaps(TPFFN)
    assert list(got) == ["fc1_0@r0"] and abs(got["fc1_0@r0"] - 13.024) < 1e-6


def test_rows_take_the_median_of_idle_gaps_and_the_pooled_median_for_a_shape_never_idle():
    m = _mod()
    found = {("bf16", 4096, 4096, 4096): [10.0, None, 8.0, 12.0], ("fp16", 4096, 4096, 512): [13.0],
             ("bf16", 2048, 8192, 8192): [None, None]}
    rows, lines = m.memset_rows(found)
    # pooled: median of 10, 8, 12, 13 = 11
    assert rows == [["bf16", 2048, 8192, 8192, 11.0], ["bf16", 4096, 4096, 4096, 10.0],
                    ["fp16", 4096, 4096, 512, 13.0]]
    assert "never idle" in lines[0] and "3 idle" in lines[1]
    assert m.memset_rows({("bf16", 1, 1, 1): [None]}) == ([], [])
