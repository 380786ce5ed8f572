"""`schedsim calibrate --from-nccl-tests` on malformed logs (issue #33): each log is either refused (exit 2,
``error: FILE:LINE: ...`` and a fix, no profile written) or read to exactly the right numbers, and the profile
written loads back with those numbers. No torch, no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.hardware.profile import load_profile

FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n}  # nccl-tests src/*.cu GetBw


def row(size: int, t: float, n: int = 4, coll: str = "all_reduce", *, wrong: str = "0", dtype: str = "float",
        redop: str = "sum", t_ip: float | None = None) -> str:
    """One row as nccl-tests v2.19 prints it (writeBenchmarkLinePreamble / writeBenchmarkLineBody): algbw = S/t,
    busbw = algbw x the bus factor, both %6.2f; count S / type size, per rank for all_gather (its
    GetCollByteCount's paramcount = count / nranks)."""
    tb = {"float": 4, "half": 2}[dtype]
    per = n if coll == "all_gather" else 1
    t_ip = t if t_ip is None else t_ip
    a, a2 = size / (t * 1e3), size / (t_ip * 1e3)
    f = FACTOR[coll](n)
    return (f"{size:12d}  {size // tb // per:12d}  {dtype:>8s}  {redop:>6s}  {-1:6d}  {t:7.2f}  {a:6.2f}  "
            f"{a * f:6.2f}  {wrong:>6s}  {t_ip:7.2f}  {a2:6.2f}  {a2 * f:6.2f}  {wrong:>6s}")


HEAD = ["# nThread 1 nGpus 4 minBytes 1024 maxBytes 16777216 step: 16(factor) warmup iters: 5 iters: 20 agg "
        "iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        *[f"#  Rank  {r} Group  0 Pid  100{r} on host device  {r} [0000:0{r}:00] NVIDIA H100 80GB HBM3"
          for r in range(4)],
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
        "busbw  #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  "
        "(GB/s)"]
SIZES_US = [(1024, 20.0), (16384, 22.5), (262144, 40.0), (4194304, 95.0), (16777216, 300.0)]
ROWS = [row(s, t) for s, t in SIZES_US]
FOOT = ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 12.3456", "#"]
HL = len(HEAD)  # rows start on line HL + 1


def good_table(sizes_us: list[tuple[int, float]] = SIZES_US, n: int = 4, coll: str = "all_reduce", *,
               printed: bool = False) -> list[tuple[float, float]]:
    """The (size, busbw) rows the profile must hold: size / time x the bus factor to 6 significant digits
    (``sizes_us`` holds the times as printed, both halves alike); ``printed``: the out-of-place busbw column as
    printed (2 decimals, 0.00 dropped), what a ``-C 1`` log's CPU time column leaves."""
    out = []
    for s, t in sizes_us:
        b = s / (t * 1e3) * FACTOR[coll](n)
        b = float(f"{b:.2f}") if printed else float(f"{b:.6g}")
        if b > 0:
            out.append((float(s), b))
    return out


def lines_with(i: int, text: str) -> list[str]:
    """The good log with row ``i`` replaced by ``text``."""
    rows = list(ROWS)
    rows[i] = text
    return HEAD + rows + FOOT


def calibrate(tmp: Path, text: str | bytes, *args: str, name: str = "all_reduce_perf.log"):  # type: ignore[no-untyped-def]
    log = tmp / name
    if isinstance(text, bytes):
        log.write_bytes(text)
    else:
        log.write_text(text)
    out = tmp / "p.yaml"
    res = CliRunner().invoke(app, ["calibrate", "--from-nccl-tests", str(log), "--out", str(out), *args])
    return res, log, out


# --- refused: (case id, log lines, extra CLI args, line the error names, words of the message) ------------------

