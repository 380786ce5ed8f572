"""Kineto import: HTA's real traces, multi-rank merging, op mapping, the streaming reader and broken files."""

from __future__ import annotations

import gzip
import json
import os

import pytest
from conftest import KINETO_AR, KINETO_SR, need
from kinetogen import kineto_doc, write_kineto

from schedsim.errors import TraceError
from schedsim.trace.analyze import nccl_volume_table
from schedsim.trace.jsonstream import TraceEventStream, keep_long
from schedsim.trace.kineto import import_kineto


class TestRealAllReduceTrace:
    """HTA tests/data/nccl_parser_config/nccl_data.json.gz: rank 0 of 2, NCCL 2.17.1."""

    def test_counts_first_kernel_and_rank(self):
        r = import_kineto(need(KINETO_AR))
        tl = r.timeline
        assert tl.meta["kernel_count"] == 2700
        assert tl.meta["memcpy_count"] == 960 and tl.meta["memset_count"] == 114
        assert tl.world_size == 2 and set(tl.meta["ranks"]) == {0}
        assert tl.meta["ranks"][0]["nccl_version"] == "2.17.1"
        first = min((s for s in tl.spans if s.kind == "kernel"), key=lambda s: s.start_s)
        assert first.name == "CatArrayBatchedCopy_aligned16_contig"
        assert first.start_s == 0.0 and first.duration_s == pytest.approx(3.744e-6, abs=1e-12)
        # the first kernel starts at ts 4458676422880.181 us after baseTimeNanoseconds 1711964646000000000
        assert tl.meta["origin_ns"] + tl.meta["t0_ns"] == pytest.approx(1711964646000000000 + 4458676422880181, abs=2)

    def test_nccl_kernels_and_collective_metadata(self):
        tl = import_kineto(need(KINETO_AR)).timeline
        comm = sorted((s for s in tl.spans if s.resource == "comm"), key=lambda s: s.start_s)
        assert len(comm) == 21
        assert sum(s.kind == "all_reduce" for s in comm) == 15 and sum(s.kind == "broadcast" for s in comm) == 6
        b = comm[0]
        assert b.name == "ncclKernel_Broadcast_RING_LL_Sum_int8_t" and b.stream == "40"
        assert (b.tags["in_nelems"], b.tags["out_nelems"], b.tags["group_size"], b.tags["dtype"]) == (53120, 53120, 2, "Float")
        assert b.tags["pg_ranks"] == "[0, 1]" and b.bytes == 53120 * 4
        sizes = sorted({s.tags["in_nelems"] for s in comm if s.kind == "all_reduce"})
        assert sizes == [2049000, 2431040, 6563840, 6637568, 7875584]

    def test_collective_bytes_of_every_c10_dtype_name(self, tmp_path):
        """record_param_comms writes c10's ScalarType name (c10/core/ScalarType.h): ComplexFloat is 8 bytes an
        element, QInt32 4, Float8_e4m3fnuz 1. An unknown name left the collective 0 bytes (size unknown)."""
        for dtype, size in (("ComplexFloat", 8), ("ComplexDouble", 16), ("QInt32", 4), ("Float8_e4m3fnuz", 1),
                            ("UInt16", 2), ("BFloat16", 2)):
            doc = kineto_doc(0, world=1)
            for e in doc["traceEvents"]:
                if "dtype" in e.get("args", {}):
                    e["args"]["dtype"] = dtype
            tl = import_kineto(write_kineto(tmp_path / f"{dtype}.json", doc)).timeline
            ar = [s for s in tl.spans if s.kind == "all_reduce"]
            assert ar and {s.bytes for s in ar} == {float((1 << 20) * size)}, dtype

    def test_nccl_volume_from_record_param_comms(self):
        r = import_kineto(need(KINETO_AR))
        lines = nccl_volume_table(r.nccl_rows)
        assert lines[1].split() == ["76671096.00", "nccl:all_reduce"]  # 3 steps x 25557032 elements
        assert lines[2].split() == ["159519.00", "nccl:broadcast"]

    def test_matches_plain_json_load(self):
        """The streaming reader sees exactly what json.load sees."""
        with gzip.open(need(KINETO_AR), "rt") as f:
            doc = json.load(f)
        s = TraceEventStream(KINETO_AR)
        events = list(s)
        assert events == doc["traceEvents"]
        assert s.header["baseTimeNanoseconds"] == doc["baseTimeNanoseconds"] == 1711964646000000000
        assert s.header["distributedInfo"]["rank"] == 0


