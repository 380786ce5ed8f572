"""nccl-tests log parser: seed 004's glued text, current and old formats."""

from __future__ import annotations

import pytest
from exec_helpers import DATA, ROOT

from schedsim.errors import SchedsimError
from schedsim.nccl_tests import format_table, parse_nccl_tests, read_nccl_tests

SEED004 = DATA / "seed004_nccl_tests.txt"

SIZES = [8 * 2**i for i in range(25)]  # 8 B .. 128 MiB, factor 2


class TestSeed004:
    def test_glued_rows_all_found(self) -> None:
        (log,) = read_nccl_tests(SEED004)
        assert log.collective == "all_reduce"
        assert log.nranks == 8
        assert [r.size_bytes for r in log.rows] == SIZES
        assert [r.count for r in log.rows] == [s // 4 for s in SIZES]
        assert all(r.dtype == "float" and r.redop == "sum" and r.root == -1 for r in log.rows)
        assert log.avg_busbw_GBps == pytest.approx(1.16643)

    def test_values(self) -> None:
        (log,) = read_nccl_tests(SEED004)
        by = {r.size_bytes: r for r in log.rows}
        r = by[8]  # "8 2 float sum -1 40.57 0.00 0.00 0 42.15 0.00 0.00 0"
        assert (r.oop_time_us, r.oop_busbw_GBps, r.oop_wrong, r.ip_time_us, r.ip_wrong) == (40.57, 0.0, 0, 42.15, 0)
        r = by[524288]  # "... 298.4 1.76 3.08 0 287.6 1.82 3.19 0"
        assert (r.oop_time_us, r.oop_algbw_GBps, r.oop_busbw_GBps) == (298.4, 1.76, 3.08)
        assert (r.ip_time_us, r.ip_algbw_GBps, r.ip_busbw_GBps) == (287.6, 1.82, 3.19)
        r = by[134217728]  # the last row, glued as "0134217728 33554432 float ..."
        assert (r.count, r.oop_time_us, r.oop_busbw_GBps, r.ip_time_us, r.ip_busbw_GBps) == (
            33554432, 117937.0, 1.99, 118026.0, 1.99)
        assert by[16777216].oop_time_us == 13705.0
        assert all(x.oop_wrong == 0 and x.ip_wrong == 0 for x in log.rows)

    def test_table_drops_zero_busbw(self) -> None:
        (log,) = read_nccl_tests(SEED004)
        tab = log.table()
        assert tab[0] == (128, 0.01)
        assert tab[-1] == (134217728, 1.99)
        assert len(tab) == 21

    def test_whole_seed_file_if_present(self) -> None:
        seeds = sorted((ROOT / ".." / "shared" / "seeds").glob("004_*.txt"))
        if not seeds:
            pytest.skip("shared/seeds not beside the checkout")
        (log,) = read_nccl_tests(seeds[0])
        assert [r.size_bytes for r in log.rows] == SIZES


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
           8             2   float     sum    20.10    0.00    0.00  0e+00    20.00    0.00    0.00  0e+00
          64            16   float     sum    21.10    0.00    0.00  0e+00    21.00    0.00    0.01  0e+00
"""


def test_current_format_with_na_and_header_ranks() -> None:
    log = parse_nccl_tests("./build/all_gather_perf -b 1K -e 4K\n" + CURRENT)
    assert log.collective == "all_gather"
    assert log.nranks == 2
    assert [r.size_bytes for r in log.rows] == [1024, 2048, 4096]
    assert log.rows[0].oop_wrong is None and log.rows[0].redop == "none" and log.rows[0].root == -1
    assert log.rows[2].oop_busbw_GBps == 0.17 and log.rows[2].ip_busbw_GBps == 0.18


def test_current_format_glued_like_seed004() -> None:
    glued = " ".join(CURRENT.split())  # every newline lost
    log = parse_nccl_tests(glued, collective="all_gather")
    assert [r.size_bytes for r in log.rows] == [1024, 2048, 4096]
    assert log.rows[1].oop_time_us == 11.0


def test_old_format_without_root() -> None:
    log = parse_nccl_tests(OLD, collective="reduce_scatter")
    assert log.nranks == 4
    assert [(r.size_bytes, r.root, r.oop_wrong) for r in log.rows] == [(8, None, 0.0), (64, None, 0.0)]
    assert log.rows[1].ip_busbw_GBps == 0.01


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


def test_calibrate_from_nccl_tests_cli(tmp_path) -> None:
    """No torch needed: the profile gets the seed's table and predict accepts it."""
    from exec_helpers import schedsim

    out = tmp_path / "p3090.yaml"
    r = schedsim(["calibrate", "--from-nccl-tests", str(SEED004), "--base", "rtx3090_pcie1x4", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    assert "Avg bus bandwidth" in r.stdout
    from schedsim.hardware.profile import load_profile

    prof = load_profile(str(out))
    rows = prof.collectives.tables["all_reduce"][8]
    assert rows[0] == (128.0, 0.01) and rows[-1] == (134217728.0, 1.99)
    r = schedsim(["predict", "schedules/tp_ffn.yaml", "--set", "tp=8", "--profile", str(out), "--no-gantt",
                  "--out", str(tmp_path / "pred"), "--format", "json"])
    assert r.returncode == 0, r.stderr
