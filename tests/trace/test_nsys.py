"""Nsight Systems SQLite import: the real Perlmutter capture, schema-built tables, and broken files."""

from __future__ import annotations

import os
import shutil
import sqlite3

import pytest
from conftest import NSYS_REAL, need
from nsysdb import make_nsys_db

from schedsim.errors import TraceError
from schedsim.trace.analyze import kernel_share_table, nccl_volume_table
from schedsim.trace.nsys import import_nsys, nvtx_events, nvtx_sizes_nelems


class TestRealPerlmutterCapture:
    """hpcgroup/pipit's saxpy-mpi-cuda nsys export (nsys 2022.2, one A100)."""

    def test_counts_and_first_kernel(self):
        r = import_nsys(need(NSYS_REAL))
        tl = r.timeline
        assert tl.source == "import" and tl.world_size == 1
        assert tl.meta["kernel_count"] == 5
        assert tl.meta["memcpy_count"] == 15
        kernels = sorted((s for s in tl.spans if s.kind == "kernel"), key=lambda s: s.start_s)
        assert [s.name for s in kernels] == ["saxpy"] * 5
        # first kernel: start 924922186 ns, end 942626994 ns; the earliest event (a memcpy) starts at 887857742 ns
        assert tl.meta["t0_ns"] == 887857742
        assert kernels[0].start_s == pytest.approx((924922186 - 887857742) * 1e-9, abs=1e-12)
        assert kernels[0].duration_s == pytest.approx(17704.808e-6, abs=1e-12)
        assert kernels[0].stream == "7" and kernels[0].resource == "compute"
        copies = [s for s in tl.spans if s.resource == "copy"]
        assert {s.name for s in copies} == {"Memcpy HtoD", "Memcpy DtoH"}
        assert all(s.bytes == 262144000 for s in copies)
        assert tl.meta["ranks"][0]["process"] == "./saxpy-mpi-cuda"
        assert tl.meta["ranks"][0]["pid"] == 1230493

    def test_nvtx_names_from_text_and_textid(self):
        ev = nvtx_events(need(NSYS_REAL))
        assert len(ev) == 24
        pushpop = [t for t, e, _s, _e in ev if e == 59]
        # MPI ranges are registered strings (textId); "saxpy" is plain text
        assert pushpop[0] == "MPI_Init"
        assert pushpop.count("saxpy") == 5 and pushpop.count("MPI_Send") == 10 and pushpop.count("MPI_Recv") == 5
        assert pushpop[-1] == "MPI_Finalize"
        assert ("MPI Rank 0", 39) in [(t, e) for t, e, _s, _e in ev]

    def test_nvtx_range_maps_kernel_to_op(self):
        r = import_nsys(need(NSYS_REAL), ops={"saxpy": {"kind": "compute", "resource": "compute"}}, iteration=0)
        tl = r.timeline
        op = tl.by_id()["saxpy@r0"]
        # the first saxpy range launched the kernel 924922186..942626994; the timeline is cut to that iteration
        assert op.start_s == 0.0
        assert op.duration_s == pytest.approx(17704.808e-6, abs=1e-12)
        assert op.tags["kernels"] == 1 and tl.meta["iteration"]["occurrences"] == 5
        last = import_nsys(NSYS_REAL, ops={"saxpy": {}}, iteration=-1).timeline.by_id()["saxpy@r0"]
        assert last.duration_s == pytest.approx((1965496577 - 1947782617) * 1e-9, abs=1e-12)

    def test_kernel_share_table_by_hand(self):
        # 5 saxpy kernels of 17700.81..17733.42 us (mean 17714.70), one stream; first start 924922186 ns, last
        # end 1965496577 ns -> window 1040574.391 us; share = 5 * 17714.70 / 1040574.391 = 0.0851 -> "0.09", and
        # so is the busy share (one stream, no overlap)
        r = import_nsys(need(NSYS_REAL))
        bar = "-" * 29
        assert kernel_share_table(r.kernel_rows) == [
            f"{bar}Device 0{bar}",
            "   0.09 min:  17700.81 max:  17733.42 avg:  17714.70 saxpy_Stream 7",
            "   0.09",
        ]
        # no NCCL in this capture: a header only
        assert nccl_volume_table(r.nccl_rows, list(r.kernel_rows)) == [f"{bar}Device 0{bar}"]


