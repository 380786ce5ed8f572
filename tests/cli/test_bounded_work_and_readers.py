"""Second review of issue 12 (bounded work, validated readers, output folders): inputs that slipped past the
first round. Each test drives the CLI in process and fails on the code before its fix (noted per test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app

H = "schema_version: 1\nname: h\n"


@pytest.fixture(autouse=True)
def _restore_limits():  # type: ignore[no-untyped-def]
    """``--max-ops`` sets SCHEDSIM_MAX_OPS in this process's environment (so torchrun ranks see it); put it back."""
    import os

    saved = {k: os.environ.get(k) for k in ("SCHEDSIM_MAX_OPS", "SCHEDSIM_MAX_CHARS", "SCHEDSIM_MAX_RANKS")}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def run(args: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    r = CliRunner().invoke(app, args, env=env)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r


def refused(r, *words: str) -> str:  # type: ignore[no-untyped-def]
    """Exit 2 with an ``error:`` naming ``words`` and a ``fix:`` line, no traceback."""
    text = r.output
    assert r.exit_code == 2, text
    assert "Traceback" not in text and "error:" in text and "fix:" in text, text
    for w in words:
        assert w in text, (w, text)
    return text


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# -- bounded expansion ----------------------------------------------------------------------------------


def test_inner_range_depending_on_outer_variable_is_estimated(tmp_path: Path) -> None:
    # before: the inner range(i*0 + 100) counted as 1, so 100 x 100 = 10,000 ops passed a limit of 1,000
    f = write(tmp_path, "s.yaml", H + "world_size: 1\nops:\n  - foreach: {i: range(100)}\n    ops:\n"
              "      - foreach: {j: range(i*0 + 100)}\n        ops:\n"
              "          - {name: 'a{i}_{j}', kind: compute, duration_us: 1}\n")
    t = refused(run(["check", str(f), "--max-ops", "1000"]), str(f), "about 10,000", "--max-ops")
    assert "estimated before expanding" in t
    # range(i) under i: range(100) holds 4,950 ops; the estimate (100 x 99) bounds it from above
    g = write(tmp_path, "t.yaml", H + "world_size: 1\nops:\n  - foreach: {i: range(100)}\n    ops:\n"
              "      - foreach: {j: range(i)}\n        ops:\n"
              "          - {name: 'a{i}_{j}', kind: compute, duration_us: 1}\n")
    refused(run(["check", str(g), "--max-ops", "4000"]), "about 9,900")
    assert run(["check", str(g), "--max-ops", "10000"]).exit_code == 0


def test_non_monotone_inner_range_is_stopped_while_expanding(tmp_path: Path) -> None:
    # range(50 - abs(i - 50)) is 0 at i=0 and 1 at i=99 (the estimate sees 100 ops) but holds 2,500 in all;
    # before: expanded whole past --max-ops 1000
    f = write(tmp_path, "s.yaml", H + "world_size: 1\nops:\n  - foreach: {i: range(100)}\n    ops:\n"
              "      - foreach: {j: range(50 - abs(i - 50))}\n        ops:\n"
              "          - {name: 'a{i}_{j}', kind: compute, duration_us: 1}\n")
    refused(run(["check", str(f), "--max-ops", "1000"]), str(f), "more than 1,000", "--max-ops")
    assert run(["check", str(f), "--max-ops", "3000"]).exit_code == 0


def test_parameter_string_repeated_in_every_op_is_bounded(tmp_path: Path) -> None:
    # a 100,000-character parameter in the names of 50 ops is 5,000,000 characters; the estimate sees "{big}{i}"
    # (8 characters per op). Before: built whole (at full size, 3000 ops x 1 MB ended in a MemoryError traceback)
    f = write(tmp_path, "s.yaml", H + "world_size: 1\nparams:\n  big: \"{'a'*100000}\"\nops:\n"
              "  - foreach: {i: range(50)}\n    ops:\n      - {name: '{big}{i}', kind: compute, duration_us: 1}\n")
    refused(run(["check", str(f)], env={"SCHEDSIM_MAX_CHARS": "1000000"}), str(f), "1,000,000 characters",
            "SCHEDSIM_MAX_CHARS")
    assert run(["check", str(f)], env={"SCHEDSIM_MAX_CHARS": "6000000"}).exit_code == 0


@pytest.mark.parametrize("entry", [
    "{name: '{big}{i}', kind: compute, duration_us: 1}",                    # the parameter in every name
    "{name: 'c{i}', stream: '{big}{i % 2}', kind: compute, duration_us: 1}",  # in a stream, two values
    "{name: \"{'a' * (i * 1000)}\", kind: compute, duration_us: 1}",           # short first row, long later ones
])
def test_long_string_in_many_rows_refused_at_the_field(tmp_path: Path, entry: str) -> None:
    # issue 38 (hostile38x): a 1 MB parameter in 3000 names took 28-37 s before the refusal (block path built
    # every name, then joined them); the limit is now checked from one row before the whole field is built.
    # 400 rows x 20 kB = 8 M characters > the 1 M limit set here; the line and entry are named, then the fix.
    f = write(tmp_path, "s.yaml", H + "world_size: 1\nparams:\n  big: \"{'a'*20000}\"\nops:\n"
              "  - foreach: {i: range(400)}\n    ops:\n      - " + entry + "\n")
    refused(run(["predict", str(f), "--out", str(tmp_path / "o")], env={"SCHEDSIM_MAX_CHARS": "1000000"}),
            f"{f}:9:", "ops[0].ops[0]", "1,000,000 characters", "SCHEDSIM_MAX_CHARS")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("field,value,bound", [
    ("m", "2**64*2**64", "1099511627776"),          # before: OverflowError traceback converting FLOP to float
    ("repeat", "10**12", "1000000"),                # before: the simulator ran for minutes
])
def test_absurd_matmul_sizes_are_refused(tmp_path: Path, field: str, value: str, bound: str) -> None:
    op = {"m": "8", "n": "8", "k": "8", "repeat": "1"}
    op[field] = f'"{value}"'
    f = write(tmp_path, "s.yaml", H + "world_size: 1\nops:\n  - {name: mm, kind: matmul, dtype: fp32, "
              + ", ".join(f"{k}: {v}" for k, v in op.items()) + "}\n")
    refused(run(["predict", str(f), "--out", str(tmp_path / "o")]), str(f), f"ops[0].{field}", bound)
    assert not (tmp_path / "o").exists()


def test_long_expression_error_is_cut(tmp_path: Path) -> None:
    # before: the message repeated the whole 200 kB expression, twice
    f = write(tmp_path, "s.yaml", H + "world_size: 1\nparams:\n  a: \"{" + "(" * 100_000 + "1" + ")" * 100_000
              + "}\"\nops:\n  - {name: c, kind: compute, duration_us: 1}\n")
    t = refused(run(["check", str(f)]), "params.a", "200,001 characters")
    assert len(t) < 2000


# -- charts and summaries of long or many names -------------------------------------------------------------


def test_gantt_folds_streams_of_one_rank_and_cuts_long_names() -> None:
    from schedsim.report.gantt import draw_gantt
    from schedsim.sim.timeline import Span, Timeline

    long = "s" * 100_000
    spans = [Span(f"o{i}@r0", f"o{i}", 0, f"st{i:03d}", "compute", "compute", i * 1e-6, (i + 1) * 1e-6)
             for i in range(300)]
    spans.append(Span("x@r0", "x", 0, long, "compute", "compute", 0.0, 1e-6))
    tl = Timeline(schedule="h", source="predict", world_size=1, launch="eager", spans=spans)
    fig = draw_gantt([("h", tl)], title="t" * 100_000, max_lanes=48)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    # before: 301 lanes (one per stream) and a 100,000-character label measured by the font engine
    assert len(labels) == 46
    assert labels[-1] == "r0 +256 more streams"  # 301 streams: 45 shown, 256 folded
    assert max(len(x) for x in labels) <= 43
    assert len(fig.axes[0].get_title()) <= 200


def test_summary_cuts_a_long_schedule_name(tmp_path: Path) -> None:
    # before: rich highlighted a 400 kB schedule name for minutes
    f = write(tmp_path, "s.yaml", "schema_version: 1\nname: " + "n" * 200_000 + "\nworld_size: 1\nops:\n"
              "  - {name: c, kind: compute, duration_us: 1}\n")
    r = run(["predict", str(f), "--out", str(tmp_path / "o"), "--no-gantt"])
    assert r.exit_code == 0, r.output
    assert "n" * 39 + "…" + "n" * 40 in r.output and "n" * 81 not in r.output


# -- readers ------------------------------------------------------------------------------------------------


def _ev(name: str, ts: object, dur: object = 1.0) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7}}


