"""Build small Nsight Systems SQLite exports that follow NVIDIA's documented exporter schema.

nsys cannot produce reports on these machines, so tests build the tables
themselves: ``StringIds``, ``CUPTI_ACTIVITY_KIND_KERNEL``/``_MEMCPY``/``_RUNTIME``,
``NVTX_EVENTS`` (59 = push/pop, 60 = start/end, ``text`` or ``textId``) and
``TARGET_INFO_SESSION_START_TIME``, with the column names of nsys 2022-2024.

The scenario is a Megatron-like capture under ``emit_nvtx``: two processes
(pids 100 and 101), one GPU each, a compute stream 7 and an NCCL stream 20.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

KERNEL_COLS = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName",
               "shortName", "mangledName", "gridX", "blockX"]


def gtid(pid: int, tid: int) -> int:
    return (pid << 24) | tid


def gpid(pid: int) -> int:
    return pid << 24


def make_nsys_db(
    path: Path,
    *,
    drop_tables: tuple[str, ...] = (),
    drop_kernel_cols: tuple[str, ...] = (),
    extra_kernel_cols: tuple[str, ...] = (),
    session_start_ns: int = 1_700_000_000_000_000_000,
    pids: tuple[int, ...] = (100, 101),
    op_ranges: bool = True,
) -> dict[str, Any]:
    """Write the scenario to ``path``; return what the tests expect to read back."""
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
        return strings[s]

    kernels: list[tuple[Any, ...]] = []
    runtime: list[tuple[Any, ...]] = []
    nvtx: list[tuple[Any, ...]] = []
    memcpy: list[tuple[Any, ...]] = []
    corr = [1000]

    def launch(pid: int, dev: int, t: int, stream: int, short: str, dur: int, gap: int = 2_000) -> tuple[int, int]:
        """A cudaLaunchKernel at CPU time t and its kernel starting gap ns later."""
        corr[0] += 1
        c = corr[0]
        runtime.append((t, t + 500, 0, gtid(pid, 1), c, sid("cudaLaunchKernel_v7000"), 0))
        full = f"void {short}<float>(float*, int)" if not short.startswith("nccl") else f"{short}(ncclDevComm*, unsigned long, ncclWork*)"
        ks = t + gap
        kernels.append((ks, ks + dur, dev, 1, stream, c, gpid(pid), sid(full), sid(short), sid("_Z" + short), 1, 128))
        return ks, ks + dur

    def rng(pid: int, start: int, end: int, text: str | None = None, text_id: str | None = None, etype: int = 59) -> None:
        nvtx.append((start, end, etype, None, None, None, text, gtid(pid, 1), None,
                     sid(text_id) if text_id else None, 0))

    expect: dict[str, Any] = {"ranges": [], "ops": {}}
    for r, pid in enumerate(pids):
        dev = r
        t = 1_000_000 + r * 1_000  # ns
        rng(pid, t - 500, t + 2_000_000, text="iteration 0")
        # forward: aten::mm whose cutlass kernel is called "Kernel" (analyze names it after its NVTX range)
        for i in range(3):
            rs = t + i * 100_000
            rng(pid, rs, rs + 50_000, text=f"aten::mm, seq = {i}, op_id = {10 + i}, sizes = [[64, 64], [64, 64]], input_op_ids = []")
            launch(pid, dev, rs + 1_000, 7, "Kernel", 20_000 + 1_000 * i + 333 * r)
            launch(pid, dev, rs + 2_000, 7, "elementwise_kernel", 3_000 + 7 * i)
        t += 400_000
        # a cudaStreamSynchronize (no kernel) and a memcpy launched by cudaMemcpyAsync
        runtime.append((t, t + 100, 0, gtid(pid, 1), 99_000 + r, sid("cudaStreamSynchronize"), 0))
        corr[0] += 1
        runtime.append((t + 200, t + 300, 0, gtid(pid, 1), corr[0], sid("cudaMemcpyAsync"), 0))
        memcpy.append((t + 1_000, t + 9_000, dev, 1, 7, corr[0], gpid(pid), 1 << 20, 1))
        t += 20_000
        # NCCL: all_reduce of [[1024, 4096]] on the NCCL stream, twice; one send of [[3], [3]]
        for i in range(2):
            rs = t + i * 200_000
            rng(pid, rs, rs + 10_000,
                text=f"nccl:all_reduce, seq = {i}, op_id = {50 + i}, sizes = [[1024, 4096]], input_op_ids = [(10, 0)]")
            launch(pid, dev, rs + 1_000, 20, "ncclKernel_AllReduce_RING_LL_Sum_float", 150_000 + 5_000 * r, gap=5_000)
        t += 400_000
        rng(pid, t, t + 5_000, text="nccl:send, seq = 9, op_id = 60, sizes = [[3], [3]], input_op_ids = []")
        launch(pid, dev, t + 1_000, 20, "ncclDevKernel_SendRecv", 30_000)
        t += 100_000
        if op_ranges:
            # schedule ops: a start/end range named by op id, and a registered-string (textId) push/pop range
            rng(pid, t, t + 30_000, text=f"mm0@r{r}", etype=60)
            k0 = launch(pid, dev, t + 1_000, 7, "ampere_sgemm_128x64_nn", 40_000)
            k1 = launch(pid, dev, t + 2_000, 7, "elementwise_kernel", 5_000, gap=45_000)
            expect["ops"][f"mm0@r{r}"] = (k0[0], k1[1])
            t += 200_000
            rng(pid, t, t + 30_000, text_id="ag0")
            k2 = launch(pid, dev, t + 1_000, 20, "ncclDevKernel_AllGather_RING_LL", 60_000)
            expect["ops"][f"ag0@r{r}"] = (k2[0], k2[1])
            t += 200_000
        rng(pid, t, t + 1_000, text_id="MPI_Barrier")  # a registered-string range launching nothing
    expect["kernels"] = len(kernels)
    expect["memcpys"] = len(memcpy)
    expect["first_kernel"] = min(kernels)

    conn = sqlite3.connect(path)
    kcols = [c for c in KERNEL_COLS if c not in drop_kernel_cols] + list(extra_kernel_cols)
    ddl = {
        "StringIds": "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
        "CUPTI_ACTIVITY_KIND_KERNEL": f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(kcols)})",
        "CUPTI_ACTIVITY_KIND_RUNTIME": "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER "
                                       "NOT NULL, eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, "
                                       "nameId INTEGER, returnValue INTEGER)",
        "NVTX_EVENTS": "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
                       "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, "
                       "endGlobalTid INTEGER, textId INTEGER, domainId INTEGER)",
        "CUPTI_ACTIVITY_KIND_MEMCPY": "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId "
                                      "INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid "
                                      "INTEGER, bytes INTEGER, copyKind INTEGER)",
        "TARGET_INFO_SESSION_START_TIME": "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime "
                                          "TEXT, localTime TEXT)",
    }
    for name, sql in ddl.items():
        if name not in drop_tables:
            conn.execute(sql)
    if "StringIds" not in drop_tables:
        conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in drop_tables:
        rows = []
        for k in kernels:
            d = dict(zip(KERNEL_COLS, k))
            rows.append(tuple(d.get(c, 0) for c in kcols))
        conn.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(kcols))})", rows)
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in drop_tables:
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?)", runtime)
    if "NVTX_EVENTS" not in drop_tables:
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?,?)", nvtx)
    if "CUPTI_ACTIVITY_KIND_MEMCPY" not in drop_tables:
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?)", memcpy)
    if "TARGET_INFO_SESSION_START_TIME" not in drop_tables:
        conn.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (session_start_ns,))
    conn.commit()
    conn.close()
    return expect


def make_tiny_db(path: Path, kernels: list[dict[str, Any]], *, runtime: list[tuple[Any, ...]] = (),
                 nvtx: list[tuple[int, int, str]] = (), graph_cols: bool = False, pid: int = 100,
                 views: tuple[str, ...] = ()) -> None:
    """A one-process export of the documented schema with exactly the given rows.

    ``kernels``: dicts with start, end (ns), name and optional deviceId (0), streamId (7), correlationId,
    graphNodeId; ``runtime``: (start, end, correlationId) launch calls of thread 1, or (start, end, correlationId,
    name) with the call's name (a ``nameId`` into StringIds; the reader takes a call without one for
    cudaLaunchKernel); ``nvtx``: start/end ranges
    (start, end, text) of thread 1. Tables named in ``views`` are written as a view over a hidden table of the
    same rows (the shape a hostile file takes).
    """
    cols = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "shortName", "demangledName"]
    if graph_cols:
        cols += ["graphNodeId", "graphId"]
    names: dict[str, int] = {}
    rows = []
    for k in kernels:
        sid = names.setdefault(k["name"], len(names) + 1)
        row = [k["start"], k["end"], k.get("deviceId", 0), k.get("streamId", 7), k.get("correlationId"), gpid(pid),
               sid, sid]
        if graph_cols:
            row += [k.get("graphNodeId"), 1 if k.get("graphNodeId") is not None else None]
        rows.append(tuple(row))
    conn = sqlite3.connect(path)

    def table(name: str, ddl: str, data: list[tuple[Any, ...]]) -> None:
        real = f"_{name}" if name in views else name
        conn.execute(f"CREATE TABLE {real} ({ddl})")
        if data:
            conn.executemany(f"INSERT INTO {real} VALUES ({', '.join('?' * len(data[0]))})", data)
        if name in views:
            conn.execute(f"CREATE VIEW {name} AS SELECT * FROM {real}")

    named = any(len(r) > 3 for r in runtime)
    rt = [(r[0], r[1], gtid(pid, 1), r[2]) + ((names.setdefault(r[3], len(names) + 1),) if len(r) > 3 else
                                               (None,) if named else ()) for r in runtime]
    table("StringIds", "id INTEGER PRIMARY KEY, value TEXT NOT NULL", [(i, s) for s, i in names.items()])
    table("CUPTI_ACTIVITY_KIND_KERNEL", ", ".join(cols), rows)
    table("CUPTI_ACTIVITY_KIND_RUNTIME", "start INTEGER, end INTEGER, globalTid INTEGER, correlationId INTEGER"
          + (", nameId INTEGER" if named else ""), rt)
    table("NVTX_EVENTS", "start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER",
          [(s, e, 60, t, gtid(pid, 1)) for s, e, t in nvtx])
    conn.commit()
    conn.close()