class TestSchemaBuiltCapture:
    """Tables built from the documented schema: two processes/GPUs, emit_nvtx-style ranges, NCCL."""

    def test_kernel_share_and_nccl_tables_by_hand(self, synth_db):
        path, _exp = synth_db
        r = import_nsys(path)
        # Device 0 (nsysdb.make_nsys_db, rank 0): kernels run from 1_003_000 ns (first "Kernel") to 2_183_000 ns
        # (end of the all_gather), a window of 1180 us. Per name: all_reduce 2 x 150 us = 300 us -> 0.25; the three
        # "Kernel"s (renamed after the outer NVTX range) 20 + 21 + 22 = 63 us -> 0.05; all_gather 60 us -> 0.05;
        # sgemm 40 us -> 0.03; send 30 us -> 0.03; elementwise 3 + 3.007 + 3.014 + 5 = 14.021 us -> 0.01 (mean
        # 3.505 -> 3.51). Last line, the busy share: the first three elementwise kernels run inside the "Kernel"s,
        # so the union is 63 + 300 + 30 + (40 + 5) + 60 = 498 us -> 498 / 1180 = 0.42. Device 1 is shifted by 1 us,
        # its "Kernel"s are 0.333 us longer and its all_reduces 155 us: 310 / 1180 -> 0.26, busy 508.999 / 1180
        # -> 0.43.
        bar = "-" * 29
        assert kernel_share_table(r.kernel_rows) == [
            f"{bar}Device 0{bar}",
            "   0.25 min:    150.00 max:    150.00 avg:    150.00 ncclKernel_AllReduce_RING_LL_Sum_float_Stream 20",
            "   0.05 min:     20.00 max:     22.00 avg:     21.00 iteration 0_Stream 7",
            "   0.05 min:     60.00 max:     60.00 avg:     60.00 ncclDevKernel_AllGather_RING_LL_Stream 20",
            "   0.03 min:     40.00 max:     40.00 avg:     40.00 ampere_sgemm_128x64_nn_Stream 7",
            "   0.03 min:     30.00 max:     30.00 avg:     30.00 ncclDevKernel_SendRecv_Stream 20",
            "   0.01 min:      3.00 max:      5.00 avg:      3.51 elementwise_kernel_Stream 7",
            "   0.42",
            f"{bar}Device 1{bar}",
            "   0.26 min:    155.00 max:    155.00 avg:    155.00 ncclKernel_AllReduce_RING_LL_Sum_float_Stream 20",
            "   0.05 min:     20.33 max:     22.33 avg:     21.33 iteration 0_Stream 7",
            "   0.05 min:     60.00 max:     60.00 avg:     60.00 ncclDevKernel_AllGather_RING_LL_Stream 20",
            "   0.03 min:     40.00 max:     40.00 avg:     40.00 ampere_sgemm_128x64_nn_Stream 7",
            "   0.03 min:     30.00 max:     30.00 avg:     30.00 ncclDevKernel_SendRecv_Stream 20",
            "   0.01 min:      3.00 max:      5.00 avg:      3.51 elementwise_kernel_Stream 7",
            "   0.43",
        ]
        # element counts: all_reduce of [[1024, 4096]] twice = 2 * 4_194_304; send of [[3], [3]] = 3 * 3
        assert nccl_volume_table(r.nccl_rows, list(r.kernel_rows)) == [
            f"{bar}Device 0{bar}", "    8388608.00 nccl:all_reduce", "          9.00 nccl:send",
            f"{bar}Device 1{bar}", "    8388608.00 nccl:all_reduce", "          9.00 nccl:send",
        ]

    def test_processes_devices_streams_and_resources(self, synth_db):
        path, exp = synth_db
        tl = import_nsys(path).timeline
        assert tl.world_size == 2
        assert {r: (i["device"], i["pid"]) for r, i in tl.meta["ranks"].items()} == {0: (0, 100), 1: (1, 101)}
        assert tl.meta["kernel_count"] == exp["kernels"]
        comm = [s for s in tl.spans if s.resource == "comm"]
        # the SendRecv kernel ran inside "nccl:send", so the range names its kind
        assert {s.kind for s in comm} == {"all_reduce", "send", "all_gather"}
        assert {s.stream for s in comm} == {"20"}
        ar = next(s for s in comm if s.kind == "all_reduce")
        assert ar.tags["in_nelems"] == 1024 * 4096 and ar.tags["collective"] == "all_reduce"
        assert all(s.resource == "copy" and s.bytes == 1 << 20 for s in tl.spans if s.kind == "memcpy")
        first = exp["first_kernel"]
        k = min((s for s in tl.spans if s.kind == "kernel"), key=lambda s: s.start_s)
        assert k.start_s == pytest.approx((first[0] - tl.meta["t0_ns"]) * 1e-9)

    def test_op_ranges_start_end_and_registered_strings(self, synth_db):
        path, exp = synth_db
        tl = import_nsys(path, ops={"mm0": {"kind": "matmul", "resource": "compute"},
                                    "ag0": {"kind": "all_gather", "resource": "comm"}}).timeline
        ids = tl.by_id()
        t0 = tl.meta["t0_ns"]
        for oid, (ks, ke) in exp["ops"].items():
            s = ids[oid]
            assert s.start_s == pytest.approx((ks - t0) * 1e-9) and s.end_s == pytest.approx((ke - t0) * 1e-9), oid
        assert ids["mm0@r0"].kind == "matmul" and ids["mm0@r0"].tags["kernels"] == 2
        assert ids["ag0@r1"].resource == "comm" and ids["ag0@r1"].stream == "20"
        # kernels inside an op are folded into it, not duplicated
        assert not any(s.name == "ampere_sgemm_128x64_nn" for s in tl.spans)

    def test_op_id_ranges_recognised_without_ops(self, synth_db):
        path, _ = synth_db
        ids = import_nsys(path).timeline.by_id()
        assert "mm0@r0" in ids and "mm0@r1" in ids
        assert "ag0@r0" not in ids  # a plain name needs --ops

    def test_other_nsys_versions_columns(self, tmp_path):
        p = tmp_path / "v.sqlite"
        make_nsys_db(p, drop_kernel_cols=("shortName", "mangledName", "gridX", "blockX"),
                     extra_kernel_cols=("greenContextId", "launchType"))
        tl = import_nsys(p).timeline
        names = {s.name for s in tl.spans}
        assert "ncclKernel_AllReduce_RING_LL_Sum_float" in names  # short name derived from demangledName
        assert "elementwise_kernel" in names

    def test_several_files_share_one_time_base(self, tmp_path):
        a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
        make_nsys_db(a, pids=(100,), session_start_ns=10**18)
        make_nsys_db(b, pids=(200,), session_start_ns=10**18 + 5_000_000)
        # rank 1 runs the same kernels 5 ms later: without its NCCL kernels, which would have to overlap rank 0's
        # (an all_reduce cannot end on one rank before it starts on another: the import refuses that)
        with sqlite3.connect(b) as conn:
            conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName IN "
                         "(SELECT id FROM StringIds WHERE value LIKE '%nccl%')")
        conn.close()
        tl = import_nsys([a, b]).timeline
        assert tl.world_size == 2
        s0 = min(s.start_s for s in tl.spans if s.rank == 0)
        s1 = min(s.start_s for s in tl.spans if s.rank == 1)
        assert s1 - s0 == pytest.approx(5e-3, abs=1e-9)


