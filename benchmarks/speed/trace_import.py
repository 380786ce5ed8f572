"""Peak memory and time of the trace importers on large synthetic traces.

Makes the largest traces this machine can handle by replicating real events:

* **Kineto**: the events of HTA's ``nccl_data.json.gz`` (rank 0 of 2; 40 573
  events, 9.8 MB of JSON) repeated ``--kineto-copies`` times, each copy
  shifted by one trace length, written as one plain JSON file;
* **nsys**: the schema-built capture of ``tests/trace/nsysdb.py`` (kernels,
  runtime calls, NVTX ranges, memcpys) replicated ``--nsys-copies`` times
  inside SQLite (``INSERT ... SELECT`` with shifted times and correlation ids).

Each import runs in a fresh subprocess (the same work as ``schedsim import``:
import, metrics, streamed ``timeline.json``) and reports wall time and peak
RSS (``ru_maxrss``). For reference, ``json.load`` is measured on the Kineto file
when it is small enough. Results go to stdout as JSON; ``benchmarks/speed/README.md``
summarizes them.

Usage::

    python benchmarks/speed/trace_import.py --workdir /tmp/tb --kineto-copies 100 --nsys-copies 4000
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = (REPO / ".." / "shared" / "data" / "traces" / "kineto_nccl_allreduce_rank0_of2.json.gz").resolve()

_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
t = time.perf_counter()
kind, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == "jsonload":
    import gzip
    with open(path) as f:
        d = json.load(f)
    n = len(d["traceEvents"])
else:
    from schedsim.sim.metrics import compute_metrics
    from schedsim.trace.commands import write_timeline_json
    if kind == "kineto":
        from schedsim.trace.kineto import import_kineto as imp
    else:
        from schedsim.trace.nsys import import_nsys as imp
    res = imp(path, keep_kernel_rows=False)
    m = compute_metrics(res.timeline)
    write_timeline_json(res.timeline, out, m)
    n = len(res.timeline.spans)
dt = time.perf_counter() - t
print(json.dumps({{"seconds": dt, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "items": n}}))
"""


def make_kineto(dst: Path, copies: int) -> int:
    with gzip.open(SRC, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    ts = [e["ts"] for e in events if "ts" in e]
    span = max(ts) - min(ts) + 1000.0
    head = {k: v for k, v in doc.items() if k not in ("traceName", "displayTimeUnit", "baseTimeNanoseconds")}
    # each copy's correlation and flow ids shifted past the last copy's, so every launch keeps its own kernel (the
    # replay schedule joins kernels to their runtime rows by correlation id)
    ids = [v for e in events for v in (*(e.get("args") or {}).values(), e.get("id"))
           if isinstance(v, int) and not isinstance(v, bool)]
    id_span = max(ids, default=0) + 1
    with open(dst, "w", encoding="utf-8") as f:
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        first = True
        for c in range(copies):
            off = c * span
            for e in events:
                if "ts" in e and isinstance(e["ts"], (int, float)):
                    e = dict(e, ts=e["ts"] + off)
                if c:
                    e = _shift_ids(e, c * id_span)
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
        f.write('\n], "traceName": "bench", "displayTimeUnit": "ms", '
                f'"baseTimeNanoseconds": {doc.get("baseTimeNanoseconds", 0)}}}\n')
    return dst.stat().st_size


_ID_ARGS = ("correlation", "External id", "wait_on_cuda_event_record_corr_id")


def _shift_ids(e: dict, by: int) -> dict:
    """Event ``e`` with its correlation, external and flow ids (``args`` and ``id``) plus ``by``."""
    args = e.get("args")
    if isinstance(args, dict) and any(isinstance(args.get(k), int) for k in _ID_ARGS):
        e = dict(e, args={k: v + by if k in _ID_ARGS and isinstance(v, int) else v for k, v in args.items()})
    if isinstance(e.get("id"), int):
        e = dict(e, id=e["id"] + by)
    return e


def make_nsys(dst: Path, copies: int) -> int:
    sys.path.insert(0, str(REPO / "tests" / "trace"))
    from nsysdb import make_nsys_db

    if dst.exists():
        dst.unlink()
    make_nsys_db(dst, op_ranges=False)  # no op ranges: every kernel stays a span (no iteration cut)
    conn = sqlite3.connect(dst)
    span = conn.execute("SELECT max(end) - min(start) + 1000 FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    ncorr = conn.execute("SELECT max(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    tables = {
        "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "correlationId"),
        "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "correlationId"),
        "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "correlationId"),
        "NVTX_EVENTS": ("start", "end", None),
    }
    base = {t: f"_base_{t}" for t in tables}
    for t in tables:
        conn.execute(f"CREATE TEMP TABLE {base[t]} AS SELECT * FROM {t}")
    batch = 200
    for c0 in range(1, copies, batch):
        ks = list(range(c0, min(copies, c0 + batch)))
        for t, (s, e, corr) in tables.items():
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({t})")]
            for k in ks:
                sel = []
                for col in cols:
                    if col in (s, e):
                        sel.append(f"{col} + {k * span}")
                    elif col == corr:
                        sel.append(f"{col} + {k * ncorr}")
                    else:
                        sel.append(col)
                conn.execute(f"INSERT INTO {t} SELECT {', '.join(sel)} FROM {base[t]}")
        conn.commit()
    conn.close()
    return dst.stat().st_size


def measure(kind: str, path: Path, out: Path) -> dict:
    code = _CHILD.format(repo=str(REPO))
    r = subprocess.run([sys.executable, "-c", code, kind, str(path), str(out)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/schedsim_trace_bench"))
    ap.add_argument("--kineto-copies", type=int, default=100)
    ap.add_argument("--nsys-copies", type=int, default=4000)
    ap.add_argument("--jsonload-max-bytes", type=float, default=1.5e9,
                    help="measure json.load only on files up to this size")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = {"machine": f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"}
    if args.kineto_copies > 0:
        kpath = args.workdir / "kineto_big.json"
        t = time.perf_counter()
        size = make_kineto(kpath, args.kineto_copies)
        results["kineto"] = {"file_bytes": size, "copies": args.kineto_copies, "make_s": time.perf_counter() - t,
                             "import": measure("kineto", kpath, args.workdir / "kineto_timeline.json")}
        results["kineto"]["timeline_bytes"] = (args.workdir / "kineto_timeline.json").stat().st_size
        if size <= args.jsonload_max_bytes:
            results["kineto"]["json_load_reference"] = measure("jsonload", kpath, args.workdir / "unused")
        kpath.unlink()
        print(json.dumps(results), flush=True)
    if args.nsys_copies > 0:
        npath = args.workdir / "nsys_big.sqlite"
        t = time.perf_counter()
        size = make_nsys(npath, args.nsys_copies)
        results["nsys"] = {"file_bytes": size, "copies": args.nsys_copies, "make_s": time.perf_counter() - t,
                           "import": measure("nsys", npath, args.workdir / "nsys_timeline.json")}
        results["nsys"]["timeline_bytes"] = (args.workdir / "nsys_timeline.json").stat().st_size
        npath.unlink()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