def _kineto(tmp_path: Path, events: list, world: int = 1, raw: str | None = None) -> Path:
    import json

    p = tmp_path / "k.json"
    p.write_text(raw if raw is not None else json.dumps(
        {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": world}, "traceEvents": events}))
    return p


@pytest.mark.parametrize("events,raw,words", [
    # before: decimal.InvalidOperation / OverflowError tracebacks, or True read as 1 µs
    ([_ev("g", [1])], None, ["event #0", "'g'", "ts is '[1]', not a number"]),
    ([_ev("g", "abc")], None, ["event #0", "ts is 'abc', not a number"]),
    ([_ev("g", True)], None, ["event #0", "ts is 'True', not a number"]),
    (None, '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "g", "ts": 1' + "0" * 400 + ', "dur": 1}]}',
     ["event #0", "ts is inf"]),
    # before: the same kernel twice on one stream was imported as two spans (its time counted twice)
    ([_ev("g", 100.0, 10.0), _ev("g", 100.0, 10.0)], None, ["events #0 and #1", "'g' twice", "stream 7"]),
])
def test_kineto_bad_times_and_repeated_events(tmp_path: Path, events, raw, words) -> None:  # type: ignore[no-untyped-def]
    p = _kineto(tmp_path, events, raw=raw)
    refused(run(["import", "kineto", str(p), "--out", str(tmp_path / "o")]), str(p), *words)


def test_kineto_world_size_past_the_rank_limit(tmp_path: Path) -> None:
    # before: a world_size of 10^12 was taken as is
    p = _kineto(tmp_path, [_ev("g", 1.0)], world=10**12)
    refused(run(["import", "kineto", str(p), "--out", str(tmp_path / "o")]), "world_size is 1,000,000,000,000")


def test_kineto_overlap_on_one_stream_is_reported(tmp_path: Path) -> None:
    # before: silent. A stream runs in order, so g [100, 150) and h [120, 170) cannot both be right
    p = _kineto(tmp_path, [_ev("g", 100.0, 50.0), _ev("h", 120.0, 50.0), _ev("i", 200.0, 1.0)])
    r = run(["import", "kineto", str(p), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "1 pair(s) of events overlap" in r.output and "overlap by 30 µs" in r.output


def _timeline_v2(tmp_path: Path) -> dict:
    import json

    from schedsim.sim.timeline import Span, Timeline

    spans = [Span(f"a{i}@r{i % 2}", f"a{i}", i % 2, "s0", "matmul", "compute", float(i), i + 1.0) for i in range(4)]
    tl = Timeline(schedule="h", source="predict", world_size=2, launch="eager", spans=spans)
    tl.write_json(tmp_path / "ok.json")
    return json.loads((tmp_path / "ok.json").read_text())


@pytest.mark.parametrize("breakage,words", [
    (lambda d: d.update(n_ops="abc"), ["n_ops is 'abc'"]),            # before: ValueError traceback
    (lambda d: d.update(n_ops=[1]), ["n_ops is '[1]'"]),              # before: TypeError traceback
    # before: each of these read silently as other values (0.5 -> rank 0, "1.5" -> 1.5 s, code 0.7 -> 0, tags of
    # row -1 given to the last op, rank 7 of a 2-rank run kept)
    (lambda d: d["columns"].update(rank=[0.5, 1, 0, 1]), ["'rank' holds float64"]),
    (lambda d: d["columns"].update(rank=[0, 7, 0, 1]), ["'rank' holds 7, outside 0..1"]),
    (lambda d: d["columns"].update(start_s=["0", "1", "2", "3"]), ["'start_s' holds str"]),
    (lambda d: d["columns"].update(start_s=[[0.0, 1.0], [2.0, 3.0]]), ["'start_s' is not a flat list"]),
    (lambda d: d["columns"]["stream"].update(codes=[0.7, 0, 0, 0]), ["'stream.codes' holds float64"]),
    (lambda d: d["columns"].update(tags={"index": [-1], "values": [{"mb": 1}]}), ["tags: index -1"]),
    (lambda d: d["columns"].update(bytes=[-1.0, 0, 0, 0]), ["'bytes' holds a negative"]),
    (lambda d: d.update(critical_path=5), ["critical_path is '5'"]),  # before: TypeError traceback
])
def test_columnar_timeline_lies_are_refused(tmp_path: Path, breakage, words) -> None:  # type: ignore[no-untyped-def]
    import json

    d = _timeline_v2(tmp_path)
    breakage(d)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    refused(run(["compare", str(tmp_path / "ok.json"), str(bad), "--out", str(tmp_path / "c")]), str(bad), *words)


def test_row_timeline_rank_must_be_an_integer_of_the_run(tmp_path: Path) -> None:
    import json

    d = _timeline_v2(tmp_path)
    from schedsim.sim.timeline import Timeline

    rows = Timeline.from_dict(d).to_dict(layout="rows")
    for bad_rank, word in (("1", "rank is '1'"), (10**30, "rank is '1"), (2, "rank is '2'")):
        rows["ops"][1]["rank"] = bad_rank  # before: "1" read as 1, 10**30 an OverflowError traceback, 2 kept
        f = tmp_path / "rows.json"
        f.write_text(json.dumps(rows))
        refused(run(["compare", str(tmp_path / "ok.json"), str(f), "--out", str(tmp_path / "c")]), "ops[1]", word)


_RUN = ("{bin}\n# nThread 1 nGpus 2 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0\n#\n#  out-of-place  in-place\n#  size count type redop root time algbw busbw #wrong "
        "time algbw busbw #wrong\n#  (B) (elements) (us) (GB/s) (GB/s) (us) (GB/s) (GB/s)\n"
        "        1024           {c}     float    {op}      -1    {t:.2f}    {ab:.2f}    {bw:.2f}      0     9.00    "
        "0.11    {ib:.2f}      0\n")


def test_nccl_tests_log_with_two_collectives_keeps_each_runs_name(tmp_path: Path) -> None:
    # the second run's binary line comes before its "# nThread" header. Before: it was cut into the first run,
    # so the second run took the file name's collective (all_reduce) and its all_gather rows became all_reduce rows
    log = tmp_path / "all_reduce_perf.log"
    # busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for all_gather (nccl-tests), n = 2
    # count: 1024 B of floats, per rank for all_gather (nccl-tests paramcount = count / nranks)
    log.write_text(_RUN.format(bin="./build/all_reduce_perf -b 8 -e 1024", op="sum", t=10.0, ab=0.10, bw=0.10, ib=0.11,
                               c=256)
                   + _RUN.format(bin="./build/all_gather_perf -b 8 -e 1024", op="none", t=50.0, ab=0.02, bw=0.01,
                                 ib=0.06, c=128))
    r = run(["calibrate", "--from-nccl-tests", str(log), "--out", str(tmp_path / "p.yaml")])
    assert r.exit_code == 0, r.output
    assert "# all_reduce over 2 ranks" in r.output and "# all_gather over 2 ranks" in r.output
    import yaml

    tables = yaml.safe_load((tmp_path / "p.yaml").read_text())["collectives"]["tables"]
    assert set(tables) >= {"all_reduce", "all_gather"}


# -- output folders -----------------------------------------------------------------------------------------


def test_predict_into_a_folder_of_the_users_own_files_removes_none(tmp_path: Path) -> None:
    # before: --out pointing at a project folder deleted the user's memory.png and pipeline.png (names predict
    # may write), because a folder without a manifest was taken for an old schedsim folder
    sched = Path(__file__).resolve().parents[2] / "schedules" / "allgather_mm.yaml"
    proj = tmp_path / "proj"
    proj.mkdir()
    for n in ("memory.png", "pipeline.png", "gantt.svg"):
        (proj / n).write_text("mine")
    assert run(["predict", str(sched), "--out", str(proj), "--no-gantt"]).exit_code == 0
    assert all((proj / n).read_text() == "mine" for n in ("memory.png", "pipeline.png", "gantt.svg"))
    assert (proj / "timeline.json").exists()
    # a folder schedsim wrote before manifests held content hashes (a timeline.json, no record of writing it): its
    # files are the user's now; predict refuses to replace them (issue 32) and removes none
    old = tmp_path / "old"
    old.mkdir()
    (old / "timeline.json").write_text('{"format": "schedsim.timeline", "version": 1, "ops": []}')
    (old / "pipeline.png").write_text("stale")
    r = run(["predict", str(sched), "--out", str(old), "--no-gantt"])
    assert r.exit_code == 2 and "timeline.json: exists and schedsim did not record writing it" in r.output
    assert (old / "pipeline.png").read_text() == "stale" and '"version": 1' in (old / "timeline.json").read_text()


def test_a_set_is_moved_in_under_the_folders_lock(tmp_path: Path) -> None:
    # before: two runs finishing together moved their files in interleaved (one's gantt.png beside the other's
    # timeline.json); now the move waits for the folder's flock, which a concurrent run holds while it moves
    import fcntl
    import os
    import threading
    import time

    from schedsim.sim.timeline import output_set

    fd = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)

    def other_run() -> None:
        with output_set(tmp_path, "t") as st:
            (st / "a.json").write_text("x")

    t = threading.Thread(target=other_run)
    t.start()
    time.sleep(0.3)
    assert not (tmp_path / "a.json").exists()  # waiting for the lock
    os.close(fd)
    t.join(5)
    assert (tmp_path / "a.json").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".schedsim-outputs.json", "a.json"]


def test_disk_full_keeps_the_earlier_set_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # before: "fix: choose a path you can write" for a full disk (also checked by hand on a 300 kB tmpfs)
    import errno

    from schedsim.sim.timeline import Timeline

    sched = Path(__file__).resolve().parents[2] / "schedules" / "allgather_mm.yaml"
    out = tmp_path / "o"
    assert run(["predict", str(sched), "--out", str(out), "--no-gantt"]).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full(self, path, *a, **k):  # type: ignore[no-untyped-def]
        Path(path).write_bytes(b"{partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Timeline, "write_json", full)
    t = refused(run(["predict", str(sched), "--out", str(out), "--no-gantt"]), "No space left on device",
                "free space on that disk")
    assert "choose a path you can write" not in t
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no staging folder, no partial file


# -- world size ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("w", [3, 40])  # 40 > 32 members: the collective is one hub node of the wait-for graph
def test_collective_order_deadlock_is_named_with_small_and_large_groups(w: int) -> None:
    # the hub that made a 1M-rank all_reduce linear (before: all pairs of members, and a 1M-rank tuple built
    # per op, so `check` of world_size 1,000,000 ran past 60 s) must still explain a hang in rank terms
    from schedsim.errors import DeadlockError
    from schedsim.graph.build import build_graph
    from schedsim.spec.loader import load_text

    rest = ", ".join(str(r) for r in range(1, w))
    ops = (f"  - {{name: small, kind: all_reduce, bytes: 1024, stream: b, ranks: [1], group: [0, 1]}}\n"
           f"  - {{name: big, kind: all_reduce, bytes: 1024, stream: a, ranks: [0, {rest}]}}\n"
           f"  - {{name: small, kind: all_reduce, bytes: 1024, stream: b, ranks: [0], group: [0, 1]}}\n")
    with pytest.raises(DeadlockError, match="communicators that share two or more ranks") as e:
        build_graph(load_text(f"schema_version: 1\nname: t\nworld_size: {w}\nops:\n" + ops))
    assert "big" in str(e.value) and "small" in str(e.value)


def test_communicator_key_shares_the_ops_group() -> None:
    from schedsim.graph.ops import RankGroup
    from tests.oracle.nccl_graph import communicator

    class O:  # the fields communicator reads
        kind, group, nccl_group = "all_reduce", RankGroup(range(1000)), None

    op = O()
    key = communicator(op, 1000)
    assert key == ("group", tuple(range(1000))) and key[1] is op.group  # before: a copy of 1000 ranks per call


@pytest.mark.parametrize("start,end,dev", [("'abc'", "'def'", "0"), ("10", "20", "'gpu0'")])
def test_nsys_sqlite_with_text_in_integer_columns(tmp_path: Path, start: str, end: str, dev: str) -> None:
    # before: TypeError / ValueError tracebacks (SQLite columns are untyped)
    import sqlite3

    db = tmp_path / "r.sqlite"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    c.execute("INSERT INTO StringIds VALUES (1, 'gemm')")
    c.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, globalPid, shortName, "
              "demangledName, gridX, gridY, gridZ, blockX, blockY, blockZ, correlationId)")
    c.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({start}, {end}, {dev}, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)")
    c.commit()
    c.close()
    refused(run(["import", "nsys", str(db), "--out", str(tmp_path / "o")]), str(db), "wrong type")