class TestRealSendRecvTrace:
    """HTA tests/data/trace_filter/sampled_rank-0.json.gz: rank 0 of 128, pipeline p2p."""

    def test_sendrecv_kernels(self):
        tl = import_kineto(need(KINETO_SR)).timeline
        assert tl.meta["kernel_count"] == 1154 and tl.world_size == 128
        comm = [s for s in tl.spans if s.resource == "comm"]
        assert len(comm) == 10 and {s.kind for s in comm} == {"sendrecv"}
        assert {s.stream for s in comm} == {"84", "203"}
        first = min(tl.spans, key=lambda s: s.start_s)
        assert first.name == "permute_2D_lengths_kernel" and first.duration_s == pytest.approx(10e-6, abs=1e-12)

    def test_nccl_volume_from_input_dims(self):
        r = import_kineto(need(KINETO_SR))
        got = {ln.split()[1]: float(ln.split()[0]) for ln in nccl_volume_table(r.nccl_rows)[1:]}
        assert got == {"nccl:all_to_all": 841707904.0, "nccl:all_reduce": 78548927.0,
                       "nccl:_all_gather_base": 33554432.0}


class TestSynthetic:
    def test_two_ranks_merge_on_base_time(self, tmp_path):
        a = write_kineto(tmp_path / "r0.json", kineto_doc(0, base_ns=10**18))
        late = kineto_doc(1, base_ns=10**18 + 1_000_000)
        # rank 1 runs the same kernels 1 ms later: without its NCCL kernels, which would have to overlap rank 0's
        # (an all_reduce cannot end on one rank before it starts on another: the import refuses that)
        late["traceEvents"] = [e for e in late["traceEvents"] if "ncclDevKernel" not in e.get("name", "")]
        b = write_kineto(tmp_path / "r1.json.gz", late)
        tl = import_kineto([b, a]).timeline
        assert sorted(tl.meta["ranks"]) == [0, 1] and tl.world_size == 2
        start = {r: min(s.start_s for s in tl.spans if s.rank == r) for r in (0, 1)}
        assert start[1] - start[0] == pytest.approx(1e-3, abs=1e-9)

    def test_ops_from_gpu_user_annotations(self, tmp_path):
        files = [write_kineto(tmp_path / f"r{r}.json", kineto_doc(r)) for r in (0, 1)]
        ops = {"mm0": {"kind": "matmul", "resource": "compute"}, "ar0": {"kind": "all_reduce", "resource": "comm"}}
        tl = import_kineto(files, ops=ops).timeline
        ids = tl.by_id()
        assert {"mm0@r0", "ar0@r0", "mm0@r1", "ar0@r1"} <= set(ids)
        mm = ids["mm0@r0"]
        assert mm.duration_s == pytest.approx(100e-6, rel=1e-9) and mm.tags["kernels"] == 2 and mm.kind == "matmul"
        ar = ids["ar0@r1"]
        assert ar.resource == "comm" and ar.stream == "20" and ar.bytes == (1 << 20) * 4
        assert tl.meta["iteration"]["occurrences"] == 2
        # the last iteration is kept and the timeline starts at it
        assert mm.start_s == 0.0
        assert all(s.start_s >= 0 for s in tl.spans)
        first = import_kineto(files, ops=ops, iteration=0).timeline
        assert first.by_id()["ar0@r0"].duration_s == pytest.approx(50e-6, rel=1e-9)

    @pytest.mark.parametrize("it", [3, 7, -4])
    def test_iteration_past_the_occurrences_is_refused(self, tmp_path, it):
        """Three iterations of mm0/ar0 per rank: --iteration 3 (or -4) kept none of the named ops and silently
        dropped their 24 kernels (the timeline held only the memcpys, exit 0); now exit 2 naming the range."""
        from typer.testing import CliRunner

        from schedsim.cli import app

        files = [write_kineto(tmp_path / f"r{r}.json", kineto_doc(r, iterations=3)) for r in (0, 1)]
        ops = {"mm0": {"kind": "matmul", "resource": "compute"}, "ar0": {"kind": "all_reduce", "resource": "comm"}}
        assert {"mm0@r0", "ar0@r1"} <= set(import_kineto(files, ops=ops, iteration=2).timeline.by_id())
        with pytest.raises(TraceError, match=r"occur at most 3 time\(s\)"):
            import_kineto(files, ops=ops, iteration=it)
        sched = tmp_path / "ops.yaml"
        sched.write_text("schema_version: 1\nname: x\nworld_size: 2\nops:\n  - {name: mm0, kind: compute, "
                         "duration_us: 1}\n  - {name: ar0, kind: all_reduce, bytes: 4}\n")
        r = CliRunner().invoke(app, ["import", "kineto", *map(str, files), "--ops", str(sched), "--out",
                                     str(tmp_path / "imp"), "--iteration", str(it)])
        assert r.exit_code == 2 and "error: " in r.output and "fix: pass --iteration 0..2" in r.output, r.output
        assert not (tmp_path / "imp").exists()

    def test_gzip_and_plain_give_the_same_timeline(self, tmp_path):
        doc = kineto_doc(0)
        a = import_kineto(write_kineto(tmp_path / "a.json", doc)).timeline
        b = import_kineto(write_kineto(tmp_path / "b.json.gz", doc)).timeline
        assert a.spans == b.spans

    def test_duplicate_rank_refused(self, tmp_path):
        a = write_kineto(tmp_path / "a.json", kineto_doc(0))
        b = write_kineto(tmp_path / "b.json", kineto_doc(0))
        with pytest.raises(TraceError, match="rank 0 is also claimed"):
            import_kineto([a, b])

    def test_chrome_array_format_without_gpu_events(self, tmp_path):
        p = tmp_path / "cpu.json"
        p.write_text(json.dumps([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]))
        with pytest.raises(TraceError, match="no GPU events"):
            import_kineto(p)


