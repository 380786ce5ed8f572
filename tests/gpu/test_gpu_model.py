"""Golden timelines of the ``waves`` GPU model (schedsim.gpu.rules), computed by hand.

Toy GPU: 8 SMs, NCCL kernels take 2 SMs, no launch costs unless a test sets them. GEMM table entries
(fp32, 10 µs or 2 µs) with CTA counts from 128×128 tiles: 256×512 → 8 CTAs (fills the GPU), 256×384 → 6,
128×128×128 → 1. all_reduce of 1e6 B over 2 ranks: 2 µs + 10 µs = 12 µs; send/recv of 1e6 B: 11 µs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import toy_profile_dict

HEAD = "schema_version: 1\nname: g\nworld_size: %d\nops:\n"
FULL = "kind: matmul, m: 256, n: 512, k: 1024"  # 8 CTAs, 10 µs
SIX = "kind: matmul, m: 256, n: 384, k: 128"  # 6 CTAs (k too short to split), 10 µs
TINY = "kind: matmul, m: 128, n: 128, k: 128"  # 1 CTA, 2 µs


def waves_profile(nccl: dict | None = None, launch: dict | None = None, **gpu):
    from schedsim.hardware.profile import HardwareProfile

    d = toy_profile_dict()
    d["gpu_model"] = "waves"
    d["gpu"].update({"sms": 8, **gpu})
    d["gemm"]["entries"] += [["fp32", 256, 512, 1024, 0.010], ["fp32", 256, 384, 128, 0.010],
                             ["fp32", 128, 128, 128, 0.002]]
    d["nccl"] = {"sms_per_collective": 2, **(nccl or {})}
    d["launch"].update(launch or {})
    return HardwareProfile.model_validate(d)


def test_two_streams_of_wave_filling_gemms_run_one_after_the_other(sim_text):
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: A, {FULL}, stream: s1}}\n  - {{name: B, {FULL}, stream: s2}}\n",
                         waves_profile())
    assert spans == {"A@r0": (0.0, 10.0), "B@r0": (10.0, 20.0)}


def test_small_kernel_on_a_third_stream_waits_for_free_sms(sim_text):
    text = f"  - {{name: A, {FULL}, stream: s1}}\n  - {{name: B, {FULL}, stream: s2}}\n  - {{name: C, {TINY}, stream: s3}}\n"
    spans, _ = sim_text(HEAD % 1 + text, waves_profile())
    # FIFO block dispatch: B was handed to the GPU before C, so C gets an SM only when B's CTAs retire
    assert spans == {"A@r0": (0.0, 10.0), "B@r0": (10.0, 20.0), "C@r0": (20.0, 22.0)}
    # a 6-CTA GEMM leaves 2 SMs free: the tiny kernel runs beside it at once
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: A, {SIX}, stream: s1}}\n  - {{name: C, {TINY}, stream: s3}}\n",
                        waves_profile())
    assert spans == {"A@r0": (0.0, 10.0), "C@r0": (0.0, 2.0)}


def _with_ctas(prof, *rows):
    return prof.model_copy(update={"gemm": prof.gemm.model_copy(update={"ctas": list(rows)})})


def test_multi_wave_gemm_frees_sms_in_its_last_wave(sim_text):
    # 4 SMs, SIX's grid measured as 6 CTAs (gemm.ctas): 2 waves of 5 µs (was: persistent, 4 CTAs of 10 µs; the
    # 2xH200 probe of 2026-11-30 disproves that for cuBLAS: a 1024^3 GEMM on a third stream ended 0.14 ms *before*
    # a queued bf16 8192^3 GEMM of 2048 CTAs, whose partial last wave freed SMs, [evidence: 2xh200-concurrency]).
    # A: CTAs 0-5 on all 4 SMs, its last 2 at 5-10; B (1 CTA) then takes a free SM at 5 and ends at 7, before A.
    prof = _with_ctas(waves_profile(sms=4), ("fp32", 256, 384, 128, 6))
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: A, {SIX}, stream: s1}}\n  - {{name: B, {TINY}, stream: s3}}\n", prof)
    assert spans == {"A@r0": (0.0, 10.0), "B@r0": (5.0, 7.0)}
    # C (1 CTA, 2 µs) handed over first holds one SM until 2: A starts 3 CTAs at 0 (end 5), its 4th at 2 (end 7),
    # its last 2 at 5 (end 10): the wave it lost is absorbed by its partial last wave
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: C, {TINY}, stream: s3}}\n  - {{name: A, {SIX}, stream: s1}}\n", prof)
    assert spans == {"C@r0": (0.0, 2.0), "A@r0": (0.0, 10.0)}


def test_unmeasured_multi_wave_gemm_fills_its_waves(sim_text):
    # the same GEMM without a measured grid: its 6 output tiles of 128x128 are at least a wave on 4 SMs, but the
    # real tile width (hence the last wave's size) is unknown, so the kernel is taken to fill both waves: 8 CTAs
    # of 5 µs. B finds no free SM until A's second wave retires at 10. (S0, pcie2, 8 chunks: with a half-empty
    # guessed second wave the other streams' GEMMs filled it, 49.21 ms predicted against 75.49 measured; with
    # full waves 76.44 ms.)
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: A, {SIX}, stream: s1}}\n  - {{name: B, {TINY}, stream: s3}}\n",
                        waves_profile(sms=4))
    assert spans == {"A@r0": (0.0, 10.0), "B@r0": (10.0, 12.0)}
    # with fewer tiles than SMs (the split-K regime) the guess stays one wave of what the tiles need: on 8 SMs
    # SIX's 6 CTAs leave 2 SMs to B at once
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: A, {SIX}, stream: s1}}\n  - {{name: B, {TINY}, stream: s3}}\n",
                        waves_profile())
    assert spans == {"A@r0": (0.0, 10.0), "B@r0": (0.0, 2.0)}


def test_measured_grid_leaves_sms_to_other_streams(sim_text):
    # the profile records FULL's kernel as 6 CTAs (gemm.ctas, e.g. cuBLAS's 128-CTA grid on 132 SMs) instead of
    # the 8 of its 128x128 tiles: each CTA still lasts the 10 us solo time (one wave). A: 6 CTAs 0-10; B places 2
    # on the free SMs at 0 and its other 4 at 10 (ends 20); C, next in the FIFO, 4 at 10 and 2 at 20 (ends 30);
    # D places all 6 at 20 (8 SMs - C's 2). 4 GEMMs in 30 us, not the 40 of one after the other.
    text = "".join(f"  - {{name: {x}, {FULL}, stream: s{i}}}\n" for i, x in enumerate("ABCD"))
    prof = waves_profile()
    spans, _ = sim_text(HEAD % 1 + text, prof)
    assert spans == {"A@r0": (0.0, 10.0), "B@r0": (10.0, 20.0), "C@r0": (20.0, 30.0), "D@r0": (30.0, 40.0)}
    measured = _with_ctas(prof, ("fp32", 256, 512, 1024, 6))
    spans, _ = sim_text(HEAD % 1 + text, measured)
    assert spans == {"A@r0": (0.0, 10.0), "B@r0": (0.0, 20.0), "C@r0": (10.0, 30.0), "D@r0": (20.0, 30.0)}


def test_nccl_kernel_starts_late_and_starves_beside_gemms(sim_text):
    # A fills the 8 SMs, so the all_reduce (needs 2) waits until 10 µs; then B takes the other 6 SMs and holds
    # all of them until 20 µs: the all_reduce runs at 1/3 (slowdown 3.0) and does 10/3 µs of its 12 µs; the
    # remaining 26/3 µs run alone: end = 20 + 26/3 = 28.667 µs.
    text = (f"  - {{name: A, {FULL}}}\n  - {{name: ar, kind: all_reduce, bytes: 1000000}}\n"
            f"  - {{name: B, {SIX}, stream: s2}}\n")
    spans, _ = sim_text(HEAD % 2 + text, waves_profile(nccl={"slowdown_beside_gemm": 3.0}))
    for r in (0, 1):
        assert spans[f"A@r{r}"] == (0.0, 10.0)
        assert spans[f"B@r{r}"] == (10.0, 20.0)
        assert spans[f"ar@r{r}"] == (10.0, pytest.approx(28.666667))


def test_one_connection_starts_kernels_in_issue_order(sim_text):
    # A (6 CTAs) then C on stream s1, B on s2; issue order A, C, B. With 8 queues B runs at once on the 2 spare
    # SMs; with 1 queue B sits behind C, which waits for A: both start at 10.
    body = (f"  - {{name: A, {SIX}, stream: s1}}\n  - {{name: C, {TINY}, stream: s1}}\n"
            f"  - {{name: B, {TINY}, stream: s2}}\n")
    spans, _ = sim_text(HEAD % 1 + body, waves_profile())
    assert spans == {"A@r0": (0.0, 10.0), "C@r0": (10.0, 12.0), "B@r0": (0.0, 2.0)}
    one = {"A@r0": (0.0, 10.0), "C@r0": (10.0, 12.0), "B@r0": (10.0, 12.0)}
    spans, tl = sim_text(HEAD % 1 + body, waves_profile(max_connections=1))
    assert spans == one
    # an event recorded before B sits in the one queue behind C, which is handed over at 10: B's stream_s is 10
    # (with 8 queues it is 0), which is what execute's CUDA events measure
    assert {s.id: s.stream_s * 1e6 for s in tl.spans} == pytest.approx({"A@r0": 0.0, "C@r0": 10.0, "B@r0": 10.0})
    env = "schema_version: 1\nname: g\nworld_size: 1\nenv: {CUDA_DEVICE_MAX_CONNECTIONS: 1}\nops:\n"
    spans, _ = sim_text(env + body, waves_profile())
    assert spans == one


def test_predict_max_connections_override(sim_text):
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    body = (f"  - {{name: A, {SIX}, stream: s1}}\n  - {{name: C, {TINY}, stream: s1}}\n"
            f"  - {{name: B, {TINY}, stream: s2}}\n")
    tl = simulate(lower(load_text(HEAD % 1 + body, "t.yaml")), waves_profile(), max_connections=1)
    assert tl.by_id()["B@r0"].start_s == pytest.approx(10e-6)


def test_host_thread_bounds_200_tiny_gemms_eagerly_not_in_a_graph(sim_text):
    # eager: the host issues op i at 5(i+1) µs and each kernel takes 2 µs, so the GPU idles between them:
    # makespan = 200 * 5 + 2 = 1002 µs. Graph: all issued by the 10 µs replay, 200 * 2 µs back to back: 410 µs.
    body = "".join(f"  - {{name: g{i}, {TINY}}}\n" for i in range(200))
    prof = waves_profile(launch={"eager_per_op_us": 5.0, "graph_launch_us": 10.0})
    spans, tl = sim_text(HEAD % 1 + body, prof)
    assert spans["g0@r0"] == (5.0, 7.0) and spans["g199@r0"] == (1000.0, 1002.0)
    assert tl.makespan_s == pytest.approx(1002e-6)
    spans, tl = sim_text(HEAD % 1 + body, prof, launch="cuda_graph")
    assert spans["g0@r0"] == (10.0, 12.0) and tl.makespan_s == pytest.approx(410e-6)


def test_first_calls_run_cold_after_a_gpu_bound_iteration(sim_text):
    # rule host-issue, launch.cold_first_call_us. A (10 µs GEMM) called at 0-1 µs: the GPU ends at 11, 10 µs after the
    # host's last call. With cold_wait_us 5 the host waited: the iteration runs again with A's first-kernel call
    # 1 + 4 = 5 µs, the elementwise m's first call 1 + 2 = 3 µs: A [5, 15], m (1e6 B: 1 µs, after A) [15, 16].
    body = f"  - {{name: A, {FULL}}}\n  - {{name: m, kind: compute, bytes: 1000000, deps: [A]}}\n"
    cold = {"kernel": 4.0, "elementwise": 2.0}
    launch = {"eager_per_op_us": 1.0, "elementwise_call_us": 1.0, "cold_first_call_us": cold, "cold_wait_us": 5.0}
    spans, tl = sim_text(HEAD % 1 + body, waves_profile(launch=launch))
    assert spans == {"A@r0": (5.0, 15.0), "m@r0": (15.0, 16.0)}
    assert tl.meta["host_call_end_s"] == {"A@r0": pytest.approx(5e-6), "m@r0": pytest.approx(8e-6)}
    # a wait shorter than cold_wait_us (here 11 - 2 = 9 < 20): warm first calls, A [1, 11], m [11, 12]
    spans, _ = sim_text(HEAD % 1 + body, waves_profile(launch={**launch, "cold_wait_us": 20.0}))
    assert spans == {"A@r0": (1.0, 11.0), "m@r0": (11.0, 12.0)}
    # a graph replay has no per-op calls: nothing runs cold
    spans, _ = sim_text(HEAD % 1 + body, waves_profile(launch={**launch, "graph_launch_us": 1.0}), launch="cuda_graph")
    assert spans["A@r0"][0] == 1.0



def test_the_cold_rerun_keeps_the_first_passs_preparation() -> None:
    # the rerun with cold first calls (above) differs from the first pass only in the host issue times: the ops'
    # solo times, kernels and communicator order are worked out once (the first pass's), the spans those above
    # (no sim_text: tests/oracle/test_waves_columns.py runs those scenarios through other paths as well)
    from schedsim.lower import lower
    from schedsim.sim import waves_columns as wc
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    calls: list[int] = []
    prepare = wc._prepare  # the ops' solo times, kernels and communicator order (the solo times per template
    # where the ops have no send/recv: no _durations call to count)

    def counted(*a: Any) -> Any:
        calls.append(1)
        return prepare(*a)

    body = f"  - {{name: A, {FULL}}}\n  - {{name: m, kind: compute, bytes: 1000000, deps: [A]}}\n"
    launch = {"eager_per_op_us": 1.0, "elementwise_call_us": 1.0, "cold_first_call_us": {"kernel": 4.0,
              "elementwise": 2.0}, "cold_wait_us": 5.0}
    prog = lower(load_text(HEAD % 1 + body, "t.yaml"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(wc, "_prepare", counted)
        tl = simulate(prog, waves_profile(launch=launch))
    spans = {s.id: (round(s.start_s * 1e6, 6), round(s.end_s * 1e6, 6)) for s in tl.spans}
    assert spans == {"A@r0": (5.0, 15.0), "m@r0": (15.0, 16.0)} and len(calls) == 1
    assert tl.meta["host_call_end_s"] == {"A@r0": pytest.approx(5e-6), "m@r0": pytest.approx(8e-6)}

def test_host_us_and_event_waits_delay_issue(sim_text):
    # host: A at 5; B waits on A from another stream: 2 µs event wait + 3 µs declared Python + 5 µs launch = 15
    prof = waves_profile(launch={"eager_per_op_us": 5.0})
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: A, {TINY}}}\n  - {{name: B, {TINY}, stream: s2, deps: [A], host_us: 3}}\n",
                        prof)
    assert spans == {"A@r0": (5.0, 7.0), "B@r0": (15.0, 17.0)}


def test_stream_reached_time_is_the_host_call_start_or_the_dependencies(sim_text):
    # stream_s = max(dependencies done, host at the start of the op's own call): what a CUDA event recorded just
    # before the call measures. A: call 0-5, kernel 5-7 -> stream_s 0. B (s2, waits on A): 2 µs event wait, so its
    # call runs 7-12 (A's end at 7 is later) -> stream_s 7, kernel 12-14. C on s1 after A: call 12-17, A done at 7
    # -> stream_s 12. In a graph replay the host has issued everything: stream_s = dependencies (0, 2, 2).
    prof = waves_profile(launch={"eager_per_op_us": 5.0})
    body = f"  - {{name: A, {TINY}}}\n  - {{name: B, {TINY}, stream: s2, deps: [A]}}\n  - {{name: C, {TINY}}}\n"
    spans, tl = sim_text(HEAD % 1 + body, prof)
    got = {s.id: round(s.stream_s * 1e6, 6) for s in tl.spans}
    assert spans == {"A@r0": (5.0, 7.0), "B@r0": (12.0, 14.0), "C@r0": (17.0, 19.0)}
    assert got == {"A@r0": 0.0, "B@r0": 7.0, "C@r0": 12.0}
    _, tl = sim_text(HEAD % 1 + body, prof, launch="cuda_graph")
    assert {s.id: round(s.stream_s * 1e6, 6) for s in tl.spans} == {"A@r0": 0.0, "B@r0": 2.0, "C@r0": 2.0}


def test_a_collective_is_reached_at_its_call_start_not_its_release_or_return(sim_text):
    # the same rule for a collective (every host-called op): stream_s = max(dependencies done, its call's start),
    # never the kernel's release inside the call nor the call's return. Calls: matmuls 5 µs, one-rank all_reduce
    # 20 µs, launch at 0.5 of the call; the all_reduce on its own stream pays a 2 µs event wait for A, B one for
    # r2. A: call 0-5, kernel 2.5-4.5, stream_s 0. r1: call 7-27 (after the wait), released at 17 (no work on one
    # rank), stream_s 7. r2: call 27-47, released 37, stream_s 27 (r1 done at 17): not 37, not 47. B: call 49-54.
    prof = waves_profile(launch={"eager_per_op_us": 5.0, "eager_per_collective_us": 20.0,
                                 "call_launch_fraction": 0.5})
    body = (f"  - {{name: A, {TINY}}}\n  - {{name: r1, kind: all_reduce, bytes: 1000, deps: [A]}}\n"
            f"  - {{name: r2, kind: all_reduce, bytes: 1000, deps: [r1]}}\n  - {{name: B, {TINY}, deps: [r2]}}\n")
    spans, tl = sim_text(HEAD % 1 + body, prof)
    assert spans == {"A@r0": (2.5, 4.5), "r1@r0": (17.0, 17.0), "r2@r0": (37.0, 37.0), "B@r0": (51.5, 53.5)}
    assert {s.id: round(s.stream_s * 1e6, 6) for s in tl.spans} == {"A@r0": 0.0, "r1@r0": 7.0, "r2@r0": 27.0,
                                                                     "B@r0": 49.0}
    # timed op by op (4 µs of events per op before each call, half of it after the return bounds the end): r1's
    # call 15-35 after A's call 4-9 and the 2 µs wait; its CUDA-event window 15 -> 37 holds the whole call, as a
    # measured one-rank all_reduce's does when its host call is what the stream waits for.
    spans, tl = sim_text(HEAD % 1 + body, prof.timed_eager(4.0), model_executor=True)
    assert {s.id: round(s.stream_s * 1e6, 6) for s in tl.spans} == {"A@r0": 4.0, "r1@r0": 15.0, "r2@r0": 39.0,
                                                                     "B@r0": 65.0}
    assert {k: v[1] for k, v in spans.items()} == {"A@r0": 11.0, "r1@r0": 37.0, "r2@r0": 61.0, "B@r0": 72.0}


def test_a_kernel_reaches_the_gpu_part_way_through_its_call(sim_text):
    # calls of 10 µs back to back: [0, 10], [10, 20], [20, 30]. launch.call_launch_fraction 0.4: each kernel (2 µs)
    # is launched 4 µs into its call: [4, 6], [14, 16], [24, 26]; at 1 (the default) at the call's return:
    # [10, 12], [20, 22], [30, 32]. The stream is reached at the call's start either way (0, 10, 20). A graph
    # replay calls nothing per op: its nodes are all issued at graph_launch_us (5), back to back.
    body = "".join(f"  - {{name: g{i}, {TINY}}}\n" for i in range(3))
    prof = waves_profile(launch={"eager_per_op_us": 10.0, "call_launch_fraction": 0.4, "graph_launch_us": 5.0})
    spans, tl = sim_text(HEAD % 1 + body, prof)
    assert spans == {"g0@r0": (4.0, 6.0), "g1@r0": (14.0, 16.0), "g2@r0": (24.0, 26.0)}
    assert [round(s.stream_s * 1e6, 6) for s in tl.spans] == [0.0, 10.0, 20.0]
    assert tl.meta["host_issue_s"] == [pytest.approx(30e-6)]  # the host returned from its last call at 30
    spans, _ = sim_text(HEAD % 1 + body, waves_profile(launch={"eager_per_op_us": 10.0}))
    assert spans == {"g0@r0": (10.0, 12.0), "g1@r0": (20.0, 22.0), "g2@r0": (30.0, 32.0)}
    spans, _ = sim_text(HEAD % 1 + body, prof, launch="cuda_graph")
    assert spans == {"g0@r0": (5.0, 7.0), "g1@r0": (7.0, 9.0), "g2@r0": (9.0, 11.0)}


def test_a_split_k_call_launches_its_main_kernel_before_the_extra_and_a_cheap_call_within_itself(sim_text):
    # eager_per_op_us 10, call_launch_fraction 0.5. FULL with a call row 1.6: the call is [0, 16]; its main kernel
    # is launched half-way through the one-kernel part (10), at 5, and the 6 µs extra (the reduction's launch)
    # follows: FULL runs [5, 15] (10 µs). A row of 0.6 (a call cheaper than the 64×64 one, [0, 6]) launches
    # half-way through itself, at 3 (never after its return): [3, 13].
    from schedsim.hardware.profile import HardwareProfile

    text = HEAD % 1 + f"  - {{name: A, {FULL}}}\n"
    for row, want in ((1.6, (5.0, 15.0)), (0.6, (3.0, 13.0))):
        d = waves_profile(launch={"eager_per_op_us": 10.0, "call_launch_fraction": 0.5}).model_dump()
        d["gemm"]["call"] = [["fp32", 256, 512, 1024, row]]
        spans, tl = sim_text(text, HardwareProfile.model_validate(d))
        assert spans == {"A@r0": want} and tl.meta["host_issue_s"] == [pytest.approx(row * 10e-6)]


def test_a_gemm_that_launches_a_memset_first_reaches_an_idle_gpu_its_gap_later(sim_text):
    # eager_per_op_us 10, call_launch_fraction 0.5; FULL (10 µs) with a gemm.memset row of 4 µs: the call launches
    # the memset at 5 and the main kernel 4 µs later. A, GPU idle: call [0, 10], kernel [9, 19] (without the row
    # [5, 15]). B, called [10, 20], reaches the GPU at 15 + 4 = 19, when A ends: [19, 29] (without: [15, 25]), so
    # the makespan grows by the gap once, not twice; C, a GEMM of another shape, gets no gap. In a graph replay
    # nothing is launched per call: the row changes nothing.
    from schedsim.hardware.profile import HardwareProfile

    text = HEAD % 1 + f"  - {{name: A, {FULL}}}\n  - {{name: B, {FULL}, deps: [A]}}\n  - {{name: C, {TINY}}}\n"
    d = waves_profile(launch={"eager_per_op_us": 10.0, "call_launch_fraction": 0.5}).model_dump()
    plain = HardwareProfile.model_validate(d)
    d["gemm"]["memset"] = [["fp32", 256, 512, 1024, 4.0]]
    row = HardwareProfile.model_validate(d)
    spans, _ = sim_text(text, plain)
    assert spans == {"A@r0": (5.0, 15.0), "B@r0": (15.0, 25.0), "C@r0": (25.0, 27.0)}
    spans, tl = sim_text(text, row)
    assert spans == {"A@r0": (9.0, 19.0), "B@r0": (19.0, 29.0), "C@r0": (29.0, 31.0)}
    assert tl.makespan_s == pytest.approx(31e-6)
    assert sim_text(text, row, launch="cuda_graph")[0] == sim_text(text, plain, launch="cuda_graph")[0]


def test_a_timed_eager_op_ends_no_earlier_than_its_end_event_record(sim_text):
    # an eager run timed op by op with 6 µs of timing per op (HardwareProfile.timed_eager: the host pays it before
    # each 10 µs call): calls [6, 16], [22, 32], [38, 48]. Each 2 µs kernel runs at the call's return ([16, 18], ...)
    # but its end event is recorded half the timing cost after the return, so the op ends at 19, 35, 51. With
    # the launch 0.5 into the call the kernel runs [11, 13] and still ends at 19. Untimed, nothing of the kind.
    body = "".join(f"  - {{name: g{i}, {TINY}}}\n" for i in range(3))
    prof = waves_profile(launch={"eager_per_op_us": 10.0})
    spans, _ = sim_text(HEAD % 1 + body, prof.timed_eager(6.0), model_executor=True)
    assert spans == {"g0@r0": (16.0, 19.0), "g1@r0": (32.0, 35.0), "g2@r0": (48.0, 51.0)}
    half = waves_profile(launch={"eager_per_op_us": 10.0, "call_launch_fraction": 0.5})
    spans, tl = sim_text(HEAD % 1 + body, half.timed_eager(6.0), model_executor=True)
    assert spans == {"g0@r0": (11.0, 19.0), "g1@r0": (27.0, 35.0), "g2@r0": (43.0, 51.0)}
    assert [round(s.stream_s * 1e6, 6) for s in tl.spans] == [6.0, 22.0, 38.0]  # the start event: the call began
    spans, _ = sim_text(HEAD % 1 + body, half, model_executor=True)  # the plain executor model: no end events
    assert spans == {"g0@r0": (5.0, 7.0), "g1@r0": (15.0, 17.0), "g2@r0": (25.0, 27.0)}


def test_stream_switch_costs_host_time(sim_text):
    # 5 µs per launch, 4 µs per stream switch (the rank's first op is free): A on s1 at 5; B on s2 at 5 + 4 + 5 =
    # 14; C on s2 again at 19 (no switch); D back on s1 at 19 + 4 + 5 = 28. The kernels are 2 µs each.
    prof = waves_profile(launch={"eager_per_op_us": 5.0, "stream_switch_us": 4.0})
    body = "".join(f"  - {{name: {n}, {TINY}, stream: {st}}}\n" for n, st in (("A", "s1"), ("B", "s2"), ("C", "s2"),
                                                                            ("D", "s1")))
    spans, _ = sim_text(HEAD % 1 + body, prof)
    assert spans == {"A@r0": (5.0, 7.0), "B@r0": (14.0, 16.0), "C@r0": (19.0, 21.0), "D@r0": (28.0, 30.0)}
    # a replay has no per-op host cost (toy graph_launch_us 0): D runs right after A on s1
    spans, _ = sim_text(HEAD % 1 + body, prof, launch="cuda_graph")
    assert spans["D@r0"] == (2.0, 4.0)


def test_first_launch_and_first_collective_call_cost_extra_host_time(sim_text):
    # 5 µs per launch + 3 µs for the rank's first one; 10 µs per collective call + 7 µs for the first one.
    # A: call 0-8, kernel 8-10. ar (stream c): call 8-25 (stream reached at 8). B: call 25-30, kernel 30-32;
    # A2 is neither first: call 30-35, kernel 35-37 (after B on s1). Without the extras: A 5-7, B 20-22.
    body = (f"  - {{name: A, {TINY}}}\n  - {{name: ar, kind: all_reduce, bytes: 1000, stream: c}}\n"
            f"  - {{name: B, {TINY}}}\n  - {{name: A2, {TINY}}}\n")
    prof = waves_profile(launch={"eager_per_op_us": 5.0, "eager_per_collective_us": 10.0, "first_op_extra_us": 3.0,
                                 "first_collective_extra_us": 7.0})
    spans, tl = sim_text(HEAD % 1 + body, prof)
    assert (spans["A@r0"], spans["B@r0"], spans["A2@r0"]) == ((8.0, 10.0), (30.0, 32.0), (35.0, 37.0))
    assert round(next(s for s in tl.spans if s.id == "ar@r0").stream_s * 1e6, 6) == 8.0
    plain = waves_profile(launch={"eager_per_op_us": 5.0, "eager_per_collective_us": 10.0})
    spans, _ = sim_text(HEAD % 1 + body, plain)
    assert (spans["A@r0"], spans["B@r0"]) == ((5.0, 7.0), (20.0, 22.0))


def test_a_collective_call_right_after_a_kernel_call_costs_collective_after_kernel_us(sim_text):
    # 5 µs per launch, 10 µs per collective call back to back, 14 µs for one right after a call of another kind.
    # A: call 0-5, kernel 5-7. ar1 after A: call 5-19. ar2 after ar1: 19-29 (back to back). B: call 29-34,
    # kernel 34-36. ar3 after B: 34-48. C: 48-53, kernel 53-55. Without the field: B 25-30 -> kernel 30-32,
    # C 40-45 -> 45-47. A graph replay calls nothing per op: unchanged.
    body = (f"  - {{name: A, {TINY}}}\n  - {{name: ar1, kind: all_reduce, bytes: 1000, stream: c}}\n"
            f"  - {{name: ar2, kind: all_reduce, bytes: 1000, stream: c}}\n  - {{name: B, {TINY}}}\n"
            f"  - {{name: ar3, kind: all_reduce, bytes: 1000, stream: c}}\n  - {{name: C, {TINY}}}\n")
    base = {"eager_per_op_us": 5.0, "eager_per_collective_us": 10.0}
    after = waves_profile(launch={**base, "collective_after_kernel_us": 14.0})
    spans, tl = sim_text(HEAD % 1 + body, after)
    assert (spans["A@r0"], spans["B@r0"], spans["C@r0"]) == ((5.0, 7.0), (34.0, 36.0), (53.0, 55.0))
    calls = {k: round(v * 1e6, 6) for k, v in tl.meta["host_call_end_s"].items()}
    assert calls == {"A@r0": 5.0, "ar1@r0": 19.0, "ar2@r0": 29.0, "B@r0": 34.0, "ar3@r0": 48.0, "C@r0": 53.0}
    spans, _ = sim_text(HEAD % 1 + body, waves_profile(launch=base))
    assert (spans["B@r0"], spans["C@r0"]) == ((30.0, 32.0), (45.0, 47.0))
    assert sim_text(HEAD % 1 + body, after, launch="cuda_graph")[0] == \
        sim_text(HEAD % 1 + body, waves_profile(launch=base), launch="cuda_graph")[0]


def test_nccl_beside_a_gemm_queue_waits_for_sms_then_runs_near_solo(sim_text):
    # The 2xH200 probe of 2026-11-30 ([evidence: 2xh200-concurrency]): a collective issued beside a queue of
    # wave-filling GEMMs on another stream waits for the running GEMM, then runs ahead of the next one at
    # ~its solo speed. Toy: A1, A2 fill the 8 SMs (10 µs each) on stream g; the all_reduce (12 µs solo, 2 SMs)
    # is issued at 0 on stream c but waits for A1's SMs: starts at 10. A2 (handed over at 10, after the
    # all_reduce) takes the 6 SMs left at 10 for [10, 20] and its last 2 CTAs when those retire: [20, 30].
    # slowdown_beside_gemm 1.25, scaled by the share of the 6 non-NCCL SMs that compute holds: over [10, 20]
    # 6/6 held, rate 1/1.25, 8 µs of the 12 done; then 2/6 held, factor 1 + 0.25/3, the last 4 µs take 13/3 µs:
    # end 20 + 13/3 = 24.333 µs.
    text = (f"  - {{name: A1, {FULL}, stream: g}}\n  - {{name: A2, {FULL}, stream: g}}\n"
            "  - {name: ar, kind: all_reduce, bytes: 1000000, stream: c}\n")
    spans, _ = sim_text(HEAD % 2 + text, waves_profile(nccl={"slowdown_beside_gemm": 1.25}))
    for r in (0, 1):
        assert spans[f"A1@r{r}"] == (0.0, 10.0)
        assert spans[f"ar@r{r}"] == (10.0, pytest.approx(20 + 13 / 3))
        assert spans[f"A2@r{r}"] == (10.0, pytest.approx(30.0))


P2P = ("  - {name: s1, kind: send, ranks: [0], peer: 1, bytes: 1000000, stream: x%s}\n"
       "  - {name: s2, kind: send, ranks: [0], peer: 1, bytes: 1000000, stream: y%s}\n"
       "  - {name: r1, kind: recv, ranks: [1], peer: 0, bytes: 1000000, stream: x%s}\n"
       "  - {name: r2, kind: recv, ranks: [1], peer: 0, bytes: 1000000, stream: y%s}\n")


def test_unbatched_p2p_serialize_on_their_communicator(sim_text):
    # lone isend/irecv: 5 µs host each (p2p_call_us defaults to eager_per_collective_us): s1 issued at 5, s2 at
    # 10; NCCL runs them in issue order: s1 [5, 16], s2 [16, 27].
    prof = waves_profile(launch={"eager_per_collective_us": 5.0})
    spans, _ = sim_text(HEAD % 2 + P2P % ("", "", "", ""), prof)
    assert spans == {"s1@r0": (5.0, 16.0), "s2@r0": (16.0, 27.0), "r1@r1": (5.0, 16.0), "r2@r1": (16.0, 27.0)}
    # unserialized (lazy init): both in flight at once from 10 µs, sharing the link: s1 does 5 µs alone, then
    # both at 1/2: s1 ends 10 + 12 = 22, s2 has 11 - 6 = 5 µs left alone: 27.
    prof = waves_profile(launch={"eager_per_collective_us": 5.0}, nccl={"unbatched_p2p_serialized": False})
    spans, _ = sim_text(HEAD % 2 + P2P % ("", "", "", ""), prof)
    assert spans["s1@r0"] == (5.0, 22.0) and spans["s2@r0"] == (10.0, 27.0)


def test_batched_p2p_is_one_call_and_one_fused_kernel(sim_text):
    # one batch_isend_irecv per rank: 1.5 x 5 = 7.5 µs host; both transfers together at 1/2 each: [7.5, 29.5]
    prof = waves_profile(launch={"eager_per_collective_us": 5.0})
    b = ", p2p_batch: b0"
    spans, _ = sim_text(HEAD % 2 + P2P % (b, b, b, b), prof)
    assert spans == {"s1@r0": (7.5, 29.5), "s2@r0": (7.5, 29.5), "r1@r1": (7.5, 29.5), "r2@r1": (7.5, 29.5)}


# rank 0 sends to 1 and receives from 1, rank 1 the mirror; {b} = ", p2p_batch: b0" for one batch_isend_irecv
EXCHANGE = ("  - {{name: s, kind: send, ranks: [0], peer: 1, bytes: 1000000, stream: ps{b}}}\n"
            "  - {{name: r, kind: recv, ranks: [0], peer: 1, bytes: 1000000, stream: pr{b}}}\n"
            "  - {{name: q, kind: recv, ranks: [1], peer: 0, bytes: 1000000, stream: pr{b}}}\n"
            "  - {{name: t, kind: send, ranks: [1], peer: 0, bytes: 1000000, stream: ps{b}}}\n")


def test_batched_exchange_uses_both_link_directions(sim_text):
    # rank 0 sends to 1 and receives from 1 in one batch (and rank 1 the mirror): the two transfers go opposite
    # ways over a full-duplex link, so neither slows the other: both [7.5, 18.5] (11 µs each, the sendrecv
    # table's exchange time). Unbatched, NCCL runs them one after the other: send [5, 16], recv [16, 27].
    prof = waves_profile(launch={"eager_per_collective_us": 5.0})
    spans, _ = sim_text(HEAD % 2 + EXCHANGE.format(b=", p2p_batch: b0"), prof)
    assert spans == {"s@r0": (7.5, 18.5), "r@r0": (7.5, 18.5), "q@r1": (7.5, 18.5), "t@r1": (7.5, 18.5)}
    spans, _ = sim_text(HEAD % 2 + EXCHANGE.format(b=""), prof)
    assert spans["s@r0"] == (5.0, 16.0) and spans["r@r0"] == (16.0, 27.0)


def test_one_way_send_is_faster_than_the_exchange_table(sim_text):
    # p2p_one_way_speedup 1.1: a lone send (reverse direction idle) takes 11 / 1.1 = 10 µs; the batched exchange
    # keeps the table's 11 µs (both directions busy); the unbatched exchange runs one way at a time: 10 + 10.
    prof = waves_profile(launch={"eager_per_collective_us": 5.0}, nccl={"p2p_one_way_speedup": 1.1})
    spans, _ = sim_text(HEAD % 2 + "  - {name: s, kind: send, ranks: [0], peer: 1, bytes: 1000000}\n"
                        "  - {name: r, kind: recv, ranks: [1], peer: 0, bytes: 1000000}\n", prof)
    assert spans["s@r0"] == (5.0, pytest.approx(15.0)) and spans["r@r1"] == (5.0, pytest.approx(15.0))
    spans, _ = sim_text(HEAD % 2 + EXCHANGE.format(b=", p2p_batch: b0"), prof)
    assert spans["s@r0"] == (7.5, pytest.approx(18.5))
    spans, _ = sim_text(HEAD % 2 + EXCHANGE.format(b=""), prof)
    assert spans["s@r0"] == (5.0, pytest.approx(15.0)) and spans["r@r0"] == (15.0, pytest.approx(25.0))


def test_p2p_serializes_with_collectives_of_its_group(sim_text):
    body = ("  - {name: s, kind: send, ranks: [0], peer: 1, bytes: 1000000, stream: x}\n"
            "  - {name: r, kind: recv, ranks: [1], peer: 0, bytes: 1000000, stream: x}\n"
            "  - {name: ar, kind: all_reduce, bytes: 1000000, stream: y}\n")
    spans, _ = sim_text(HEAD % 2 + body, waves_profile())
    assert spans["s@r0"] == (0.0, 11.0) and spans["ar@r0"] == (11.0, 23.0) and spans["ar@r1"] == (11.0, 23.0)
    # not serialized: both share the link at 1/2: s ends at 22, ar has 1 µs left alone: 23
    spans, _ = sim_text(HEAD % 2 + body, waves_profile(nccl={"unbatched_p2p_serialized": False}))
    assert spans["s@r0"] == (0.0, 22.0) and spans["ar@r0"] == (0.0, 23.0)


def test_hanging_p2p_order_is_refused_before_simulation(sim_text):
    # rank 0 sends a then b, rank 1 receives b then a (tags): NCCL pairs by issue order, so this hangs (or
    # delivers the wrong message); the graph's NCCL checks refuse it before the simulator sees it
    from schedsim.errors import DeadlockError

    body = ("  - {name: a, kind: send, ranks: [0], peer: 1, bytes: 1000000, tag: A, stream: x}\n"
            "  - {name: b, kind: send, ranks: [0], peer: 1, bytes: 1000000, tag: B, stream: y}\n"
            "  - {name: rb, kind: recv, ranks: [1], peer: 0, bytes: 1000000, tag: B, stream: y}\n"
            "  - {name: ra, kind: recv, ranks: [1], peer: 0, bytes: 1000000, tag: A, stream: x}\n")
    with pytest.raises(DeadlockError):
        sim_text(HEAD % 2 + body, waves_profile())


def test_the_retired_sharing_model_is_refused_where_it_can_be_named(tmp_path):
    """``sharing`` (processor sharing) is retired: as simulate's gpu_model, a profile file's ``gpu_model`` and
    ``predict --gpu-model`` it is a ProfileError naming where it came from, with the fix (exit 2 on the command
    line, no traceback)."""
    from typer.testing import CliRunner

    from schedsim.cli import app
    from schedsim.errors import ProfileError
    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    text = HEAD % 1 + f"  - {{name: A, {FULL}, stream: s1}}\n"
    with pytest.raises(ProfileError, match=r"^gpu_model: the 'sharing' GPU model .* is retired\n  fix: use waves"):
        simulate(lower(load_text(text, "t.yaml")), waves_profile(), gpu_model="sharing")
    with pytest.raises(ProfileError, match=r"^gpu_model: "):  # an empty name is no model, not the profile's
        simulate(lower(load_text(text, "t.yaml")), waves_profile(), gpu_model="")
    prof = tmp_path / "p.yaml"
    prof.write_text((Path(__file__).resolve().parents[1] / "data" / "unit_profile.yaml").read_text()
                    .replace("gpu_model: replay", "gpu_model: sharing"))
    with pytest.raises(ProfileError, match=rf"^{re.escape(str(prof))}: gpu_model: the 'sharing' GPU model"):
        load_profile(str(prof))
    sched = tmp_path / "s.yaml"
    sched.write_text(text)
    r = CliRunner().invoke(app, ["predict", str(sched), "--gpu-model", "sharing", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.splitlines()[:2] == [
        "error: --gpu-model: the 'sharing' GPU model (processor sharing, every running kernel slowed equally) is "
        "retired", "  fix: use waves (the default: CTAs in waves, hardware queues, schedsim.gpu.rules), or replay "
        "for a schedule of recorded durations"]
    assert not (tmp_path / "o").exists()


def test_kernels_released_together_reach_the_gpu_in_program_order(sim_text):
    # F ends at 10 and releases both the send (issued before G) and G: the send takes its 2 SMs first, G starts
    # on the other 6 and places its last 2 CTAs when those retire at 20 (G stretches to 30). The recv's kernel
    # asks for SMs once the send is handed over, so both sides run [10, 21].
    body = (f"  - {{name: F, {FULL}, ranks: [0]}}\n"
            "  - {name: s, kind: send, ranks: [0], peer: 1, bytes: 1000000, deps: [F]}\n"
            f"  - {{name: G, {FULL}, ranks: [0]}}\n"
            "  - {name: r, kind: recv, ranks: [1], peer: 0, bytes: 1000000}\n")
    spans, _ = sim_text(HEAD % 2 + body, waves_profile())
    assert spans == {"F@r0": (0.0, 10.0), "s@r0": (10.0, 21.0), "G@r0": (10.0, 30.0), "r@r1": (10.0, 21.0)}


def test_profile_contract_defaults_and_h200x2():
    from schedsim.gpu.cost import CostModel
    from schedsim.hardware.profile import load_profile

    lp = waves_profile(launch={"eager_per_op_us": 6.0, "eager_per_collective_us": 20.0}).launch
    assert (lp.p2p_call_s, lp.batch_p2p_call_s, lp.event_wait_s, lp.memcpy_call_s) == pytest.approx(
        (20e-6, 30e-6, 2e-6, 6e-6))
    assert lp.executor_extra_per_op_us == 0.0 and lp.stream_switch_s == 0.0
    p = load_profile("h200x2")
    # NCCL beside GEMMs waits for SMs, then runs at ~1.06x its solo time ([evidence: 2xh200-concurrency], 2026-11-30)
    assert p.gpu_model == "waves" and p.gpu.max_connections == 8 and p.nccl.slowdown_beside_gemm == 1.06
    # the 1 KiB all_reduce is GPU-side (6.58 µs per call back to back behind torch.cuda._sleep, schedsim calibrate
    # on 2xH200 2026-11-30 22:50; 7.2 µs inside a CUDA graph in the probes), not the 41-49 µs host call. The
    # executor and the references switch streams with torch.cuda.set_stream, not the 8.69 µs context manager
    assert CostModel(p).net.collective("all_reduce", 1024, (0, 1)) == pytest.approx(6.58e-6, rel=0.01)
    assert p.launch.stream_switch_us == 0.0 and p.gpu.cross_stream_latency_us == pytest.approx(3.15)


def test_bad_max_connections_is_a_clear_error():
    from schedsim.errors import ProfileError, SpecError
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    G = lower(load_text(HEAD % 1 + f"  - {{name: A, {TINY}}}\n", "t.yaml"))
    with pytest.raises(ProfileError, match="1-32"):
        simulate(G, waves_profile(), max_connections=33)
    with pytest.raises(ProfileError, match="gpu_model"):
        simulate(G, waves_profile(), gpu_model="fluid")
    with pytest.raises(SpecError, match="CUDA_DEVICE_MAX_CONNECTIONS"):
        load_text("schema_version: 1\nname: g\nworld_size: 1\nenv: {CUDA_DEVICE_MAX_CONNECTIONS: 0}\nops:\n"
                  f"  - {{name: A, {TINY}}}\n", "t.yaml")


def test_memory_bound_kernels_share_hbm(sim_text):
    # 1e6 B at 1000 GB/s = 1 µs each, 16 CTAs each (one per 64 KiB) on a 38-SM GPU: both resident, each
    # holding all it holds alone (16 of width 16), so the HBM load is 2 and each runs at 1/2: [0, 2] both.
    # A 6-CTA GEMM beside them is compute-bound and keeps its full rate: [0, 10].
    body = ("  - {name: a, kind: compute, bytes: 1000000, stream: s1}\n"
            "  - {name: b, kind: compute, bytes: 1000000, stream: s2}\n"
            f"  - {{name: G, {SIX}, stream: s3}}\n")
    spans, _ = sim_text(HEAD % 1 + body, waves_profile(sms=38))
    assert spans == {"a@r0": (0.0, 2.0), "b@r0": (0.0, 2.0), "G@r0": (0.0, 10.0)}


def test_memory_bound_kernel_on_the_sms_a_gemm_leaves_free(sim_text):
    # rule hbm-share. 8 SMs; A (6 CTAs, 10 µs) leaves 2 free. m moves 1e6 B (1 µs alone at 1000 GB/s): 16 CTAs of
    # 64 KiB, width 8, 2 waves of 0.5 µs. On 2 SMs, at its full-GPU speed: 8 rounds of 2 CTAs, [0, 4].
    body = f"  - {{name: A, {SIX}, stream: s1}}\n  - {{name: m, kind: compute, bytes: 1000000, stream: s2}}\n"
    spans, _ = sim_text(HEAD % 1 + body, waves_profile())
    assert spans == {"A@r0": (0.0, 10.0), "m@r0": (0.0, 4.0)}
    # an SM streams 250 GB/s on its own: beta = 8 * 250 / 1000 = 2, and the HBM load of 2 CTAs is 2/8, so
    # they run min(2, 8/2) = 2x: rounds of 0.25 µs, [0, 2]
    spans, _ = sim_text(HEAD % 1 + body, waves_profile(sm_stream_GBps=250.0))
    assert spans == {"A@r0": (0.0, 10.0), "m@r0": (0.0, 2.0)}


def test_memory_bound_kernel_takes_freed_sms_a_wave_at_a_time(sim_text):
    # rule hbm-share's waves. m moves 4e6 B (4 µs): 62 chunks of 64 KiB, capped at 4 waves of 8 CTAs (1 µs each) on 8
    # SMs. Beside A it runs 2 at a time until A ends at 10 (20 done), then its last 12 on 8 SMs in 2 rounds:
    # [0, 12]. As one wave (the rule until 2026-12-03: 8 CTAs of 4 µs) its last 2 would start at 10, end at 14.
    body = f"  - {{name: A, {SIX}, stream: s1}}\n  - {{name: m, kind: compute, bytes: 4000000, stream: s2}}\n"
    spans, _ = sim_text(HEAD % 1 + body, waves_profile())
    assert spans == {"A@r0": (0.0, 10.0), "m@r0": (0.0, 12.0)}


def test_a_lone_memory_bound_kernel_takes_its_solo_time_launched_once_or_repeated(sim_text):
    # rule hbm-share with beta = 2 (8 SMs, an SM streams 250 of 1000 GB/s): 9 chunks of 64 KiB (0.589824 µs at
    # 1000 GB/s) fill 2 whole waves, so no partial wave runs boosted and the kernel takes bytes / HBM; repeated,
    # the launches' waves follow each other; a kernel narrower than the GPU holds its 4 SMs for all 3 launches
    # (pooled, its 12 CTAs would share HBM 3 ways: the same 0.786432 µs). A GEMM of 1 CTA (TINY, 2 µs) launched
    # 3 times takes 6 µs, not 2 (until 2026-12-03 its 3 pooled CTAs ran side by side).
    prof = waves_profile(sm_stream_GBps=250.0)
    kib = 65536
    for nbytes, rep, want in ((9 * kib, 1, 0.589824), (9 * kib, 2, 1.179648), (9 * kib, 4, 2.359296),
                              (4 * kib, 3, 0.786432)):
        spans, _ = sim_text(HEAD % 1 + f"  - {{name: m, kind: compute, bytes: {nbytes}, repeat: {rep}}}\n", prof)
        assert spans["m@r0"][0] == 0.0 and spans["m@r0"][1] == pytest.approx(want), (nbytes, rep)
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: g, {TINY}, repeat: 3}}\n", prof)
    assert spans["g@r0"] == (0.0, 6.0)


def test_a_huge_repeat_keeps_one_launchs_ctas(sim_text):
    # 1e9 B (1 ms at 1000 GB/s) x 1e6 launches on 300 SMs: pooled, 2,400 x 1e6 CTAs would overflow the loops'
    # int32 counts; one launch's 2,400 CTAs (8 waves) each last 1e6 times longer: 1000 s, on every path
    body = ("  - {name: m, kind: compute, bytes: 1000000000, repeat: 1000000}\n"
            "  - {name: n, kind: compute, bytes: 1000, stream: s2}\n")
    spans, _ = sim_text(HEAD % 1 + body, waves_profile(sms=300))
    assert spans["m@r0"][1] == pytest.approx(1e9)


def test_gemm_slowdown_beside_nccl(sim_text):
    # the all_reduce (2 SMs, 12 µs) and a 6-CTA GEMM start together; the GEMM runs at 1/2 while the NCCL kernel
    # is resident: 6 µs of its 10 by 12 µs, the last 4 alone: [0, 16]
    body = f"  - {{name: ar, kind: all_reduce, bytes: 1000000}}\n  - {{name: G, {SIX}, stream: s2}}\n"
    spans, _ = sim_text(HEAD % 2 + body, waves_profile(nccl={"gemm_slowdown_beside_nccl": 2.0}))
    assert spans["ar@r0"] == (0.0, 12.0) and spans["G@r0"] == (0.0, 16.0) and spans["G@r1"] == (0.0, 16.0)


def test_cross_stream_release_latency_lets_the_same_stream_kernel_win(sim_text):
    # 3 µs cross-stream latency. A (fills the GPU, 10 µs) releases B (same stream, fills the GPU) and, on
    # another stream, the small kernel C (1 CTA). B is handed over at 10, C at 13: B takes all 8 SMs
    # at 10, so C waits for them until 20. Without the latency C, first in program order, runs at 10-12 and B
    # starts on 7 SMs at 10 and places its 8th CTA at 12: B ends at 22.
    prof = waves_profile(cross_stream_latency_us=3.0)
    body = (f"  - {{name: A, {FULL}, stream: s1}}\n  - {{name: C, {TINY}, stream: s2, deps: [A]}}\n"
            f"  - {{name: B, {FULL}, stream: s1}}\n")
    spans, tl = sim_text(HEAD % 1 + body, prof)
    assert spans == {"A@r0": (0.0, 10.0), "C@r0": (20.0, 22.0), "B@r0": (10.0, 20.0)}
    assert {s.id: round(s.ready_s * 1e6, 6) for s in tl.spans}["C@r0"] == 13.0
    spans, _ = sim_text(HEAD % 1 + body, waves_profile())
    assert spans == {"A@r0": (0.0, 10.0), "C@r0": (10.0, 12.0), "B@r0": (10.0, 22.0)}


def test_bytes_only_compute_costs_an_elementwise_call_on_the_host(sim_text):
    # eager_per_op_us 5, elementwise_call_us 3, memcpy_call_us 2: G (GEMM) issued at 5, E (bytes only: an elementwise
    # add in execute and the references) at 5 + 3 = 8, F (duration only: a busy kernel, a launch) at 8 + 5 = 13,
    # C (an h2d copy) at 13 + 2 = 15.
    body = (f"  - {{name: G, {TINY}, stream: a}}\n  - {{name: E, kind: compute, bytes: 1000, stream: b}}\n"
            "  - {name: F, kind: compute, duration_us: 1, stream: c}\n"
            "  - {name: C, kind: memcpy, bytes: 4096, direction: h2d, stream: d}\n")
    prof = waves_profile(launch={"eager_per_op_us": 5.0, "elementwise_call_us": 3.0, "memcpy_call_us": 2.0})
    _, tl = sim_text(HEAD % 1 + body, prof)
    assert {s.id: round(s.ready_s * 1e6, 6) for s in tl.spans} == {"G@r0": 5.0, "E@r0": 8.0, "F@r0": 13.0,
                                                                    "C@r0": 15.0}
    # without a measured elementwise call the add costs half a kernel launch: E at 7.5, F at 12.5, C at 14.5
    prof = waves_profile(launch={"eager_per_op_us": 5.0, "memcpy_call_us": 2.0})
    _, tl = sim_text(HEAD % 1 + body, prof)
    assert {s.id: round(s.ready_s * 1e6, 6) for s in tl.spans} == {"G@r0": 5.0, "E@r0": 7.5, "F@r0": 12.5,
                                                                    "C@r0": 14.5}


def test_many_rank_collective_runs_at_its_slowest_ends_rate(sim_text):
    # An all_reduce over 8 ranks, each rank's NCCL kernel resident at 0 (2 SMs). Beside it: rank 3 one 6-CTA
    # GEMM [0, 10], rank 6 two in a row [0, 20], rank 5 a 4-CTA GEMM [0, 30]. With slowdown_beside_gemm 3.0,
    # rule nccl-sms gives per rank 1 + 2·held/6: 3 on ranks 3 and 6 (6 SMs held), 7/3 on rank 5 (4 held), 1 elsewhere;
    # the transfer runs at the slowest: 1/3 over [0, 20] (two ranks at the minimum, then one, then none), 3/7
    # over [20, 30], then 1. With T its solo time, it ends at 30 + T − (20/3 + 30/7). This exercises the
    # incremental minimum of the waves loop (a new minimum, ties leaving it, the last end at it rising).
    p = waves_profile(nccl={"slowdown_beside_gemm": 3.0})
    d = p.model_dump()
    # a 4-CTA GEMM of 30 µs; 512x128x128, not 256x256x128, which is no larger than 256x384x128 (10 µs): a table
    # where a smaller GEMM is slower is made monotone by the cost model (schedsim.monotone.isotonic
    # on the surface of schedsim.gpu.gemm)
    d["gemm"]["entries"].append(["fp32", 512, 128, 128, 0.030])
    from schedsim.hardware.profile import HardwareProfile

    text = ("  - {name: ar, kind: all_reduce, bytes: 1000000, stream: c}\n"
            f"  - {{name: A, {SIX}, ranks: [3, 6], stream: g}}\n"
            f"  - {{name: B, {SIX}, ranks: [6], stream: g}}\n"
            "  - {name: Q, kind: matmul, m: 512, n: 128, k: 128, ranks: [5], stream: g}\n")
    spans, tl = sim_text(HEAD % 8 + text, HardwareProfile.model_validate(d))
    assert spans["A@r3"] == (0.0, 10.0) and spans["B@r6"] == (10.0, 20.0) and spans["Q@r5"] == (0.0, 30.0)
    solo = next(s.solo_s for s in tl.spans if s.id == "ar@r0") * 1e6
    assert solo > 20 / 3 + 30 / 7  # still running after 30
    for r in range(8):
        assert spans[f"ar@r{r}"] == (0.0, pytest.approx(30 + solo - (20 / 3 + 30 / 7)))


def test_h2d_and_d2h_copies_slow_each_other(sim_text):
    from schedsim.hardware.profile import HardwareProfile

    d = waves_profile().model_dump()
    d["contention"].update(h2d_slowdown_beside_d2h=1.0, d2h_slowdown_beside_h2d=0.25)
    prof = HardwareProfile.model_validate(d)
    for d2h_bytes, expect in (
        # h2d 10 µs solo (100 kB at 10 GB/s), d2h 5 µs solo. Together: d2h at 1/1.25 ends at 6.25; h2d at 1/2 did
        # 3.125 µs of work by then, the other 6.875 at full rate: ends at 13.125.
        (50_000, {"H@r0": (0.0, 13.125), "D@r0": (0.0, 6.25)}),
        # d2h 20 µs solo: h2d at 1/2 ends at 20; d2h at 1/1.25 did 16 of 20 by then, ends at 24.
        (200_000, {"H@r0": (0.0, 20.0), "D@r0": (0.0, 24.0)}),
    ):
        body = ("  - {name: H, kind: memcpy, direction: h2d, bytes: 100000, stream: a}\n"
                f"  - {{name: D, kind: memcpy, direction: d2h, bytes: {d2h_bytes}, stream: b}}\n"
                "  - {name: X, kind: memcpy, direction: d2d, bytes: 10000000, stream: c}\n")  # no reverse engine
        spans, _ = sim_text(HEAD % 1 + body, prof)
        assert {k: v for k, v in spans.items() if k != "X@r0"} == {k: pytest.approx(v) for k, v in expect.items()}
        assert spans["X@r0"] == pytest.approx((0.0, 20.0))  # d2d: 1e7 B read + written at 1000 GB/s, unslowed


def _with_reduce(prof, *rows):
    return prof.model_copy(update={"gemm": prof.gemm.model_copy(update={"reduce": list(rows)})})


def test_split_k_reduction_runs_as_a_second_kernel_in_the_fifo(sim_text):
    # rule split-k. FULL (8 CTAs, 10 us in the table) with a reduction row of 8 CTAs and 2 us: alone, its main kernel
    # runs 8 us on the 8 SMs, then the reduction one wave of 2 us: the op still spans the table's 10 us
    prof = _with_reduce(waves_profile(), ("fp32", 256, 512, 1024, 8, 2.0))
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: A, {FULL}, stream: s1}}\n", prof)
    assert spans == {"A@r0": (0.0, 10.0)}
    # B (SIX: 6 CTAs, 10 us, no row) handed over at 0 waits for SMs. A's main kernel ends at 8 and only then hands
    # its reduction over, behind B in the FIFO: B takes 6 SMs at 8 (ends 18), the reduction the other 2 in four
    # rounds of 2 us (8-16). One kernel per GEMM gave A [0, 10], B [10, 20]
    text = f"  - {{name: A, {FULL}, stream: s1}}\n  - {{name: B, {SIX}, stream: s2}}\n"
    spans, _ = sim_text(HEAD % 1 + text, prof)
    assert spans == {"A@r0": (0.0, 16.0), "B@r0": (8.0, 18.0)}
    spans, _ = sim_text(HEAD % 1 + text, waves_profile())
    assert spans == {"A@r0": (0.0, 10.0), "B@r0": (10.0, 20.0)}
    # a reduction row longer than half the op (8 us of 10) keeps half: main 5 us, reduction 5 us, the op alone
    # still spans its table's 10 us (before: main max(10 - 8, 5) = 5 plus the full 8, 13 us)
    long = _with_reduce(waves_profile(), ("fp32", 256, 512, 1024, 8, 8.0))
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: A, {FULL}, stream: s1}}\n", long)
    assert spans == {"A@r0": (0.0, 10.0)}
    # a repeated GEMM (repeat: 2) runs as one job: no reduction kernel of its own
    spans, _ = sim_text(HEAD % 1 + f"  - {{name: A, {FULL}, repeat: 2, stream: s1}}\n", prof)
    assert spans == {"A@r0": (0.0, 20.0)}


@pytest.mark.parametrize("path", ["python", "columns"])
def test_a_split_k_reduction_is_its_queues_next_item(monkeypatch, path):
    """Rule hardware-queues with rule split-k: the reduction is issued right behind its main kernel, so a kernel of
    another stream
    that shares the hardware queue waits until the queue handed the reduction over. A (FULL, reduction 8 CTAs of
    2 us) on s1, B (SIX) on s2, one connection: A's main kernel holds the 8 SMs over [0, 8], its reduction is
    handed over at 8 and runs [8, 10]; only then is B handed over, and it takes 6 SMs at 10: A [0, 10],
    B [10, 20] (B's stream-reached time 8). Before, B was handed over at 0, took the SMs at 8 ahead of the
    reduction, and A ran to 16 (and B [8, 18]). With 8 queues B does overtake it (the FIFO test above)."""
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text
    from tests.oracle.engine import simulate_reference

    prof = _with_reduce(waves_profile(max_connections=1), ("fp32", 256, 512, 1024, 8, 2.0))
    text = HEAD % 1 + f"  - {{name: A, {FULL}, stream: s1}}\n  - {{name: B, {SIX}, stream: s2}}\n"
    spec = load_text(text, "t.yaml")
    tl = (simulate if path == "columns" else simulate_reference)(lower(spec), prof)
    got = {s.id: (round(s.start_s * 1e6, 6), round(s.end_s * 1e6, 6), round(s.stream_s * 1e6, 6)) for s in tl.spans}
    assert got == {"A@r0": (0.0, 10.0, 0.0), "B@r0": (10.0, 20.0, 8.0)}


def _spans(path, monkeypatch, text, prof):  # type: ignore[no-untyped-def]
    """{op id: (start µs, end µs)} from the oracle's Python loop or the package's columns path."""
    tl = _timeline(path, monkeypatch, text, prof)
    return {s.id: (round(s.start_s * 1e6, 6), round(s.end_s * 1e6, 6)) for s in tl.spans}


def _timeline(path, monkeypatch, text, prof):  # type: ignore[no-untyped-def]
    """The timeline of the oracle's Python loop or the package's columns path."""
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text
    from tests.oracle.engine import simulate_reference

    spec = load_text(text, "t.yaml")
    return (simulate if path == "columns" else simulate_reference)(lower(spec), prof)


@pytest.mark.parametrize("path", ["python", "columns"])
def test_a_waiting_gemm_fills_the_ragged_end_of_the_last_wave(monkeypatch, path):
    """Rule wave-tail, a 2 us tail on waves of 10 us: f = 0.2. A and B fill the 8 SMs (10 us each alone). B waits in the
    FIFO while A runs, so A's only wave runs at 1 / 0.8: A [0, 8]; nothing waits behind B: B [8, 18] (no tail:
    [0, 10], [10, 20])."""
    prof = waves_profile(wave_tail_us=2.0)
    two = HEAD % 1 + f"  - {{name: A, {FULL}, stream: s1}}\n  - {{name: B, {FULL}, stream: s2}}\n"
    assert _spans(path, monkeypatch, two, prof) == {"A@r0": (0.0, 8.0), "B@r0": (8.0, 18.0)}
    # the tail is a time: 5 us would be half the wave, capped at a quarter (TAIL_CAP): A at 4/3, ends at 7.5
    assert _spans(path, monkeypatch, two, waves_profile(wave_tail_us=5.0)) == {"A@r0": (0.0, 7.5), "B@r0": (7.5, 17.5)}
    # A (SIX) takes 6 SMs, B its 2 CTAs on the other 2 at 0 and waits for 6 more. A is filled: ends at 8. B's
    # first batch is not (B still has CTAs to place): it runs [0, 10]; its other 6 CTAs go at 8, when nothing is
    # left waiting: [8, 18]. No tail: A [0, 10], B [0, 20].
    mixed = HEAD % 1 + f"  - {{name: A, {SIX}, stream: s1}}\n  - {{name: B, {FULL}, stream: s2}}\n"
    assert _spans(path, monkeypatch, mixed, prof) == {"A@r0": (0.0, 8.0), "B@r0": (0.0, 18.0)}
    assert _spans(path, monkeypatch, mixed, waves_profile()) == {"A@r0": (0.0, 10.0), "B@r0": (0.0, 20.0)}
    # one stream: the successor is not handed over before A ends, nothing waits, the table times stand
    one = HEAD % 1 + f"  - {{name: A, {FULL}, stream: s1}}\n  - {{name: B, {FULL}, stream: s1}}\n"
    assert _spans(path, monkeypatch, one, prof) == {"A@r0": (0.0, 10.0), "B@r0": (10.0, 20.0)}
    # with split-K reductions (rule split-k; 8 CTAs, 2 us) A and B run main kernels of 8 us waves, filled at the cap
    # (2/8 = 0.25): A's [0, 6] while B waits; B, handed over at 0, is ahead of A's reduction and runs its main
    # kernel [6, 12] while that reduction waits; the reductions get no gain: A's [12, 14], B's [14, 16]. Without
    # the tail: A's main [0, 8], B's [8, 16], A's reduction [16, 18], B's [18, 20]
    red = _with_reduce(prof, ("fp32", 256, 512, 1024, 8, 2.0))
    assert _spans(path, monkeypatch, two, red) == {"A@r0": (0.0, 14.0), "B@r0": (6.0, 16.0)}
    red0 = _with_reduce(waves_profile(), ("fp32", 256, 512, 1024, 8, 2.0))
    assert _spans(path, monkeypatch, two, red0) == {"A@r0": (0.0, 18.0), "B@r0": (8.0, 20.0)}
    # an NCCL kernel waiting for its 2 SMs does not fill a GEMM's wave end (it needs a few SMs, not every one
    # that frees): A keeps its 10 us on both ranks, the all_reduce starts at 10 (12 us alone)
    nccl = HEAD % 2 + (f"  - {{name: A, {FULL}, stream: s1}}\n"
                       "  - {name: ar, kind: all_reduce, bytes: 1000000, stream: c}\n")
    got = _spans(path, monkeypatch, nccl, prof)
    assert got == {"A@r0": (0.0, 10.0), "A@r1": (0.0, 10.0), "ar@r0": (10.0, 22.0), "ar@r1": (10.0, 22.0)}


@pytest.mark.parametrize("path", ["python", "columns"])
def test_a_gemm_shape_with_a_call_row_costs_its_multiple_of_a_launch_on_the_host(monkeypatch, path):
    """Rule host-issue with ``gemm.call``: eager_per_op_us 5; FULL's row 1.6 (a split-K call launching two kernels),
    TINY none. A (FULL) is issued at 5 · 1.6 = 8, T (TINY) at 8 + 5 = 13, B (FULL, repeat 2: two calls) at
    13 + 2 · 8 = 29. A call's extra over the one-kernel call (the split-K reduction's launch) comes after its main
    kernel's launch (rule host-issue, gpu.host.kernel_release): A's kernel reaches the GPU at 8 − 3 = 5, T's at 13,
    B's at 29 − 2 · 3 = 23. All on their own streams with no wait for SMs: each is ready then (stream_s = its call
    start: A 0, T 8, B 13). A CUDA graph replay has no per-op calls: every op at graph_launch_us (2)."""
    d = waves_profile(launch={"eager_per_op_us": 5.0, "graph_launch_us": 2.0}).model_dump()
    d["gemm"]["call"] = [["fp32", 256, 512, 1024, 1.6]]
    from schedsim.hardware.profile import HardwareProfile

    prof = HardwareProfile.model_validate(d)
    text = HEAD % 1 + (f"  - {{name: A, {FULL}, stream: s1}}\n  - {{name: T, {TINY}, stream: s2}}\n"
                       f"  - {{name: B, {FULL}, repeat: 2, stream: s3}}\n")
    tl = _timeline(path, monkeypatch, text, prof)
    got = {s.id: (round(s.stream_s * 1e6, 6), round(s.ready_s * 1e6, 6)) for s in tl.spans}
    assert got == {"A@r0": (0.0, 5.0), "T@r0": (8.0, 13.0), "B@r0": (13.0, 23.0)}
    assert tl.meta["host_issue_s"] == [pytest.approx(29e-6)]  # the host itself returns from B's calls at 29
    graph = _timeline(path, monkeypatch, text.replace("name: g\n", "name: g\nlaunch: cuda_graph\n"), prof)
    assert {s.id: round(s.ready_s * 1e6, 6) for s in graph.spans} == {"A@r0": 2.0, "T@r0": 2.0, "B@r0": 2.0}


DUR = "kind: compute, duration_us: 10"  # a kernel of unknown grid (rule cta-count): 8 − 2 = 6 CTAs of 10 µs


@pytest.mark.parametrize("path", ["python", "columns"])
def test_a_duration_only_op_leaves_room_for_an_nccl_kernel(monkeypatch, path):
    """Rule cta-count: a ``compute`` op given only a duration holds SMs − sms_per_collective = 6 of the 8 SMs, in one
    wave. With slowdown_beside_gemm 1.5 the all_reduce (12 µs alone, 2 SMs) runs at 1 / (1 + 0.5·min(1, 6/6))
    = 2/3 while D's 6 CTAs are resident: 10 · 2/3 = 20/3 µs of its 12 by 10, the other 16/3 alone, so it ends
    at 10 + 16/3 = 15.333 µs. Both start at 0 in either issue order, and D keeps its 10 µs (when it filled the
    GPU, the all_reduce issued after it started at 10, and D issued after the resident all_reduce ran its last
    2 CTAs in a second wave: [0, 20])."""
    prof = waves_profile(nccl={"slowdown_beside_gemm": 1.5})
    end = pytest.approx(10 + 16 / 3)
    ar = "  - {name: ar, kind: all_reduce, bytes: 1000000, stream: c}\n"
    d = f"  - {{name: D, {DUR}, stream: s1}}\n"
    for text in (HEAD % 2 + d + ar, HEAD % 2 + ar + d):
        got = _spans(path, monkeypatch, text, prof)
        assert got == {"D@r0": (0.0, 10.0), "D@r1": (0.0, 10.0), "ar@r0": (0.0, end), "ar@r1": (0.0, end)}
    # a resident send/recv (11 µs alone) does not split it either; alone it takes its duration
    p2p = ("  - {name: s, kind: send, ranks: [0], peer: 1, bytes: 1000000, stream: c}\n"
           "  - {name: r, kind: recv, ranks: [1], peer: 0, bytes: 1000000, stream: c}\n")
    got = _spans(path, monkeypatch, HEAD % 2 + p2p + d, waves_profile())
    assert got["D@r0"] == got["D@r1"] == (0.0, 10.0) and got["s@r0"] == got["r@r1"] == (0.0, 11.0)
    assert _spans(path, monkeypatch, HEAD % 1 + d, waves_profile()) == {"D@r0": (0.0, 10.0)}
    # two of them on two streams still share the GPU: E takes the 2 SMs D leaves free at 0, the rest at 10
    two = HEAD % 1 + d + f"  - {{name: E, {DUR}, stream: s2}}\n"
    assert _spans(path, monkeypatch, two, waves_profile()) == {"D@r0": (0.0, 10.0), "E@r0": (0.0, 20.0)}


def _stage_times_pipeline(schedule: str) -> float:
    """Makespan (s) on ``h200`` of a 4-stage pipeline of 16 microbatches whose stages are given as measured
    times only (F = I = W = 1 ms, as the Zero Bubble paper feeds its schedules), 8 MiB activations."""
    from schedsim import api

    text = ("schema_version: 1\nname: zb\nworld_size: 4\npipeline:\n"
            f"  schedule: {schedule}\n  p: 4\n  m: 16\n  activation_bytes: 8388608\n  stage:\n"
            "    forward: [{name: fwd, kind: compute, duration_us: 1000}]\n"
            "    backward_input: [{name: dgrad, kind: compute, duration_us: 1000}]\n"
            "    backward_weight: [{name: wgrad, kind: compute, duration_us: 1000}]\n")
    return float(api.predict(api.load_text(text), "h200").timeline.makespan_s)


def test_zb_h1_beats_1f1b_with_measured_stage_times():
    """With stages given as durations (kernels of unknown grid, rule cta-count), ZB-H1 comes out faster than 1F1B, as
    measured (PaddlePaddle issue 62865: 0.868×), and each is near its closed form (Qi et al., arXiv 2401.10241):
    1F1B (m + p − 1)(F + B + W) = 19 · 3 = 57 ms, ZB-H1 m(F + B + W) + (p − 1)(F + B − W) = 48 + 3 = 51 ms, plus
    the p2p time on the critical path. When such an op filled the GPU, ZB-H1's overlapped sends and recvs
    split it into two waves: ZB-H1 64.3 ms against 1F1B 58.1 ms. 1F1B's synchronised hops are on its path, at most
    2(m + p − 1) = 38 of them, each 8 MiB on 8 of NCCL's channels in a 4-rank communicator (nChannelsMin 32 → 8)
    at 14 GB/s: 74.9 µs plus the latency (schedsim.network.p2p_channels)."""
    from schedsim.hardware.profile import load_profile
    from schedsim.network import NcclNetwork

    net = NcclNetwork(load_profile("h200"))
    assert net.p2p_channels(8 << 20, (0, 1, 2, 3)) == 8
    hop = net.p2p(0, 1, 8 << 20, (0, 1, 2, 3)).seconds
    assert (8 << 20) / 112e9 < hop < (8 << 20) / 112e9 + 20e-6
    zb, base = _stage_times_pipeline("zb_h1"), _stage_times_pipeline("1f1b")
    assert 57e-3 + 19 * hop <= base <= 57e-3 + 38 * hop
    assert 51e-3 <= zb <= 51e-3 * 1.03
    assert zb / base < 0.9
