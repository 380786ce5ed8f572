"""Trace import never prints a silently wrong number: each kind of bad or unusual trace is refused with a
fix, or read as what it is (issue #33, trace import; issue #32, the readers' input guards).

Every trace here is built in the test, with hand-computed expectations.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from kinetogen import kineto_doc, write_kineto
from nsysdb import make_nsys_db, make_tiny_db
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.errors import TraceError
from schedsim.report.analysis import format_report
from schedsim.sim.metrics import Metrics
from schedsim.trace import nsys as nsys_mod
from schedsim.trace.analyze import analysis_dict, kernel_share_table, load_any, rows_from_timeline
from schedsim.trace.common import Activity, check_collective_clocks
from schedsim.trace.kineto import import_kineto
from schedsim.trace.nsys import import_nsys

ESC = "\x1b"


def cli(*args: object) -> tuple[int, str]:
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, r.output


def kernel(name: str, ts: float, dur: float | None, dev: int = 0, stream: int | None = 7, **extra: object) -> dict:
    e: dict = {"ph": "X", "cat": "kernel", "name": name, "pid": dev, "tid": stream, "ts": ts,
               "args": {"device": dev, **({"stream": stream} if stream is not None else {})}, **extra}
    if dur is not None:
        e["dur"] = dur
    return e


def kineto_file(path: Path, events: list[dict], rank: int | None = 0, world: int | None = 1) -> Path:
    dist = {k: v for k, v in (("rank", rank), ("world_size", world)) if v is not None}
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": dist, "traceEvents": events,
                                "baseTimeNanoseconds": 1_700_000_000_000_000_000}))
    return path


# -- spans that end before they start -------------------------------------------------------------------------


class TestNegativeDurations:
    def test_nsys_kernel_ending_before_it_starts_is_refused_naming_the_row(self, tmp_path):
        # Before: makespan -4 us (one kernel, start 10 us, end 6 us)
        p = tmp_path / "neg.sqlite"
        make_tiny_db(p, [{"start": 2_000, "end": 3_000, "name": "ok"}, {"start": 10_000, "end": 6_000, "name": "bad"}])
        with pytest.raises(TraceError, match=r"CUPTI_ACTIVITY_KIND_KERNEL row 2 \('bad'\) ends at 6000 ns, "
                                             r"before it starts at 10000 ns") as e:
            import_nsys(p)
        assert e.value.fix and "rowid = 2" in e.value.fix
        code, out = cli("import", "nsys", p, "--out", tmp_path / "o")
        assert code == 2 and "fix:" in out and "makespan" not in out

    def test_nsys_memcpy_ending_before_it_starts_is_refused(self, tmp_path):
        p = tmp_path / "m.sqlite"
        make_nsys_db(p)
        conn = sqlite3.connect(p)
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET end = start - 1 WHERE rowid = 1")
        conn.commit()
        conn.close()
        with pytest.raises(TraceError, match=r"CUPTI_ACTIVITY_KIND_MEMCPY row 1 \('Memcpy HtoD'\) ends at"):
            import_nsys(p)

    def test_kineto_negative_dur_is_refused(self, tmp_path):
        p = kineto_file(tmp_path / "k.json", [kernel("a", 10, 5), kernel("b", 20, -4)])
        with pytest.raises(TraceError, match=r"event #1 \(kernel 'b'\): dur is negative"):
            import_kineto(p)


# -- GPU events without a time --------------------------------------------------------------------------------


class TestMissingTimes:
    @pytest.mark.parametrize("cat", ["kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"])
    def test_gpu_event_without_dur_is_refused_naming_it(self, tmp_path, cat):
        # Before: a kernel without dur became a 0 us span
        bad = kernel(f"k{ESC}[31m", 20, None)
        bad["cat"] = cat
        p = kineto_file(tmp_path / "k.json", [kernel("a", 10, 5), bad])
        with pytest.raises(TraceError, match=r"event #1 \(" + cat + r" 'k\\x1b\[31m'\): no dur;") as e:
            import_kineto(p)
        assert ESC not in str(e.value) and "fix:" in str(e.value)

    def test_gpu_event_without_ts_is_refused(self, tmp_path):
        e = kernel("a", 0, 5)
        del e["ts"]
        p = kineto_file(tmp_path / "k.json", [e])
        with pytest.raises(TraceError, match=r"event #0 \(kernel 'a'\): no ts;"):
            import_kineto(p)

    def test_a_5000_digit_ts_is_refused_cleanly(self, tmp_path):
        # Before: ValueError (int string conversion limit) escaped as a traceback
        p = tmp_path / "big.json"
        text = json.dumps({"traceEvents": [kernel("a", 0, 5)]}).replace('"ts": 0', '"ts": ' + "9" * 5000)
        p.write_text(text)
        with pytest.raises(TraceError, match="an integer of more than"):
            import_kineto(p)
        code, out = cli("import", "kineto", p, "--out", tmp_path / "o")
        assert code == 2 and "Traceback" not in out and "fix:" in out


# -- ranks that contradict each other -------------------------------------------------------------------------


class TestRanksAgree:
    def test_world_sizes_that_disagree_are_refused(self, tmp_path):
        a = write_kineto(tmp_path / "r0.json", kineto_doc(0, world=2))
        b = write_kineto(tmp_path / "r1.json", kineto_doc(1, world=4))
        with pytest.raises(TraceError, match=r"r1.json: distributedInfo.world_size is 4, but .*r0.json says 2"):
            import_kineto([a, b])

    def test_a_rank_past_the_world_size_of_another_file_is_refused(self, tmp_path):
        a = write_kineto(tmp_path / "r0.json", kineto_doc(0, world=2))
        doc = kineto_doc(3, world=2)
        del doc["distributedInfo"]["world_size"]
        b = write_kineto(tmp_path / "r3.json", doc)
        with pytest.raises(TraceError, match=r"r3.json: rank 3 is outside 0..1 \(world_size 2"):
            import_kineto([a, b])

    def test_duplicate_ranks_are_refused(self, tmp_path):
        a = write_kineto(tmp_path / "a.json", kineto_doc(1, world=2))
        b = write_kineto(tmp_path / "b.json", kineto_doc(1, world=2))
        with pytest.raises(TraceError, match="rank 1 is also claimed by"):
            import_kineto([a, b])

    def test_a_rank_taken_from_a_files_place_says_so(self, tmp_path):
        """r1.json (rank 1) then r0.json without distributedInfo: r0.json's place, 1, was taken as its rank. The
        error said only "rank 1 is also claimed by r1.json" and "pass one trace file per rank", which the user
        did; it now says where rank 1 came from and to list the files in rank order."""
        a = write_kineto(tmp_path / "r1.json", kineto_doc(1, world=2))
        doc = kineto_doc(0, world=2)
        del doc["distributedInfo"]
        b = write_kineto(tmp_path / "r0.json", doc)
        with pytest.raises(TraceError) as e:
            import_kineto([a, b])
        assert e.value.message == (f"{b}: rank 1 is also claimed by {a} ({b} has no distributedInfo.rank, so its "
                                   "place on the command line was taken as its rank)")
        assert e.value.fix is not None and e.value.fix.startswith("list the trace files in rank order")
        assert {s.rank for s in import_kineto([b, a]).timeline.spans} == {0, 1}  # in rank order it imports

    def test_more_files_than_ranks_are_refused(self, tmp_path):
        docs = [kineto_doc(r, world=2) for r in range(3)]
        for d in docs:
            del d["distributedInfo"]["rank"]  # ranks by position: 0, 1, 2
        paths = [write_kineto(tmp_path / f"r{i}.json", d) for i, d in enumerate(docs)]
        with pytest.raises(TraceError, match="rank 2 is outside 0..1"):
            import_kineto(paths)


# -- one process driving two GPUs -----------------------------------------------------------------------------


def two_gpu_events() -> list[dict]:
    """Device 0: A 0-100 and B 100-150 on stream 7, C 50-110 on stream 20; device 1: A 10-60 and D 70-100 on its
    own stream 7 (µs after 1000)."""
    t = 1000
    return [kernel("A", t + 0, 100, dev=0, stream=7), kernel("B", t + 100, 50, dev=0, stream=7),
            kernel("C", t + 50, 60, dev=0, stream=20),
            kernel("A", t + 10, 50, dev=1, stream=7), kernel("D", t + 70, 30, dev=1, stream=7)]


class TestTwoGpusOneProcess:
    def test_each_gpu_is_its_own_rank_with_its_own_streams(self, tmp_path):
        # Before: one rank, device 1's stream 7 merged with device 0's
        res = import_kineto(kineto_file(tmp_path / "two.json", two_gpu_events()))
        tl = res.timeline
        assert tl.world_size == 2
        lanes = {(s.rank, s.stream, s.name) for s in tl.spans}
        assert lanes == {(0, "7", "A"), (0, "7", "B"), (0, "20", "C"), (1, "7", "A"), (1, "7", "D")}
        assert {r: (i["device"], i["distributed_rank"]) for r, i in tl.meta["ranks"].items()} == {0: (0, 0), 1: (1, 0)}
        assert any("drove several GPUs" in w for w in res.warnings)
        m = Metrics.of(tl)
        # makespan 0..150 us; rank 0 busy 150 us (union of A, B, C), rank 1 busy 80 us (A 50 + D 30)
        assert m.makespan_s == pytest.approx(150e-6)
        busy = {r: d.busy_compute_s for r, d in m.ranks.items()}
        assert busy == {0: pytest.approx(150e-6), 1: pytest.approx(80e-6)}
        assert all(d.busy_compute_s <= m.makespan_s * (1 + 1e-9) for d in m.ranks.values())

    def test_analyze_shares_stay_within_one(self, tmp_path):
        # Before: device 0 printed A 1.00, C 0.60, B 0.50 and a total of 2.10 (divided by last start - first start)
        _k, res = load_any([kineto_file(tmp_path / "two.json", two_gpu_events())])
        d = analysis_dict(res)
        share = {dev: {r["name"]: r["share"] for r in rows} for dev, rows in d["kernel_share"].items()}
        # device 0: window 0..150 us; device 1: window 10..100 us = 90 us
        assert share == {"Device 0": {"A_Stream 7": pytest.approx(100 / 150), "C_Stream 20": pytest.approx(60 / 150),
                                      "B_Stream 7": pytest.approx(50 / 150)},
                         "Device 1": {"A_Stream 7": pytest.approx(50 / 90), "D_Stream 7": pytest.approx(30 / 90)}}
        assert d["kernel_busy_share"] == {"Device 0": pytest.approx(1.0), "Device 1": pytest.approx(80 / 90)}
        bar = "-" * 29
        assert kernel_share_table(res.kernel_rows) == [
            f"{bar}Device 0{bar}",
            "   0.67 min:    100.00 max:    100.00 avg:    100.00 A_Stream 7",
            "   0.40 min:     60.00 max:     60.00 avg:     60.00 C_Stream 20",
            "   0.33 min:     50.00 max:     50.00 avg:     50.00 B_Stream 7",
            "   1.00",
            f"{bar}Device 1{bar}",
            "   0.56 min:     50.00 max:     50.00 avg:     50.00 A_Stream 7",
            "   0.33 min:     30.00 max:     30.00 avg:     30.00 D_Stream 7",
            "   0.89",
        ]
        for rank in d["metrics"]["ranks"].values():
            for key in ("busy_compute_s", "busy_comm_s", "idle_s"):
                assert rank[key] <= d["metrics"]["makespan_s"] * (1 + 1e-9)

    def test_analyze_of_the_imported_timeline_keeps_the_gpus_apart(self, tmp_path):
        src = kineto_file(tmp_path / "two.json", two_gpu_events())
        code, _out = cli("import", "kineto", src, "--out", tmp_path / "o")
        assert code == 0
        _k, res = load_any([tmp_path / "o" / "timeline.json"])
        krows, _n = rows_from_timeline(res.timeline)
        assert sorted(krows) == ["Rank 0", "Rank 1"]
        lines = kernel_share_table(krows)
        assert lines[lines.index("-" * 29 + "Rank 1" + "-" * 29) + 1:] == [
            "   0.56 min:     50.00 max:     50.00 avg:     50.00 A_Stream 7",
            "   0.33 min:     30.00 max:     30.00 avg:     30.00 D_Stream 7",
            "   0.89",
        ]

    def test_one_gpu_per_file_keeps_the_distributed_ranks(self, tmp_path):
        paths = [write_kineto(tmp_path / f"r{r}.json", kineto_doc(r)) for r in (1, 0)]
        tl = import_kineto(paths).timeline
        assert tl.world_size == 2 and sorted(tl.meta["ranks"]) == [0, 1]
        assert tl.meta["ranks"][1]["file"].endswith("r1.json")


# -- CUDA graph replays (nsys) --------------------------------------------------------------------------------


def test_nsys_graph_launch_gives_its_range_every_kernel_of_the_graph(tmp_path):
    # One cudaGraphLaunch (correlationId 5) inside range g0@r0 replays three kernels that share correlationId 5:
    # 1000-1100, 1100-1210, 1210-1300 ns. Before: only the last (90 ns) joined the range.
    p = tmp_path / "graph.sqlite"
    ks = [{"start": 1000, "end": 1100, "name": "k1", "correlationId": 5, "graphNodeId": 1},
          {"start": 1100, "end": 1210, "name": "k2", "correlationId": 5, "graphNodeId": 2},
          {"start": 1210, "end": 1300, "name": "k3", "correlationId": 5, "graphNodeId": 3},
          {"start": 2000, "end": 2050, "name": "k4", "correlationId": 6}]
    make_tiny_db(p, ks, runtime=[(500, 600, 5), (700, 800, 6)], nvtx=[(400, 650, "g0@r0")], graph_cols=True)
    res = import_nsys(p)
    op = res.timeline.by_id()["g0@r0"]
    assert op.duration_s == pytest.approx(300e-9, abs=1e-15)
    assert op.tags["kernels"] == 3
    assert res.timeline.meta["ranks"][0]["graph_kernels"] == 3
    assert "k4#0@r0" in res.timeline.by_id()  # launched outside the range


# -- Kineto annotations without a stream ----------------------------------------------------------------------


def test_kineto_annotation_without_a_stream_takes_its_devices_work(tmp_path):
    # mm0 spans 1000-1100 us on device 0 with no tid and no args.stream; kernels: 1000-1080 on stream 7, 1080-1100
    # on stream 8, and 1200-1210 outside. Before: the annotation was dropped without a word.
    ann = {"ph": "X", "cat": "gpu_user_annotation", "name": "mm0", "pid": 0, "ts": 1000, "dur": 100, "args": {}}
    p = kineto_file(tmp_path / "a.json", [kernel("g", 1000, 80), kernel("e", 1080, 20, stream=8),
                                          kernel("late", 1200, 10), ann])
    res = import_kineto(p, ops={"mm0": {"kind": "matmul", "resource": "compute"}})
    op = res.timeline.by_id()["mm0@r0"]
    assert (op.start_s, op.end_s) == (pytest.approx(0.0), pytest.approx(100e-6)) and op.tags["kernels"] == 2
    assert [w for w in res.warnings if "no stream number" in w] == [
        "1 gpu_user_annotation range(s) named after ops have no stream number, or one no GPU activity of their "
        "device ran on; each took the GPU work of every stream of its device inside its time window"]


# -- input guards ---------------------------------------------------------------------------------------------


class TestNsysGuards:
    @pytest.mark.parametrize("table", ["CUPTI_ACTIVITY_KIND_KERNEL", "StringIds", "NVTX_EVENTS"])
    def test_a_view_is_refused_up_front(self, tmp_path, table):
        # Before: read through; a view computing rows without end never finished
        p = tmp_path / "v.sqlite"
        make_tiny_db(p, [{"start": 0, "end": 10, "name": "k"}], views=(table,))
        with pytest.raises(TraceError, match=f"{table} is a view, not a table"):
            import_nsys(p)

    def test_names_are_cut_to_the_bound(self, tmp_path):
        p = tmp_path / "long.sqlite"
        bound = getattr(nsys_mod, "MAX_NAME_CHARS", 32_768)
        make_tiny_db(p, [{"start": 0, "end": 10, "name": "k" * (bound * 3)}])
        tl = import_nsys(p).timeline
        assert [len(s.name) for s in tl.spans] == [bound]

    def test_row_count_cap(self, tmp_path, monkeypatch):
        p = tmp_path / "s.sqlite"
        make_tiny_db(p, [{"start": i * 10, "end": i * 10 + 5, "name": "k"} for i in range(6)])
        assert len(import_nsys(p).timeline.spans) == 6
        monkeypatch.setenv("SCHEDSIM_MAX_TRACE_EVENTS", "5")
        with pytest.raises(TraceError, match="more than 5 GPU activities") as e:
            import_nsys(p)
        assert "SCHEDSIM_MAX_TRACE_EVENTS" in (e.value.fix or "")

    def test_text_that_is_not_utf8_reads_with_a_replacement(self, tmp_path):
        p = tmp_path / "u.sqlite"
        make_tiny_db(p, [{"start": 0, "end": 10, "name": "k"}])
        conn = sqlite3.connect(p)
        conn.execute("UPDATE StringIds SET value = CAST(X'6bff' AS TEXT)")
        conn.commit()
        conn.close()
        assert [s.name for s in import_nsys(p).timeline.spans] == ["k\ufffd"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
@pytest.mark.parametrize("argv", [("import", "nsys"), ("import", "kineto"), ("analyze",)])
def test_a_fifo_is_refused_without_blocking(tmp_path, argv):
    # Before: open() of a FIFO waited for a writer forever
    fifo = tmp_path / "trace.sqlite"
    os.mkfifo(fifo)
    out = ["--out", str(tmp_path / "o")] if argv[0] == "import" else []
    r = subprocess.run([sys.executable, "-m", "schedsim", *argv, str(fifo), *out], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 2, r.stderr
    assert "is a FIFO (named pipe), not a regular file" in r.stderr and "fix:" in r.stderr


class TestKinetoGuards:
    def test_a_file_past_the_size_cap_is_refused(self, tmp_path, monkeypatch):
        p = write_kineto(tmp_path / "r.json", kineto_doc(0))
        monkeypatch.setenv("SCHEDSIM_MAX_INPUT_BYTES", str(p.stat().st_size - 1))
        with pytest.raises(TraceError, match="-byte limit of a kineto file"):
            import_kineto(p)

    def test_a_gzip_decompressing_past_the_size_cap_is_refused(self, tmp_path, monkeypatch):
        doc = kineto_doc(0)
        p = write_kineto(tmp_path / "r.json.gz", doc)
        monkeypatch.setenv("SCHEDSIM_MAX_INPUT_BYTES", str(len(json.dumps(doc, indent=1)) // 2))
        with pytest.raises(TraceError, match="decompresses to more than .* past the limit for one trace"):
            import_kineto(p)

    def test_deep_nesting_is_refused(self, tmp_path):
        p = tmp_path / "deep.json"
        p.write_text('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}")
        with pytest.raises(TraceError, match="nested too deep"):
            import_kineto(p)

    def test_event_count_cap(self, tmp_path, monkeypatch):
        p = write_kineto(tmp_path / "r.json", kineto_doc(0, iterations=3))  # 3 x 4 GPU activities
        monkeypatch.setenv("SCHEDSIM_MAX_TRACE_EVENTS", "5")
        with pytest.raises(TraceError, match="more than 5 GPU activities or ranges"):
            import_kineto(p)


# -- names reach the terminal escaped -------------------------------------------------------------------------


def test_names_from_a_trace_are_escaped_on_the_terminal(tmp_path):
    p = kineto_file(tmp_path / "esc.json", [kernel(f"gemm{ESC}]0;pwned\x07", 10, 5), kernel("b\u202eevil", 20, 5)])
    _k, res = load_any([p])
    text = format_report(res)
    assert ESC not in text and "\x07" not in text and "\u202e" not in text
    assert "gemm\\x1b]0;pwned\\x07_Stream 7" in text and "b\\u202eevil_Stream 7" in text
    code, out = cli("analyze", p)
    assert code == 0 and ESC not in out and "gemm\\x1b]0;pwned\\x07" in out


def test_nsys_column_names_in_errors_are_escaped(tmp_path):
    p = tmp_path / "c.sqlite"
    conn = sqlite3.connect(p)
    conn.execute(f'CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, "x{ESC}[2J", deviceId, streamId)')
    conn.commit()
    conn.close()
    with pytest.raises(TraceError, match="lacks column") as e:
        import_nsys(p)
    assert ESC not in str(e.value) and "x\\x1b[2J" in str(e.value)


def test_gzip_trace_still_reads(tmp_path):
    # the guards leave a well-formed gzip trace alone
    p = tmp_path / "ok.json.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"traceEvents": [kernel("a", 10, 5)]}))
    assert [s.name for s in import_kineto(p).timeline.spans] == ["a"]


def test_cpu_only_trace_ranges_are_read_with_the_trace_reader(tmp_path):
    # A CPU-only profile (gloo ranks) falls back to its record_function ranges, which were read a second way
    # (json.load, no size or special-file guard) that took only a top-level object: a trace in Chrome's JSON
    # Array Format, which the importer reads, raised AttributeError there. F0.0.0 10-15 us, B0.0.0 20-30 us.
    def ann(name: str, ts: object, dur: object) -> dict:
        return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    evs = [ann("F0.0.0", 10, 5), ann("B0.0.0", 20, 10)]
    for path in (kineto_file(tmp_path / "obj.json", evs), tmp_path / "arr.json"):
        if path.name == "arr.json":
            path.write_text(json.dumps(evs))
        _k, res = load_any([path])
        assert [(s.name, s.start_s, s.end_s) for s in res.timeline.spans] == [
            ("F0.0.0", 0.0, pytest.approx(5e-6)), ("B0.0.0", pytest.approx(10e-6), pytest.approx(20e-6))]


def test_a_peer_copy_on_another_device_does_not_split_the_rank(tmp_path):
    # kernels on device 0 only; one memcpy recorded on device 1 (a peer copy): still one rank
    copy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP", "pid": 1, "tid": 9, "ts": 30, "dur": 5,
            "args": {"device": 1, "stream": 9, "bytes": 64}}
    tl = import_kineto(kineto_file(tmp_path / "p.json", [kernel("a", 10, 5), kernel("b", 20, 5), copy])).timeline
    assert tl.world_size == 1 and {s.rank for s in tl.spans} == {0}


@pytest.mark.parametrize("edit,why", [
    (lambda d: d.update(baseTimeNanoseconds=10**400), "baseTimeNanoseconds is"),
    (lambda d: next(e for e in d["traceEvents"] if e["name"] == "record_param_comms")["args"].update(
        {"In msg nelems": "NaN"}), "in_nelems is 'NaN', not a count of elements"),
])
def test_hostile_header_and_collective_values_are_refused(tmp_path, edit, why):
    # Found by fuzzing: an integer past 1e308 in baseTimeNanoseconds raised OverflowError, and a count of "NaN"
    # in record_param_comms raised ValueError after the file was read; both were tracebacks.
    doc = kineto_doc(0)
    edit(doc)
    p = write_kineto(tmp_path / "h.json", doc)
    with pytest.raises(TraceError, match=why):
        import_kineto(p)


def test_cpu_event_with_an_object_as_thread_still_imports(tmp_path):
    # Found by fuzzing: a dict as a CPU range's tid made the (pid, tid) key unhashable (TypeError)
    doc = kineto_doc(0, iterations=1)
    next(e for e in doc["traceEvents"] if e["name"] == "record_param_comms")["tid"] = {"a": 1}
    res = import_kineto(write_kineto(tmp_path / "t.json", doc))
    assert res.timeline.meta["kernel_count"] == 3


def test_nsys_session_start_that_is_not_a_time_is_refused(tmp_path):
    # Found by fuzzing: text in utcEpochNs raised ValueError from int() (a traceback)
    p = tmp_path / "t.sqlite"
    make_nsys_db(p)
    conn = sqlite3.connect(p)
    conn.execute(f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'x{ESC}[2J'")
    conn.commit()
    conn.close()
    with pytest.raises(TraceError, match=r"utcEpochNs is 'x\\x1b\[2J', not a time in ns"):
        import_nsys(p)


def test_nsys_damaged_schema_whose_message_is_not_utf8_is_refused(tmp_path):
    # Found by fuzzing: SQLite's "malformed database schema ... near ..." quoted a byte that is not UTF-8, and
    # the sqlite3 module raised UnicodeDecodeError while building its own error (a traceback)
    p = tmp_path / "schema.sqlite"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE Tmark (a INTEGER, b TEXT)")
    conn.commit()
    conn.close()
    data = p.read_bytes()
    i = data.index(b"Tmark (a") + 6
    p.write_bytes(data[:i] + b"\xf6" + data[i + 1:])
    with pytest.raises(TraceError, match="unreadable SQLite file") as e:
        import_nsys(p)
    assert "nsys export --type sqlite" in (e.value.fix or "")


def test_nsys_table_shapes_are_checked_before_any_row_is_read(tmp_path, monkeypatch):
    # a runtime table without correlationId was found only after every kernel had been read
    p = tmp_path / "shape.sqlite"
    make_tiny_db(p, [{"start": 0, "end": 10, "name": "k"}], nvtx=[(0, 5, "r")])
    conn = sqlite3.connect(p)
    conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME DROP COLUMN correlationId")
    conn.commit()
    conn.close()
    read: list[str] = []
    real = nsys_mod._read_kernels
    monkeypatch.setattr(nsys_mod, "_read_kernels", lambda *a, **k: read.append("kernels") or real(*a, **k))
    with pytest.raises(TraceError, match="CUPTI_ACTIVITY_KIND_RUNTIME lacks column.*correlationId"):
        import_nsys(p)
    assert read == []


def test_lone_surrogates_in_names_become_replacement_characters(tmp_path):
    # JSON's "\ud800" decodes to a lone surrogate, which no UTF-8 output can hold: the chart of such a trace
    # failed with a TypeError from matplotlib (a traceback)
    ann = {"ph": "X", "cat": "gpu_user_annotation", "name": "mm0\udfff", "pid": 0, "tid": 7, "ts": 10, "dur": 5}
    p = kineto_file(tmp_path / "s.json", [kernel("k\ud800x", 10, 5), ann])
    tl = import_kineto(p).timeline
    assert [s.name for s in tl.spans] == ["k\ufffdx"]
    code, out = cli("analyze", p, "--charts", tmp_path / "charts")
    assert code == 0 and (tmp_path / "charts" / "gantt.png").is_file()


@pytest.mark.parametrize("name", ["KINETO_AR", "KINETO_SR", "NSYS_REAL"])
def test_every_share_of_the_real_traces_is_at_most_one(name):
    # kernels on one stream never overlap, so no row's share, no busy share and no per-rank time passes 1
    import conftest

    _k, res = load_any([conftest.need(getattr(conftest, name))])
    d = analysis_dict(res)
    shares = [r["share"] for rows in d["kernel_share"].values() for r in rows]
    assert shares and all(0 < s <= 1 for s in shares)
    assert all(0 < b <= 1 for b in d["kernel_busy_share"].values())
    mk = d["metrics"]["makespan_s"]
    assert all(r[k] <= mk * (1 + 1e-9) for r in d["metrics"]["ranks"].values()
               for k in ("busy_compute_s", "busy_comm_s", "busy_copy_s", "idle_s"))


def test_two_files_one_driving_two_gpus(tmp_path):
    # rank 0's process drove devices 0 and 1; rank 1's drove device 2 and saw a peer copy on device 3:
    # timeline ranks 0 (dev 0), 1 (dev 1), 2 (rank 1: devices 2 and 3)
    copy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP", "pid": 3, "tid": 9, "ts": 1030, "dur": 5,
            "args": {"device": 3, "stream": 9, "bytes": 64}}
    a = kineto_file(tmp_path / "r0.json", two_gpu_events(), rank=0, world=2)
    b = kineto_file(tmp_path / "r1.json", [kernel("E", 1000, 20, dev=2), copy], rank=1, world=2)
    tl = import_kineto([a, b]).timeline
    assert tl.world_size == 3
    assert {(s.rank, s.name) for s in tl.spans} == {(0, "A"), (0, "B"), (0, "C"), (1, "A"), (1, "D"), (2, "E"),
                                                    (2, "Memcpy PtoP")}
    assert {r: i["distributed_rank"] for r, i in tl.meta["ranks"].items()} == {0: 0, 1: 0, 2: 1}


def test_nsys_kernel_lasting_years_is_refused(tmp_path):
    # Kineto refuses a dur past 1e12 us (validate.MAX_DUR_US); an nsys row 2^62 ns long (146 years) was read
    p = tmp_path / "long.sqlite"
    make_tiny_db(p, [{"start": 1_000, "end": 1_000 + 2**62, "name": "k"}])
    with pytest.raises(TraceError, match=r"KERNEL row 1 \('k'\) lasts 4,611,686,018,427,387,904 ns"):
        import_nsys(p)


# -- files of one import on clocks that disagree --------------------------------------------------------------


def _two_ranks(tmp_path: Path, shift_ns: int = 0, drop_base_of_1: bool = False) -> list[Path]:
    """kinetogen's two ranks (rank 0's first all_reduce kernel at 105-155 us from its first GPU event), rank 1's
    clock ``shift_ns`` ahead."""
    out = []
    for r in (0, 1):
        d = kineto_doc(r)
        d["baseTimeNanoseconds"] += shift_ns * r
        if drop_base_of_1 and r == 1:
            d.pop("baseTimeNanoseconds")
        out.append(write_kineto(tmp_path / f"r{r}.json", d))
    return out


class TestClocksOfSeveralFiles:
    def test_a_collective_that_ends_before_its_peer_starts_is_refused(self, tmp_path):
        # Before: makespan 5000.410 ms for a 410 us step (rank 1's host clock 5 s ahead)
        files = _two_ranks(tmp_path, shift_ns=5_000_000_000)
        code, out = cli("import", "kineto", *files, "--out", tmp_path / "imp")
        assert code == 2
        # rank 1's all_reduce starts at 5e6 + 105 us, rank 0's ended at 155 us: 4999950 us apart
        assert "r1.json (rank 1): all_reduce #0 on process group 0 starts at 5000105.000 us, 4999950.000 us after " \
               "it ended on" in out and "(at 155.000 us;" in out
        assert "fix: profile every rank over the same steps" in out and "Traceback" not in out
        assert not (tmp_path / "imp" / "timeline.json").exists()

    def test_analyze_is_held_to_it_too(self, tmp_path):
        """analyze reads the files without building a replay schedule: the same check (before: makespan 5000.410
        ms)."""
        files = _two_ranks(tmp_path, shift_ns=5_000_000_000)
        code, out = cli("analyze", *files)
        assert code == 2 and "4999950.000 us after it ended on" in out

    def test_kernels_of_no_named_process_group_are_not_matched(self, tmp_path):
        """An nsys report's NCCL kernels name no communicator, so the n-th all_reduce of two ranks may be two
        communicators': tp=2 x pp=2, stage 1's (ranks 2, 3) tensor-parallel all_reduce at 500-530 us runs after
        stage 0's (ranks 0, 1) at 100-130 us has ended; imported (before: refused, "370.000 us after it ended").
        nsysdb's reports whose sessions started 5 s apart read as they did before the clock check: 5001.180 ms."""
        k = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
        acts = {r: [Activity(r, r, "7", k, "kernel", 100e3 + 400e3 * (r >= 2), 130e3 + 400e3 * (r >= 2))]
                for r in range(4)}
        assert check_collective_clocks(acts, str) is None
        named = {r: [a._replace(tags={"pg_name": "0"}) for a in got] for r, got in acts.items()}
        with pytest.raises(TraceError, match=r"^2: all_reduce #0 on process group 0 starts at 400.000 us, 370.000 us "
                                             r"after it ended on 0 \(at 30.000 us;"):
            check_collective_clocks(named, str)
        a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
        make_nsys_db(a, pids=(100,))
        make_nsys_db(b, pids=(101,), session_start_ns=1_700_000_000_000_000_000 + 5_000_000_000)
        code, out = cli("import", "nsys", a, b, "--out", tmp_path / "imp")
        assert code == 0 and "makespan 5001.180 ms" in out, out

    def test_captures_that_begin_at_different_collectives_are_refused(self, tmp_path):
        """Rank 1's capture lacks the first iteration: its first all_reduce (the run's second, at 360-410 us) is
        matched with rank 0's first (105-155 us): 205 us apart, refused (before: replayed as one rendezvous)."""
        files = []
        for r in (0, 1):
            d = kineto_doc(r)
            if r == 1:
                d["traceEvents"] = [e for e in d["traceEvents"] if e.get("ts", 1e9) >= 1255 - 30]
            files.append(write_kineto(tmp_path / f"r{r}.json", d))
        code, out = cli("import", "kineto", *files, "--out", tmp_path / "imp")
        assert code == 2 and "all_reduce #0 on process group 0 starts at 360.000 us, 205.000 us after it ended" \
            in out, out
        assert "or the captures begin at different collectives" in out

    def test_all_to_all_is_not_held_to_it(self, tmp_path):
        """all_to_all is grouped send/recv: with per-peer sizes a rank may exchange with some peers only, so its
        members need not overlap; the same 5 s offset imports (the makespan is the trace's, 5000.410 ms)."""
        files = []
        for r in (0, 1):
            d = kineto_doc(r)
            d["baseTimeNanoseconds"] += 5_000_000_000 * r
            for e in d["traceEvents"]:
                if e.get("args", {}).get("Collective name") == "allreduce":
                    e["args"]["Collective name"] = "all_to_all"
                if "AllReduce" in e["name"]:
                    e["name"] = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
            files.append(write_kineto(tmp_path / f"r{r}.json", d))
        code, out = cli("import", "kineto", *files, "--out", tmp_path / "imp")
        assert code == 0, out
        assert "makespan 5000.410 ms" in out and "4 collective entries matched" in out

    @pytest.mark.parametrize("shift_us,ok", [(40, True), (60, True), (61, False)])
    def test_the_clock_slack_is_ten_microseconds(self, tmp_path, shift_us, ok):
        # rank 1 starts its all_reduce at 105 + shift us, rank 0's ends at 155: a gap of shift - 50 us
        files = _two_ranks(tmp_path, shift_ns=shift_us * 1000)
        code, out = cli("import", "kineto", *files, "--out", tmp_path / "imp")
        assert code == (0 if ok else 2), out
        if not ok:
            assert "11.000 us after it ended" in out

    def test_files_on_two_time_bases_are_refused(self, tmp_path):
        # Before: makespan 1700000000.00 s (rank 1 without baseTimeNanoseconds: its events near the epoch)
        files = _two_ranks(tmp_path, drop_base_of_1=True)
        with pytest.raises(TraceError) as e:
            import_kineto(files)
        # rank 0's first GPU event at 1.7e18 ns + 1000 us, rank 1's at 1000 us: 1.7e15 us apart
        assert str(e.value).startswith(f"{files[0]}: it starts 1.7e+15 us after {files[1]}")
        assert "r0.json baseTimeNanoseconds 1700000000000000000, r1.json without baseTimeNanoseconds" in str(e.value)

    def test_nsys_files_on_two_time_bases_are_refused(self, tmp_path):
        # Before: a warning ("its times are not aligned") and a timeline 54 years long
        a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
        make_nsys_db(a, pids=(100,))
        make_nsys_db(b, pids=(200,), drop_tables=("TARGET_INFO_SESSION_START_TIME",))
        code, out = cli("import", "nsys", a, b, "--out", tmp_path / "imp")
        assert code == 2 and f"{a}: it starts 1.7e+15 us after {b}" in out
        assert "a.sqlite TARGET_INFO_SESSION_START_TIME.utcEpochNs 1700000000000000000, b.sqlite without " \
               "TARGET_INFO_SESSION_START_TIME" in out
        # one file without the table, alone or beside one whose session started at 0: read as before
        c = tmp_path / "c.sqlite"
        make_nsys_db(c, pids=(100,), session_start_ns=0)
        assert cli("import", "nsys", c, b, "--out", tmp_path / "imp2")[0] == 0