class TestStreamReader:
    @pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
    def test_tiny_chunks_parse_like_json_load(self, tmp_path, chunk):
        doc = {"a": 1.5, "traceEvents": [{"x": "é\u2028", "n": 12345678901234567890}, {}, [1, 2], 3.25e-7],
               "b": {"c": [True, None]}, "baseTimeNanoseconds": 1700000000000000000}
        p = tmp_path / "d.json"
        p.write_text(json.dumps(doc), encoding="utf-8")
        s = TraceEventStream(p, chunk_chars=chunk)
        assert list(s) == doc["traceEvents"]
        assert s.header == {k: v for k, v in doc.items() if k != "traceEvents"}

    def test_number_split_across_chunks(self, tmp_path):
        p = tmp_path / "n.json"
        p.write_text('{"traceEvents": [123456789, 42]}')
        assert list(TraceEventStream(p, chunk_chars=20)) == [123456789, 42]


    def test_runs_decode_like_one_value_at_a_time(self, tmp_path):
        """Events are decoded in runs (one JSON array per ~run_chars characters); a run whose last boundary falls
        inside a string, or that is not JSON, is decoded again value by value: the events and header are
        json.load's (floats over 15 characters kept as their text)."""
        evs: list = [{"ph": "X", "name": "a}, {b" if i % 7 == 0 else f"k{i}", "ts": 4458676522690.655 + i,
                      "dur": 1.5, "args": {"grid": [1, 2], "o": {"p": {}}, "s": "x}]"}} for i in range(300)]
        evs[150] = 3
        p = tmp_path / "r.json"
        p.write_text(json.dumps({"traceEvents": evs, "baseTimeNanoseconds": 17}, indent=1))
        want = json.loads(p.read_text(), parse_float=keep_long)["traceEvents"]
        assert want[1]["ts"] == "4458676522691.655" and want[1]["dur"] == 1.5
        for run_chars in (1, 200, 5000, 1 << 20):
            s = TraceEventStream(p, long_floats_as_text=True, run_chars=run_chars)
            runs = list(s.batches())
            assert [e for r in runs for e in r] == want
            assert s.n_events == 300 and s.header == {"baseTimeNanoseconds": 17}
            assert len(runs) == (300 if run_chars == 1 else 1 if run_chars == 1 << 20 else len(runs))
        assert list(TraceEventStream(p)) == json.loads(p.read_text())["traceEvents"]

    @pytest.mark.parametrize("bad", ['{"ts": tru}', '{"ts": 1}}', '{"a": [1, 2}',
                                     '{"a": ' + "1" * 5000 + "}"])
    def test_a_run_that_does_not_decode_words_its_error_as_alone(self, tmp_path, bad):
        body = [json.dumps({"k": i, "s": "}, {"}) for i in range(200)] + [bad] + [json.dumps({"k": 1})] * 50
        p = tmp_path / "b.json"
        p.write_text('{"traceEvents": [\n' + ",\n".join(body) + "\n]}")
        errs = []
        for run_chars in (1, 300, 1 << 20):
            with pytest.raises(TraceError) as ei:
                list(TraceEventStream(p, run_chars=run_chars))
            errs.append(str(ei.value))
        assert errs[0] == errs[1] == errs[2]
        assert "after 200 events" in errs[0] or "after 201 events" in errs[0]