class TestBrokenFiles:
    def test_nsys_rep_says_how_to_export(self, tmp_path):
        p = tmp_path / "run.nsys-rep"
        p.write_bytes(b"\x00" * 64)
        with pytest.raises(TraceError, match=r"nsys export --type sqlite --output run\.sqlite run\.nsys-rep"):
            import_nsys(p)

    def test_random_bytes(self, tmp_path):
        p = tmp_path / "x.sqlite"
        p.write_bytes(os.urandom(4096))
        with pytest.raises(TraceError, match="not an SQLite database"):
            import_nsys(p)

    def test_missing_file(self, tmp_path):
        with pytest.raises(TraceError, match="no such file"):
            import_nsys(tmp_path / "nope.sqlite")

    def test_missing_activity_tables(self, tmp_path):
        p = tmp_path / "m.sqlite"
        make_nsys_db(p, drop_tables=("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"))
        with pytest.raises(TraceError, match="CUPTI_ACTIVITY_KIND_KERNEL.*no GPU activity"):
            import_nsys(p)

    def test_missing_stringids(self, tmp_path):
        p = tmp_path / "s.sqlite"
        make_nsys_db(p, drop_tables=("StringIds",))
        with pytest.raises(TraceError, match="StringIds is missing"):
            import_nsys(p)

    def test_missing_required_column_is_named(self, tmp_path):
        p = tmp_path / "c.sqlite"
        make_nsys_db(p, drop_kernel_cols=("streamId",))
        with pytest.raises(TraceError, match=r"CUPTI_ACTIVITY_KIND_KERNEL lacks column\(s\) streamId"):
            import_nsys(p)

    def test_no_runtime_table_warns_and_still_imports(self, tmp_path):
        p = tmp_path / "r.sqlite"
        make_nsys_db(p, drop_tables=("CUPTI_ACTIVITY_KIND_RUNTIME",))
        r = import_nsys(p)
        assert any("CUPTI_ACTIVITY_KIND_RUNTIME" in w for w in r.warnings)
        assert r.timeline.meta["kernel_count"] > 0

    def test_truncated_sqlite(self, tmp_path):
        src = need(NSYS_REAL)
        p = tmp_path / "t.sqlite"
        data = src.read_bytes()
        p.write_bytes(data[: len(data) // 3])
        with pytest.raises(TraceError):
            import_nsys(p)

    def test_sqlite_without_any_table(self, tmp_path):
        p = tmp_path / "e.sqlite"
        sqlite3.connect(p).execute("CREATE TABLE other (x)").connection.commit()
        with pytest.raises(TraceError, match="no GPU activity"):
            import_nsys(p)


def test_sizes_nelems_of_profiler_ranges():
    # the element count is the product of the shape (a list of shapes multiplies out as one array)
    assert nvtx_sizes_nelems("nccl:all_reduce, sizes = [[1024, 4096]], input_op_ids = []") == 1024 * 4096
    assert nvtx_sizes_nelems("nccl:send, sizes = [[3], [3]], input_op_ids = []") == 9
    assert nvtx_sizes_nelems("nccl:_all_gather_base, sizes = [[24]], input_op_ids = []") == 24
    assert nvtx_sizes_nelems("nccl:all_reduce, sizes = [[]], input_op_ids = []") == 1  # a scalar
    assert nvtx_sizes_nelems("nccl:all_reduce, seq = 3") is None


def test_copy_of_real_file_renamed_rep_is_refused(tmp_path):
    src = need(NSYS_REAL)
    p = tmp_path / "capture.qdrep"
    shutil.copy(src, p)
    with pytest.raises(TraceError, match="nsys export --type sqlite"):
        import_nsys(p)