R1 = row(1024, 20.0)
REFUSED: list[tuple[str, list[str], list[str], int, str]] = [
    ("size_exponent", lines_with(1, R1.replace("        1024", "       1e6", 1)), [], HL + 2, "whole numbers"),
    ("size_negative", lines_with(1, row(1048576, 30.0).replace(" 1048576", "-1048576", 1)), [], HL + 2,
     "negative size"),
    ("size_decimal_point", lines_with(0, R1.replace("1024", "1024.0", 1)), [], HL + 1, "whole numbers"),
    ("size_thousands_commas", lines_with(4, row(16777216, 300.0).replace("16777216", "16,777,216", 1)), [], HL + 5,
     "byte count"),
    ("count_exponent", lines_with(2, row(262144, 40.0).replace("65536", "6.6e4", 1)), [], HL + 3, "element count"),
    ("busbw_nan", lines_with(2, row(262144, 40.0).replace("9.83", " nan", 1)), [], HL + 3, "out-of-place busbw is nan"),
    ("time_inf_in_place", lines_with(3, row(4194304, 95.0).rsplit("  95.00", 1)[0] + "      inf  44.15  66.22       0"),
     [], HL + 4, "in-place time is inf"),
    ("algbw_negative", lines_with(0, R1.replace("  0.05  ", " -0.05  ", 1)), [], HL + 1, "out-of-place algbw is -0.05"),
    ("wrong_nonzero", lines_with(2, row(262144, 40.0, wrong="12")), [], HL + 3, "#wrong is 12"),
    ("wrong_exponent_count", lines_with(2, row(262144, 40.0, wrong="1e+06")), [], HL + 3, "#wrong is 1e+06"),
    ("row_cut_short", lines_with(4, "  ".join(row(16777216, 300.0).split()[:9])), [], HL + 5, "a row ends after 9"),
    ("row_extra_cell", lines_with(1, row(16384, 22.5) + "  7"), [], HL + 2, "a row ends after 1 of the 13"),
    ("type_unknown", lines_with(0, R1.replace("   float", " float33", 1)), [], HL + 1, "type 'float33'"),
    ("redop_unknown", lines_with(0, R1.replace("   sum", "   add", 1)), [], HL + 1, "redop 'add'"),
    ("root_below_minus_one", lines_with(0, R1.replace("    -1", "    -2", 1)), [], HL + 1, "root '-2'"),
    ("time_zero", lines_with(0, R1.replace("  20.00", "   0.00", 1).replace("  0.05  ", "  0.00  ", 2)), [],
     HL + 1, "time 0.00 us"),
    ("time_na", lines_with(0, R1.replace("  20.00", "    N/A", 1)), [], HL + 1, "out-of-place time 'N/A'"),
    ("size_twice", HEAD + ROWS[:3] + [ROWS[2]] + ROWS[3:] + FOOT, [], HL + 4, "size 262144 B after 262144 B"),
    ("sizes_out_of_order", HEAD + [ROWS[1], ROWS[0]] + ROWS[2:] + FOOT, [], HL + 2, "size 1024 B after 16384 B"),
    ("two_types_d_all", HEAD + ROWS + [row(1024, 20.0, dtype="half")] + FOOT, [], HL + 6,
     "rows of type float/sum (line 16) and half/sum"),
    ("busbw_of_8_ranks_in_a_4_rank_log", HEAD + [row(s, t, n=8) for s, t in SIZES_US] + FOOT, [], HL + 1,
     "busbw 0.09 GB/s is not algbw 0.05 x 1.5"),
    ("ranks_contradict", HEAD + ROWS + FOOT, ["--ranks", "8"], 1, "lists 4 ranks, not the 8 given"),
    ("collective_contradicts", ["./build/all_reduce_perf -b 1K -e 16M -f 16 -g 4"] + HEAD + ROWS + FOOT,
     ["--collective", "all_gather"], 1, "holds all_reduce (line 1), not the all_gather given"),
    ("no_table_at_all", HEAD + FOOT, [], 1, "has no table rows"),
    ("second_run_crashed", ["./build/all_reduce_perf"] + HEAD + ROWS + FOOT + ["./build/all_gather_perf"] + HEAD
     + ["NCCL WARN Cuda failure 'out of memory'"], [], 1 + HL + len(ROWS) + len(FOOT) + 1,
     "the run of all_gather_perf starting here has no table rows"),
    ("out_of_bounds_failed", HEAD + ROWS + ["# Out of bounds values : 3 FAILED"], [], HL + 6, "3 out-of-bounds"),
    ("glued_wrong_not_exact", HEAD[:-1] + [HEAD[-1] + "".join(r.strip() for r in ROWS[:2]).replace(" 0" + ROWS[1]
     .split()[0], " 3" + ROWS[1].split()[0])] + FOOT, [], HL, "in-place #wrong is 316384"),
    ("headerless_ten_cells", ["# nThread 1 nGpus 2"] + [" ".join(R1.split()[:10])], ["--collective", "all_reduce"], 2,
     "no column header"),
    ("header_columns_swapped", HEAD[:-2] + [HEAD[-2].replace("algbw   busbw", "busbw   algbw", 1)] + HEAD[-1:] + ROWS,
     [], HL - 1, "column header"),
    ("avg_not_a_number", HEAD + ROWS + ["# Avg bus bandwidth    : abc"], [], HL + 6, "Avg bus bandwidth 'abc'"),
    ("decimal_comma", lines_with(0, R1.replace("  20.00", "  20,00", 1)), [], HL + 1, "out-of-place time '20,00'"),
    ("timestamp_prefixed_row", lines_with(0, "2026-12-06 " + R1), [], HL + 1, "size '2026-12-06'"),
    ("stamp_bad", HEAD[:-2] + [HEAD[-2] + " timestamp"] + HEAD[-1:] + [R1 + "  06.12.2026 04:05:06"], [], HL + 1,
     "'06.12.2026' is not the timestamp (YYYY-MM-DD HH:MM:SS)"),
    ("stamp_column_missing", HEAD[:-2] + [HEAD[-2] + " timestamp"] + HEAD[-1:] + ROWS, [], HL + 1,
     "a row ends after 13 of the 14 columns"),
    # 1 MiB in 20.00 us is 52.43 GB/s (nccl-tests GetBw: algbw = size / time), not 99.00; busbw = 99.00 x 1.5 agrees
    ("algbw_not_size_over_time", lines_with(2, f"{2**20:12d}  {2**18:12d}     float     sum      -1    20.00   99.00  "
                                               "148.50       0    20.00   52.43   78.64       0"), [], HL + 3,
     "out-of-place algbw 99.00 GB/s is not size / time = 1048576 B / 20.00 us = 52.43 GB/s"),
    # in-place 1 MiB in 21.00 us prints 49.93 GB/s (49.92-49.94 for 21.00 +- 0.005 us): 50.00 is more than rounding
    ("algbw_in_place_off_by_more_than_rounding", lines_with(2, row(2**20, 20.0, t_ip=21.0).replace(
        "49.93   74.90", "50.00   75.00")), [], HL + 3, "in-place algbw 50.00 GB/s is not size / time"),
    ("count_not_size_over_type_size", lines_with(2, row(2**20, 20.0).replace(f"{2**18:12d}", f"{2**18 + 1:12d}", 1)),
     [], HL + 3, "count 262145 is not size 1048576 B / (4 B per float) = 262144"),
    ("all_gather_count_of_the_whole_buffer", ["./build/all_gather_perf -b 1K -e 16M -f 16 -g 4"] + HEAD
     + [row(s, t, coll="all_gather", redop="none").replace(f"{s // 16:12d}", f"{s // 4:12d}", 1) for s, t in SIZES_US]
     + FOOT, [], HL + 2, "count 256 is not size 1024 B / (4 B per float x 4 ranks) = 64"),
]