def _bend(ev: list, case: str) -> None:
    """Change the events of a kinetogen trace (kernel #1 is its first GPU event) for one case of
    :class:`TestReadInRuns`."""
    cpu = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4000, "tid": 4000, "ts": 900.0, "dur": 3.0}
    far = 2e12  # more than MAX_SPREAD_US from the first GPU event
    k = next(i for i in range(100, len(ev)) if ev[i].get("cat") == "kernel")  # a kernel mid-file
    if case == "cpu_far_before_first_gpu_event":  # no reference yet: kept
        ev.insert(0, dict(cpu, ts=far))
    elif case == "cpu_far_after_first_gpu_event":
        ev.insert(200, dict(cpu, ts=far))
    elif case == "cpu_negative_dur":
        ev.insert(150, dict(cpu, dur=-1.0))
    elif case == "cpu_bool_ts":
        ev.insert(150, dict(cpu, ts=True))
    elif case == "cpu_ts_text":
        ev.insert(150, dict(cpu, ts="12x"))
    elif case == "kernel_without_dur":
        del ev[k]["dur"]
    elif case == "kernel_bad_stream_then_bad_cpu":
        ev[k]["args"]["device"] = [0]
        ev.insert(180, dict(cpu, dur=-1.0))
    elif case == "odd_events":  # not a mapping, a category that is a list, a number, or none (metadata)
        ev[150:150] = [3, dict(cpu, cat=["cpu_op"]), dict(cpu, cat=7), {"ph": "M", "name": "process_name",
                                                                        "pid": 4000, "args": {"name": "p"}}]
    elif case == "runtime_row_malformed":  # a runtime row's time is no number: the error names the row
        ev.insert(150, {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4000, "tid": 4000,
                        "ts": "soon", "dur": 2.0, "args": {"correlation": 7}})
    elif case == "runtime_rows":
        ev[30:30] = [{"ph": "X", "cat": "cuda_runtime", "name": n, "pid": 4000, "tid": 4000, "ts": 1000.0 + k,
                      "dur": 2.0, "args": {"correlation": 100 + k}} for k, n in
                     enumerate(["cudaLaunchKernel", "cudaMemcpyAsync", "cudaFree", "cudaLaunchKernel"])]


class TestReadInRuns:
    """The reader checks the times of a run of events at once (kineto._read_run) and reads each event alone
    (kineto._read_event) where that check fails: the import, or its error, is the same as reading each event
    alone (jsonstream.RUN_CHARS = 1)."""

    @pytest.mark.parametrize("case", ["plain", "cpu_far_before_first_gpu_event", "cpu_far_after_first_gpu_event",
                                      "cpu_negative_dur", "cpu_bool_ts", "cpu_ts_text", "kernel_without_dur",
                                      "kernel_bad_stream_then_bad_cpu", "runtime_rows", "runtime_row_malformed",
                                      "odd_events"])
    def test_same_as_one_event_at_a_time(self, tmp_path, monkeypatch, case):
        import schedsim.trace.jsonstream as js

        doc = kineto_doc(0, iterations=40)
        _bend(doc["traceEvents"], case)
        p = write_kineto(tmp_path / "t.json", doc)

        def imp():
            try:
                r = import_kineto(p, keep_runtime=True)
            except TraceError as e:
                return str(e)
            assert r.replay is not None
            return r.timeline.spans, r.replay.runtime, r.timeline.meta, r.kernel_rows, r.nccl_rows

        in_runs = imp()
        assert len(next(iter(TraceEventStream(p).batches()))) > 400  # the whole array is one run
        monkeypatch.setattr(js, "RUN_CHARS", 1)
        assert len(next(iter(TraceEventStream(p).batches()))) == 1
        alone = imp()
        assert in_runs == alone
        ok = ("plain", "cpu_far_before_first_gpu_event", "runtime_rows", "odd_events")
        assert isinstance(in_runs, str) == (case not in ok), in_runs
        if case == "runtime_rows":
            assert [row.name for row in in_runs[1]] == ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaLaunchKernel"]
        if case == "runtime_row_malformed":
            assert "event #150: malformed cuda_runtime event (ValueError" in in_runs
        if case == "kernel_bad_stream_then_bad_cpu":  # the first error in file order
            k = next(i for i in range(100, 500) if doc["traceEvents"][i].get("cat") == "kernel")
            assert f"event #{k}: malformed" in in_runs


