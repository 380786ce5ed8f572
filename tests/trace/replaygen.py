"""Hand-built Kineto traces for the replay schedule (:mod:`schedsim.trace.to_schedule`), times in µs.

One rank (``rank_doc``): a host thread launches, in this order,

=====  ==========================  ============  =========  ================================
corr   runtime call (ts, dur)      GPU op        stream     GPU time
=====  ==========================  ============  =========  ================================
1      cudaLaunchKernel 1000, 5    A ``gemm``    7          1010 - 1110
2      cudaEventRecord 1006, 1     (after A on 7)
3      cudaStreamWaitEvent 1008, 1 (stream 20 waits for it; ``cuda_sync`` row)
4      cudaLaunchKernel 1010, 5    B ``ew``      20         1110 - +``b_us`` (50; waits for A)
5      cudaLaunchKernel 1016, 5    C ``ew``      7          1110 - 1140 (after A)
6      cudaLaunchKernel 1022, 5    AR all_reduce 20         ``ar_start`` - +``ar_us``
7      cudaDeviceSynchronize       (only with ``sync``: 1030 until AR's end)
8      cudaLaunchKernel            D ``tail``    7          (only with ``sync``) 7 µs after the sync returns, 20
=====  ==========================  ============  =========  ================================

Issue times (min(call end, GPU start)): 1005, 1015, 1021, 1027 (, sync end + 5). GPU-bound without ``sync``:
every op after A starts at a predecessor's end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _rt(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "External id": corr}}


def _k(name: str, stream: int, ts: float, dur: float, corr: int, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, **args}}


def rank_doc(rank: int = 0, world: int = 2, *, ar_start: float = 1160.0, ar_us: float = 40.0, b_us: float = 50.0,
             sync: bool = False, cuda_sync: bool = True) -> dict[str, Any]:
    """One rank's trace (module docstring). ``cuda_sync=False`` drops the ``cuda_sync`` row (the wait is then
    paired with the record from the runtime rows alone)."""
    coll = {"Collective name": "allreduce", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20, "Group size": world,
            "dtype": "Float", "Process Group Name": "0", "Process Group Ranks": json.dumps(list(range(world)))}
    ev: list[dict[str, Any]] = [
        _rt("cudaLaunchKernel", 1000, 5, 1), _k("void gemm<float>(float*)", 7, 1010, 100, 1),
        _rt("cudaEventRecord", 1006, 1, 2), _rt("cudaStreamWaitEvent", 1008, 1, 3),
        _rt("cudaLaunchKernel", 1010, 5, 4), _k("void ew<float>(float*)", 20, 1110, b_us, 4),
        _rt("cudaLaunchKernel", 1016, 5, 5), _k("void ew<float>(float*)", 7, 1110, 30, 5),
        _rt("cudaLaunchKernel", 1022, 5, 6),
        _k("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 20, ar_start, ar_us, 6,
           **coll),
    ]
    if cuda_sync:
        ev.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 20, "ts": 1009,
                   "dur": 0, "args": {"cuda_sync_kind": "Stream Wait Event", "device": 0, "stream": 20,
                                      "correlation": 3, "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 2}})
    if sync:
        end = ar_start + ar_us
        ev += [_rt("cudaDeviceSynchronize", 1030, end - 1030, 7), _rt("cudaLaunchKernel", end + 5, 5, 8),
               _k("void tail<float>(float*)", 7, end + 7, 20, 8)]
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": world, "backend": "nccl"},
            "traceEvents": ev}


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def layers_doc(layers: int, *, rank: int = 0, launch_us: float = 4.0, a_us: float = 30.0, b_us: float = 12.0,
               c_us: float = 9.0) -> dict[str, Any]:
    """A multi-stream run of ``layers`` repeats: the host launches every ``launch_us`` µs (calls of 2 µs) A on
    stream 7, records an event, makes stream 20 wait for it and launches B there, then C on stream 7. The GPU
    runs each op at max(its launch call's end, its stream predecessor's end, for B: A's end) (launch latency 0),
    so the trace is what a replay must reproduce exactly (``cuda_sync`` rows included)."""
    ev: list[dict[str, Any]] = []
    t_host = 1000.0
    end = {7: 0.0, 20: 0.0}
    corr = 1
    for _ in range(layers):
        ev.append(_rt("cudaLaunchKernel", t_host, 2, corr))
        a0 = max(t_host + 2, end[7])
        ev.append(_k("void gemm<float>(float*)", 7, a0, a_us, corr))
        end[7] = a_end = a0 + a_us
        rec = corr + 1
        ev.append(_rt("cudaEventRecord", t_host + 2.5, 0.5, rec))
        ev.append(_rt("cudaStreamWaitEvent", t_host + 3, 0.5, corr + 2))
        ev.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 20, "ts": t_host + 3,
                   "dur": 0, "args": {"device": 0, "stream": 20, "correlation": corr + 2, "wait_on_stream": 7,
                                      "wait_on_cuda_event_record_corr_id": rec}})
        t_host += launch_us
        ev.append(_rt("cudaLaunchKernel", t_host, 2, corr + 3))
        b0 = max(t_host + 2, end[20], a_end)
        ev.append(_k("void ew<float>(float*)", 20, b0, b_us, corr + 3))
        end[20] = b0 + b_us
        t_host += launch_us
        ev.append(_rt("cudaLaunchKernel", t_host, 2, corr + 4))
        c0 = max(t_host + 2, end[7])
        ev.append(_k("void ew<float>(float*)", 7, c0, c_us, corr + 4))
        end[7] = c0 + c_us
        t_host += launch_us
        corr += 5
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 1}, "traceEvents": ev}


def two_streams_doc() -> dict[str, Any]:
    """The host launches (calls of 2 µs) A on stream 7 at 1000 µs (GPU 1002-1102), B on stream 7 at 1004 (behind
    A: 1102-1112), C on stream 20 at 1008 (1010-1060), recorded with more connections than streams."""
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [
        _rt("cudaLaunchKernel", 1000, 2, 1), _k("void gemm<float>(float*)", 7, 1002, 100, 1),
        _rt("cudaLaunchKernel", 1004, 2, 2), _k("void ew<float>(float*)", 7, 1102, 10, 2),
        _rt("cudaLaunchKernel", 1008, 2, 3), _k("void other<float>(float*)", 20, 1010, 50, 3)]}


def graph_doc() -> dict[str, Any]:
    """An eager kernel ``pre`` (s7, call 1000 µs, GPU 1002-1012), an event record/wait pair (no op on another
    stream to wait for), a cudaGraphLaunch at 1020 returning at 1030 whose nodes ran g1 (s7, 1025-1045), g2 (s7,
    1047-1057) and g3 (s9, 1058-1068: the graph's edge from g2), then an eager ``post`` (s7, call 1080, GPU
    1082-1092)."""
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [
        _rt("cudaLaunchKernel", 1000, 2, 1), _k("void pre(float*)", 7, 1002, 10, 1),
        _rt("cudaEventRecord", 1013, 1, 2), _rt("cudaStreamWaitEvent", 1015, 1, 3),
        _rt("cudaGraphLaunch", 1020, 10, 4), _k("void g1(float*)", 7, 1025, 20, 4),
        _k("void g2(float*)", 7, 1047, 10, 4), _k("void g3(float*)", 9, 1058, 10, 4),
        _rt("cudaLaunchKernel", 1080, 2, 5), _k("void post(float*)", 7, 1082, 10, 5)]}


def path_docs() -> list[dict[str, Any]]:
    """Two ranks (µs) whose critical path runs host → GPU → a collective's last rank → host sync → host → GPU.

    Rank 1 launches (calls of 5 µs) ``p`` (s7, GPU 1006-1010) at 1000, ``q`` (1036-1040) at 1030: host-bound, its
    kernels wait for their launches; then ``x`` (1056-1256) at 1050 and ``y`` (1256-1280) at 1060: a GPU chain;
    the all-reduce at 1070 (1280-1300); a ``cudaDeviceSynchronize`` 1080-1300; ``z`` (1310-1315) at 1304.
    Rank 0 launches ``a`` (1006-1106) at 1000 and the all-reduce at 1010: its NCCL kernel runs 1106-1300, waiting
    for rank 1 until 1280; then a ``cudaDeviceSynchronize`` 1020-1300 and ``e`` (1311-1331) at 1305.

    Issues (min(call end, GPU start)): rank 1 1005, 1035, 1055, 1065, 1075, 1309; rank 0 1005, 1015, 1310.
    """
    def coll(corr: int, ts: float, dur: float) -> dict[str, Any]:
        return _k("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 7, ts, dur,
                  corr, **{"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
                           "Group size": 2, "dtype": "Float", "Process Group Name": "0",
                           "Process Group Ranks": "[0, 1]"})

    r1 = [_rt("cudaLaunchKernel", 1000, 5, 1), _k("void p(float*)", 7, 1006, 4, 1),
          _rt("cudaLaunchKernel", 1030, 5, 2), _k("void q(float*)", 7, 1036, 4, 2),
          _rt("cudaLaunchKernel", 1050, 5, 3), _k("void x(float*)", 7, 1056, 200, 3),
          _rt("cudaLaunchKernel", 1060, 5, 4), _k("void y(float*)", 7, 1256, 24, 4),
          _rt("cudaLaunchKernel", 1070, 5, 5), coll(5, 1280, 20),
          _rt("cudaDeviceSynchronize", 1080, 220, 6),
          _rt("cudaLaunchKernel", 1304, 5, 7), _k("void z(float*)", 7, 1310, 5, 7)]
    r0 = [_rt("cudaLaunchKernel", 1000, 5, 1), _k("void a(float*)", 7, 1006, 100, 1),
          _rt("cudaLaunchKernel", 1010, 5, 2), coll(2, 1106, 194),
          _rt("cudaDeviceSynchronize", 1020, 280, 3),
          _rt("cudaLaunchKernel", 1305, 5, 4), _k("void e(float*)", 7, 1311, 20, 4)]
    return [{"schemaVersion": 1, "distributedInfo": {"rank": r, "world_size": 2, "backend": "nccl"},
             "traceEvents": ev} for r, ev in ((0, r0), (1, r1))]
