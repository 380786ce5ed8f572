"""nccl-tests log parser: generated logs (glued or not), current and old formats, and a log calibrate printed."""

from __future__ import annotations

import pytest
from exec_helpers import DATA

from schedsim.errors import SchedsimError
from schedsim.network.nccl_tests import format_table, parse_nccl_tests, read_nccl_tests

CALIBRATE_LOG = DATA / "calibrate_h200x2_all_reduce_2026-11-30.txt"  # printed by `schedsim calibrate`, 2xH200

SIZES = [8 * 2**i for i in range(25)]  # 8 B .. 128 MiB, factor 2

# Facts from S4's all_reduce_perf run (docs/sources.md; 8x RTX 3090, PCIe): size -> (out-of-place, in-place) us.
RTX3090_ALL_REDUCE_US = dict(zip(SIZES, [
    (40.57, 42.15), (40.50, 40.10), (40.46, 40.43), (40.59, 40.00), (40.35, 39.67), (40.98, 40.61),
    (40.22, 40.18), (40.61, 40.22), (40.58, 40.42), (41.27, 40.58), (40.84, 41.24), (41.25, 41.41),
    (43.61, 43.57), (74.19, 76.64), (130.8, 120.0), (245.8, 240.5), (298.4, 287.6), (702.4, 724.4),
    (1270.3, 1255.3), (3495.2, 3502.9), (6755.2, 6735.1), (13705.0, 13678.0), (27779.0, 27761.0),
    (56601.0, 56647.0), (117937.0, 118026.0)]))


def _bw(size: int, time_us: float, nranks: int) -> tuple[float, float]:
    """nccl-tests' all_reduce algbw = S / t and busbw = algbw * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md), GB/s."""
    algbw = size / (time_us * 1e3)
    return algbw, algbw * 2 * (nranks - 1) / nranks