class TestBrokenFiles:
    def test_truncated_gzip(self, tmp_path):
        data = need(KINETO_AR).read_bytes()
        p = tmp_path / "t.json.gz"
        p.write_bytes(data[: len(data) // 2])
        with pytest.raises(TraceError, match="corrupt or truncated"):
            import_kineto(p)

    def test_truncated_json(self, tmp_path):
        text = json.dumps(kineto_doc(0))
        p = tmp_path / "t.json"
        p.write_text(text[: len(text) // 2])
        with pytest.raises(TraceError, match="truncated"):
            import_kineto(p)

    def test_truncated_after_an_event(self, tmp_path):
        text = json.dumps(kineto_doc(0))
        cut = text.index("}, {", len(text) // 3) + 1
        p = tmp_path / "t2.json"
        p.write_text(text[:cut])
        with pytest.raises(TraceError, match="truncated"):
            import_kineto(p)

    def test_random_bytes(self, tmp_path):
        p = tmp_path / "r.json"
        p.write_bytes(os.urandom(2048))
        with pytest.raises(TraceError):
            import_kineto(p)

    def test_random_bytes_with_gzip_magic(self, tmp_path):
        p = tmp_path / "r.json.gz"
        p.write_bytes(b"\x1f\x8b" + os.urandom(2048))
        with pytest.raises(TraceError):
            import_kineto(p)

    def test_empty_and_missing(self, tmp_path):
        p = tmp_path / "e.json"
        p.write_text("")
        with pytest.raises(TraceError, match="empty"):
            import_kineto(p)
        with pytest.raises(TraceError, match="no such file"):
            import_kineto(tmp_path / "missing.json")

    def test_malformed_event_field(self, tmp_path):
        p = tmp_path / "m.json"
        p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1,
                                                  "args": {"device": "gpu0"}}]}))
        with pytest.raises(TraceError, match="malformed kernel event"):
            import_kineto(p)

    @pytest.mark.parametrize(("args", "what"), [([1, 2], "array"), ("x", "string"), (3, "number")])
    def test_args_that_are_no_object_are_named(self, tmp_path, args, what):
        # it read "AttributeError: 'list' object has no attribute 'get'"; alone and among 300 events (read in runs)
        ev = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": args}
        for events in ([ev], [{**ev, "args": {"stream": 7}, "ts": i} for i in range(300)] + [ev]):
            p = tmp_path / "a.json"
            p.write_text(json.dumps({"traceEvents": events}))
            want = rf"malformed kernel event \(its args is a JSON {what}, not an object\)"
            with pytest.raises(TraceError, match=want):
                import_kineto(p)

    def test_trailing_garbage(self, tmp_path):
        p = tmp_path / "g.json"
        p.write_text(json.dumps(kineto_doc(0)) + " xyz")
        with pytest.raises(TraceError, match="unexpected data after"):
            import_kineto(p)


def test_gpu_trace_ranges_named_like_pipeline_actions_are_ops_without_ops_file(tmp_path):
    # The executor's --profiler trace on GPUs (2xH200, 2026-12-01) annotates each op with its name
    # (F0.3.0, sendF0.3, ...): without --ops, those gpu_user_annotation ranges must still become op spans,
    # so analyze tags the pipeline and prints its bubble. Per rank two 100 µs forwards (F{r}.{it}.0) and two
    # 50 µs all_reduce kernels, from t = 1000 µs: F 1000-1100, ar 1105-1155, F 1255-1355, ar 1360-1410.
    # Busy compute 200 µs of a 410 µs makespan: bubble 1 - 200/410 on both ranks.
    from kinetogen import kineto_doc, write_kineto

    from schedsim.trace.analyze import pipeline_bubbles, tag_pipeline
    from schedsim.trace.kineto import import_kineto

    paths = []
    for r in range(2):
        doc = kineto_doc(r)
        it = {}
        for e in doc["traceEvents"]:
            if e.get("name") == "mm0":
                ext = e["args"]["External id"]
                it.setdefault(ext, len(it))
                e["name"] = f"F{r}.{it[ext]}.0"
        paths.append(write_kineto(tmp_path / f"rank{r}.json", doc))
    tl = import_kineto(paths).timeline
    assert sorted(s.name for s in tl.spans if s.name.startswith("F")) == ["F0.0.0", "F0.1.0", "F1.0.0", "F1.1.0"]
    assert tag_pipeline(tl) == 4
    b = pipeline_bubbles(tl)
    assert b == {0: pytest.approx(1 - 200 / 410), 1: pytest.approx(1 - 200 / 410)}