@pytest.mark.parametrize("lines,args,line,words", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_malformed_log_is_refused_naming_file_line_and_fix(tmp_path: Path, lines: list[str], args: list[str],
                                                           line: int, words: str) -> None:
    res, log, out = calibrate(tmp_path, "\n".join(lines) + "\n", *args)
    assert res.exit_code == 2, res.output
    err = res.output[res.output.index("error: "):]
    assert err.startswith(f"error: {log}:{line}: "), err
    assert words in err.splitlines()[0], err
    assert "\n  fix: " in err and "Traceback" not in res.output
    assert not out.exists()


def test_at_least_30_malformed_cases() -> None:
    assert len(REFUSED) + len(PARSED) >= 30 and len({c[0] for c in REFUSED}) == len(REFUSED)


def test_non_utf8_log_is_refused_at_its_line(tmp_path: Path) -> None:
    text = ("\n".join(HEAD + ROWS[:2]) + "\n").encode() + b"  \xff\xfe garbage\n"
    res, log, out = calibrate(tmp_path, text)
    assert res.exit_code == 2 and f"error: {log}:{HL + 3}:3: not UTF-8" in res.output, res.output
    assert not out.exists()


def test_two_logs_of_one_collective_and_group_size_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "all_reduce_perf.log", tmp_path / "b" / "all_reduce_perf.log"
    for p in (a, b):
        p.parent.mkdir()
        p.write_text("\n".join(HEAD + ROWS + FOOT) + "\n")
    res = CliRunner().invoke(app, ["calibrate", "--from-nccl-tests", str(a), str(b), "--out", str(tmp_path / "p.yaml")])
    assert res.exit_code == 2 and f"error: {b}:{HL + 1}: a second all_reduce table over 4 ranks" in res.output
    assert not (tmp_path / "p.yaml").exists()


# --- read exactly: (case id, log text, extra CLI args, {(collective, ranks): table}) ----------------------------

def _glued_header() -> str:
    """Newlines lost after the units header: the header's last word runs into the first size and each row's
    in-place #wrong into the next row's size (S4 of docs/sources.md)."""
    return "\n".join(HEAD[:-1] + [HEAD[-1].rstrip() + "".join(r.strip() for r in ROWS)] + FOOT) + "\n"


def _per_iter() -> str:
    """nccl-tests with per-iteration timing: i_min i_max i_p99 i_cv% after each #wrong (util.cu)."""
    head = HEAD[:-2] + ["#       size         count      type   redop    root     time   algbw   busbw  #wrong   "
                        "i_min   i_max   i_p99   i_cv%     time   algbw   busbw  #wrong   i_min   i_max   i_p99   "
                        "i_cv%",
                        "#        (B)    (elements)  (us)  (GB/s)  (GB/s)  (us)  (us)  (us)  (%)  (us)  (GB/s)  (GB/s)"
                        "  (us)  (us)  (us)  (%)"]
    rows = []
    for r in ROWS:
        c = r.split()
        rows.append("  ".join(c[:9] + ["19.50", "21.00", "20.90", "1.2"] + c[9:] + ["19.00", "20.50", "20.40", "0.9"]))
    return "\n".join(head + rows + FOOT) + "\n"


def _stamps() -> str:
    head = HEAD[:-2] + [HEAD[-2] + "  timestamp", HEAD[-1]]
    return "\n".join(head + [r + "  2026-12-06 04:05:06" for r in ROWS] + FOOT) + "\n"


def _two_runs() -> str:
    ag = [row(s, t, coll="all_gather", redop="none") for s, t in SIZES_US]
    return "\n".join(["./build/all_reduce_perf -b 1K -e 16M -f 16 -g 4"] + HEAD + ROWS + FOOT
                     + ["./build/all_gather_perf -b 1K -e 16M -f 16 -g 4"] + HEAD + ag + FOOT) + "\n"


BIG = [(1024, 20.0), (2**30, 12345678.0)]  # 1 GiB in 12.3 s: time printed "1.2e+07" (getFloatStr's %7.1e)

PARSED: list[tuple[str, str, list[str], dict[tuple[str, int], list[tuple[float, float]]]]] = [
    ("clean_with_command_and_nccl_info_lines",
     "\n".join(["./build/all_reduce_perf -b 1K -e 16M -f 16 -g 4", "host:1:1 [0] NCCL INFO Bootstrap : Using eth0",
                *HEAD, *ROWS, "host:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 4 - Destroy COMPLETE", *FOOT]) + "\n",
     [], {("all_reduce", 4): good_table()}),
    ("tabs_between_cells", "\n".join(HEAD + ["\t".join(r.split()) for r in ROWS] + FOOT) + "\n", [],
     {("all_reduce", 4): good_table()}),
    ("crlf_line_ends", "\r\n".join(HEAD + ROWS + FOOT) + "\r\n", [], {("all_reduce", 4): good_table()}),
    ("glued_header_and_rows", _glued_header(), [], {("all_reduce", 4): good_table()}),
    ("wrong_na", "\n".join(HEAD + [row(s, t, wrong="N/A") for s, t in SIZES_US] + FOOT) + "\n", [],
     {("all_reduce", 4): good_table()}),
    ("cputime_column", "\n".join(HEAD[:-2] + [HEAD[-2].replace("time", "cputime")] + HEAD[-1:] + ROWS + FOOT) + "\n",
     [], {("all_reduce", 4): good_table(printed=True)}),
    ("per_iteration_columns", _per_iter(), [], {("all_reduce", 4): good_table()}),
    ("timestamp_column", _stamps(), [], {("all_reduce", 4): good_table()}),
    ("time_in_exponent_form", "\n".join(HEAD + [row(s, t).replace("12345678.00", "    1.2e+07") for s, t in BIG]
                                        + FOOT) + "\n", [],
     {("all_reduce", 4): good_table([(1024, 20.0), (2**30, 1.2e7)])}),
    ("all_busbw_zero", "\n".join(HEAD + [row(8, 20.0), row(16, 21.0)] + FOOT) + "\n", [],
     {("all_reduce", 4): good_table([(8, 20.0), (16, 21.0)])}),
    ("two_runs_in_one_file", _two_runs(), [],
     {("all_reduce", 4): good_table(), ("all_gather", 4): good_table(coll="all_gather")}),
]


@pytest.mark.parametrize("text,args,want", [c[1:] for c in PARSED], ids=[c[0] for c in PARSED])
def test_log_read_exactly_and_profile_round_trips(tmp_path: Path, text: str, args: list[str],
                                                  want: dict[tuple[str, int], list[tuple[float, float]]]) -> None:
    res, _log, out = calibrate(tmp_path, text, *args, "--name", "strict")
    assert res.exit_code == 0, res.output
    prof = load_profile(str(out))
    assert prof.name == "strict"
    for (coll, n), table in want.items():
        assert [tuple(r) for r in prof.collectives.tables[coll][n]] == table


def test_exponent_time_is_read_exactly() -> None:
    from schedsim.network.nccl_tests import parse_nccl_tests

    log = parse_nccl_tests("\n".join(HEAD + [row(s, t).replace("12345678.00", "    1.2e+07") for s, t in BIG]),
                           collective="all_reduce")
    assert [(r.size_bytes, r.oop_time_us, r.oop_algbw_GBps, r.oop_busbw_GBps) for r in log.rows] == [
        (1024, 20.0, 0.05, 0.08), (2**30, 1.2e7, 0.09, 0.13)]


def test_skipped_lines_warn_once(tmp_path: Path) -> None:
    res, log, _ = calibrate(tmp_path, PARSED[0][1])
    warnings = [x for x in res.output.splitlines() if x.startswith("warning:")]
    assert warnings == [f"warning: {log}: skipped 3 line(s) that are neither '#' comments nor table rows (first: "
                        "line 1: './build/all_reduce_perf -b 1K -e 16M -f 16 -g 4')"]


@pytest.mark.parametrize("name", ["bad\nname", "tab\tname", "line\u2028sep", "nul\x00", "  "])
def test_profile_name_with_control_characters_is_refused(tmp_path: Path, name: str) -> None:
    res, _log, out = calibrate(tmp_path, "\n".join(HEAD + ROWS) + "\n", "--name", name)
    assert res.exit_code == 2 and "error: --name: the profile name" in res.output and "fix:" in res.output
    assert not out.exists()


@pytest.mark.parametrize("name", ["a: b #c", "'quoted' \"twice\"", "- [x]", "名前 h200", "%TAG !"])
def test_profile_name_with_yaml_special_characters_round_trips(tmp_path: Path, name: str) -> None:
    res, _log, out = calibrate(tmp_path, "\n".join(HEAD + ROWS) + "\n", "--name", name)
    assert res.exit_code == 0, res.output
    prof = load_profile(str(out))
    assert prof.name == name
    assert [tuple(r) for r in prof.collectives.tables["all_reduce"][4]] == good_table()