def make_all_reduce_log(times: dict[int, tuple[float, float]], nranks: int, *, glued: bool = False) -> str:
    """An all_reduce_perf log in nccl-tests' current format (``#wrong`` columns, root), made from ``times``.

    ``glued=True`` runs the column header and the data rows together with no separator, as the experiment's
    copy of the log arrived (its newlines lost).
    """
    lines = [f"# nThread 1 nGpus {nranks} minBytes {min(times)} maxBytes {max(times)} step: 2(factor) "
             "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    lines += [f"# Rank {r} Group 0 Pid 1000 on host device {r} [0x{r:02x}] GPU" for r in range(nranks)]
    lines += ["#", "# out-of-place in-place",
              "# size count type redop root time algbw busbw #wrong time algbw busbw #wrong",
              "# (B) (elements) (us) (GB/s) (GB/s) (us) (GB/s) (GB/s)"]
    total = 0.0
    rows = []
    for size, (oop, ip) in sorted(times.items()):
        (a1, b1), (a2, b2) = _bw(size, oop, nranks), _bw(size, ip, nranks)
        total += b1 + b2
        rows.append(f"{size} {size // 4} float sum -1 {oop:g} {a1:.2f} {b1:.2f} 0 {ip:g} {a2:.2f} {b2:.2f} 0")
    if glued:  # the column header and every data row run together on one line
        lines[-1] += "".join(rows)
    else:
        lines += rows
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth : {total / (2 * len(times)):.5f}"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def rtx3090_log(tmp_path):
    p = tmp_path / "all_reduce_perf_8gpu.txt"
    p.write_text("./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8\n" + make_all_reduce_log(RTX3090_ALL_REDUCE_US, 8, glued=True))
    return p


class TestRtx3090AllReduceLog:
    """The experiment's 8-GPU all_reduce numbers, as a generated nccl-tests log whose newlines are lost."""

    def test_glued_rows_all_found(self, rtx3090_log) -> None:
        (log,) = read_nccl_tests(rtx3090_log)
        assert log.collective == "all_reduce"
        assert log.nranks == 8
        assert [r.size_bytes for r in log.rows] == SIZES
        assert [r.count for r in log.rows] == [s // 4 for s in SIZES]
        assert all(r.dtype == "float" and r.redop == "sum" and r.root == -1 for r in log.rows)
        avg = sum(_bw(s, t, 8)[1] for s, ts in RTX3090_ALL_REDUCE_US.items() for t in ts) / 50
        assert log.avg_busbw_GBps == pytest.approx(avg, abs=1e-5)
        assert log.avg_busbw_GBps == pytest.approx(1.1664, abs=1e-3)  # the experiment prints 1.16643

    def test_values(self, rtx3090_log) -> None:
        (log,) = read_nccl_tests(rtx3090_log)
        by = {r.size_bytes: r for r in log.rows}
        r = by[8]
        assert (r.oop_time_us, r.oop_busbw_GBps, r.oop_wrong, r.ip_time_us, r.ip_wrong) == (40.57, 0.0, 0, 42.15, 0)
        r = by[524288]  # algbw = 524288 B / 298.4 us = 1.757 GB/s; busbw = 1.757 * 2 * 7 / 8 = 3.0747
        assert (r.oop_time_us, r.oop_algbw_GBps, r.oop_busbw_GBps) == (298.4, 1.76, 3.07)
        assert (r.ip_time_us, r.ip_algbw_GBps, r.ip_busbw_GBps) == (287.6, 1.82, 3.19)
        r = by[134217728]  # the last row, glued to the previous one's "#wrong" column
        assert (r.count, r.oop_time_us, r.oop_busbw_GBps, r.ip_time_us, r.ip_busbw_GBps) == (
            33554432, 117937.0, 1.99, 118026.0, 1.99)
        assert by[16777216].oop_time_us == 13705.0
        assert all(x.oop_wrong == 0 and x.ip_wrong == 0 for x in log.rows)

    def test_table_busbw_from_time(self, rtx3090_log) -> None:
        """The table's busbw is size x 2(n-1)/n / the row's time (the lesser half; 6 digits), not the printed
        2-decimal column: 128 B in 39.67 us (in place; 40.35 out of place, printed 0.01 GB/s) is 0.00565, 1.8
        times less; 8 B to 64 B print 0.00 and are kept."""
        (log,) = read_nccl_tests(rtx3090_log)
        tab = dict(log.table())
        assert len(tab) == 25
        assert tab[8] == 0.000345083  # 8 B x 1.75 / 40.57 us (42.15 in place)
        assert tab[128] == 0.00564658  # 128 B x 1.75 / 39.67 us
        assert tab[134217728] == 1.99158  # 134217728 B x 1.75 / 117937 us (118026 in place); printed 1.99


def test_log_that_calibrate_printed() -> None:
    """A real table from `schedsim calibrate` on 2 H200s (2026-11-30): single time column, no in-place half."""
    (log,) = read_nccl_tests(CALIBRATE_LOG)
    assert log.collective == "all_reduce" and log.nranks == 2
    assert [r.size_bytes for r in log.rows] == [1024 * 4**i for i in range(11)]
    big = log.rows[-1]
    assert (big.size_bytes, big.oop_time_us, big.oop_busbw_GBps) == (1073741824, 3420.42, 313.92)
    # busbw = algbw * 2(n-1)/n = algbw at n = 2: 1073741824 B / 3420.42 us = 313.92 GB/s
    assert big.oop_busbw_GBps == pytest.approx(1073741824 / 3420.42e3, abs=0.005)
    assert log.avg_busbw_GBps == pytest.approx(90.5722)


CURRENT = """\
# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1
#
# Using devices
#  Rank  0 Group  0 Pid   1 on host device  0 [0x1b] NVIDIA H100
#  Rank  1 Group  0 Pid   2 on host device  1 [0x2b] NVIDIA H100
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           128     float    none      -1    10.00    0.10    0.05    N/A     9.50    0.11    0.05    N/A
        2048           256     float    none      -1    11.00    0.19    0.09    N/A    10.50    0.20    0.10    N/A
        4096           512     float    none      -1    12.00    0.34    0.17    N/A    11.50    0.36    0.18    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.107
"""

OLD = """\
# nThread 1 nGpus 4 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
          16             1   float     sum    20.10    0.00    0.00  0e+00    20.00    0.00    0.00  0e+00
          64             4   float     sum    21.10    0.00    0.00  0e+00    21.00    0.00    0.00  2e-07
"""


def test_current_format_with_na_and_header_ranks() -> None:
    log = parse_nccl_tests("./build/all_gather_perf -b 1K -e 4K\n" + CURRENT)
    assert log.collective == "all_gather"
    assert log.nranks == 2
    assert [r.size_bytes for r in log.rows] == [1024, 2048, 4096]
    assert log.rows[0].oop_wrong is None and log.rows[0].redop == "none" and log.rows[0].root == -1
    assert log.rows[2].oop_busbw_GBps == 0.17 and log.rows[2].ip_busbw_GBps == 0.18


def test_current_format_glued_into_one_line() -> None:
    glued = " ".join(CURRENT.split())  # every newline lost
    log = parse_nccl_tests(glued, collective="all_gather")
    assert [r.size_bytes for r in log.rows] == [1024, 2048, 4096]
    assert log.rows[1].oop_time_us == 11.0


def test_old_format_without_root() -> None:
    log = parse_nccl_tests(OLD, collective="reduce_scatter")
    assert log.nranks == 4
    # reduce_scatter's count column is the count per rank (nccl-tests paramcount = count / nranks): 64 B = 4 x 4 B x 4
    assert [(r.size_bytes, r.count, r.root, r.oop_wrong) for r in log.rows] == [(16, 1, None, 0.0), (64, 4, None, 0.0)]
    assert (log.rows[1].ip_time_us, log.rows[1].ip_busbw_GBps, log.rows[1].ip_wrong) == (21.0, 0.0, 2e-07)


def test_no_rows_is_an_error() -> None:
    with pytest.raises(SchedsimError, match="no nccl-tests data rows"):
        parse_nccl_tests("# nothing here\n")


def test_unknown_collective_is_an_error(tmp_path) -> None:
    p = tmp_path / "log.txt"
    p.write_text(CURRENT)
    with pytest.raises(SchedsimError, match="--collective"):
        read_nccl_tests(p)


def test_format_table_round_trips() -> None:
    rows = [{"size": 1024, "count": 256, "type": "float", "redop": "sum", "root": -1, "time_us": 12.5,
             "algbw": 0.08, "busbw": 0.12, "wrong": 0}]
    log = parse_nccl_tests(format_table(rows, "all_reduce_perf"), nranks=4)
    assert log.collective == "all_reduce"
    assert (log.rows[0].size_bytes, log.rows[0].oop_time_us, log.rows[0].oop_busbw_GBps) == (1024, 12.5, 0.12)


def test_format_table_avg_bus_bandwidth_is_nccl_tests_own() -> None:
    """nccl-tests' '# Avg bus bandwidth' is the mean busbw over both halves of every row (src/common.cu: bw[0] +=
    busBw and bw_count[0]++ per timed half): (1 + 3 + 2 + 4) / 4 = 2.5, not the out-of-place mean 1.5; a table
    without in-place halves says its mean is of the out-of-place half only."""
    rows = [{"size": 1024 * 4**i, "count": 256 * 4**i, "type": "float", "redop": "sum", "root": -1, "time_us": t,
             "algbw": 1024 * 4**i / (t * 1e3), "busbw": b, "wrong": 0, "ip_busbw": ib}
            for i, (t, b, ib) in enumerate([(1.024, 1.0, 3.0), (2.048, 2.0, 4.0)])]
    text = format_table(rows, "all_reduce over 2 ranks")
    assert text.splitlines()[-1] == "# Avg bus bandwidth    : 2.5000"
    assert parse_nccl_tests(text).avg_busbw_GBps == 2.5
    one_half = format_table([{k: v for k, v in r.items() if k != "ip_busbw"} for r in rows])
    assert one_half.splitlines()[-1] == "# Avg bus bandwidth    : 1.5000 (out-of-place only)"


def test_calibrates_own_all_gather_table_counts_the_whole_buffer() -> None:
    """schedsim calibrate prints count = size / 4 for every collective (the buffer it ran); nccl-tests' all_gather
    prints the count per rank. Each is read by its own convention, and the other refused."""
    rows = [{"size": 4096, "count": 1024, "type": "float", "redop": "none", "root": -1, "time_us": 20.48,
             "algbw": 0.2, "busbw": 0.15, "wrong": 0}]
    assert parse_nccl_tests(format_table(rows, "all_gather over 4 ranks (nccl), schedsim calibrate")).rows[0].count \
        == 1024
    with pytest.raises(SchedsimError, match=r"count 1024 is not size 4096 B / \(4 B per float x 4 ranks\) = 256"):
        parse_nccl_tests("./build/all_gather_perf\n" + format_table(rows), nranks=4)


def test_calibrate_from_nccl_tests_cli(tmp_path, rtx3090_log) -> None:
    """No torch needed: the profile gets the experiment's table and predict accepts it."""
    from exec_helpers import schedsim

    out = tmp_path / "p3090.yaml"
    r = schedsim(["calibrate", "--from-nccl-tests", str(rtx3090_log), "--base", "rtx3090_pcie1x4", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    avg = sum(_bw(s, t, 8)[1] for s, ts in RTX3090_ALL_REDUCE_US.items() for t in ts) / 50  # the log's 1.16643
    echoed = float(r.stdout.split("# Avg bus bandwidth    : ")[1].split()[0])
    assert echoed == pytest.approx(avg, abs=0.005)  # the mean of the printed (2-decimal) busbw of both halves
    from schedsim.hardware.profile import load_profile

    prof = load_profile(str(out))
    rows = prof.collectives.tables["all_reduce"][8]
    assert rows[0] == (8.0, 0.000345083) and rows[-1] == (134217728.0, 1.99158)  # size x 1.75 / time
    r = schedsim(["predict", "schedules/tp_ffn.yaml", "--set", "tp=8", "--profile", str(out), "--no-gantt",
                  "--out", str(tmp_path / "pred"), "--format", "json"])
    assert r.returncode == 0, r.stderr


def test_published_log_table_times_back_to_its_time_column() -> None:
    """NVIDIA/nccl-tests#309 (16 H100, 2 nodes): the table's busbw is the time columns', the lesser of a row's two
    halves, so the tables' model gives back each such time at or above every earlier one (the L-inf isotonic fit
    moves the rest: 64 KiB's 33.08 us after 32 KiB's 33.47). The printed out-of-place busbw put 256 B (94.40 us
    out of place, a stall; 25.90 in place) at 48.0 us and held every size up to 4 MiB near 94.4 us."""
    from pathlib import Path

    from schedsim.hardware.profile import HardwareProfile, load_profile
    from schedsim.network.links import LinkTables

    (log,) = read_nccl_tests(Path(__file__).parents[1] / "data" / "nccl_tests_309_h100_2x8_ib.log",
                             collective="all_reduce")
    tab = dict(log.table())
    assert len(tab) == len(log.rows) == 32  # 8 B .. 16 GiB, none dropped for a busbw printed 0.00
    assert tab[8] == 0.000607287  # 8 B x 2·15/16 / 24.70 us (in place; 68.52 out of place)
    assert tab[256] == 0.0185328  # 256 B x 1.875 / 25.90 us (in place; 94.40 out of place)
    assert tab[17179869184] == 469.211  # / 68652 us out of place (68668 in place); printed 469.21
    d = load_profile("h200").model_dump()
    d["collectives"]["tables"] = {"all_reduce": {16: [list(r) for r in log.table()]}}
    d["collectives"]["nodes"] = {"all_reduce": {16: 2}}
    lt = LinkTables(HardwareProfile.model_validate(d))
    times = [r.time_us for r in log.rows]
    exact = 0
    for k, r in enumerate(log.rows):
        if times[k] >= max(times[:k], default=0.0) and times[k] <= min(times[k:]):  # the fit leaves it
            got = lt.time("all_reduce", r.size_bytes, tuple(range(16)), nodes=2) * 1e6
            assert got == pytest.approx(r.time_us, rel=1e-5), r.size_bytes
            exact += 1
    assert exact == 30  # all but 32 KiB and 64 KiB (33.47, 33.08 us)
