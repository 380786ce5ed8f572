"""Estimates before expansion (schedsim.spec.limits), expression budgets, and output folders (schedsim.outdir)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schedsim.errors import SchedsimError, SpecError
from schedsim.expr import ExprError, evaluate
from schedsim.outdir import MANIFEST, clean_stale_staging, finish_set, safe_dirname
from schedsim.spec.limits import check_expansion, estimate_ops, estimate_streams
from schedsim.spec.loader import load_text

ROOT = Path(__file__).resolve().parents[2]
HEAD = "schema_version: 1\nname: t\nworld_size: 4\n"


def test_estimate_counts_loops_times_ranks_by_hand() -> None:
    ops = [
        {"foreach": {"i": "range(3)", "j": [1, 2]}, "ops": [{"name": "a{i}{j}"}, {"name": "b{i}{j}", "ranks": [0]}]},
        {"name": "c", "ranks": "all"},
        {"foreach": {"i": "range(2, 12, 5)"}, "ops": [{"foreach": {"k": "n"}, "ops": [{"name": "d", "ranks": [0, 1]}]}]},
    ]
    # 3*2*(4 + 1) + 4 + 2*(7*2): range(2, 12, 5) has 2 elements, n = 7 iterations of 2 ranks
    n, chars = estimate_ops(ops, {"n": 7}, 4)
    assert n == 30 + 4 + 28
    assert chars == 6 * (4 * 7 + 1 * 7) + 4 * len("all") + 14 * 2 * 1  # longest string field per op
    # a group of ops under one `when:` counts its ops (the condition is not evaluated: an upper bound)
    assert estimate_ops([{"when": "n > 1", "ops": [{"name": "a"}, {"name": "b", "ranks": [0]}]}], {}, 4) == (5, 5)


def test_refused_before_expanding_with_estimate_and_knob(monkeypatch) -> None:
    text = HEAD + "ops:\n  - foreach: {i: range(100000), j: range(100000)}\n    ops:\n" \
                  "      - {name: 'a{i}_{j}', kind: compute, duration_us: 1}\n"
    t0 = time.perf_counter()
    with pytest.raises(SpecError) as e:
        load_text(text, "big.yaml")
    assert time.perf_counter() - t0 < 10  # hang guard only: expanding 4e10 ops would never finish
    msg = str(e.value)
    assert "40,000,000,000" in msg and "--max-ops" in msg and "big.yaml" in msg
    monkeypatch.setenv("SCHEDSIM_MAX_OPS", "100")
    small = HEAD + "ops:\n  - foreach: {i: range(30)}\n    ops:\n      - {name: 'a{i}', kind: compute, duration_us: 1}\n"
    with pytest.raises(SpecError, match="about 120, past the limit of 100"):
        load_text(small, "s.yaml")
    monkeypatch.setenv("SCHEDSIM_MAX_OPS", "120")
    assert len(load_text(small, "s.yaml").ops) == 30


def test_streams_estimate_by_hand(monkeypatch) -> None:
    ops = [{"name": "a", "stream": "s0"}, {"name": "b", "stream": "s0"}, {"name": "c"},
           {"foreach": {"i": "range(5)", "j": [0, 1]}, "ops": [{"name": "d{i}{j}", "stream": "s{i}_{j}"},
                                                              {"name": "e{i}{j}", "stream": "s1"}]}]
    assert estimate_streams(ops, {}) == len({"s0", "None", "s1"}) + 5 * 2
    monkeypatch.setenv("SCHEDSIM_MAX_STREAMS", "12")
    with pytest.raises(SpecError, match="about 13, past the limit of 12"):
        check_expansion({"ops": ops}, {"world_size": 1}, "f")


def test_pipeline_and_world_size_estimates(monkeypatch) -> None:
    est = check_expansion({}, {"world_size": 2}, "f", {"p": 2, "m": 10, "v": 3, "stage": {"forward": [{}, {}]}})
    assert est["ops"] == 2 * 3 * 10 * 3 * (2 + 2)
    monkeypatch.setenv("SCHEDSIM_MAX_RANKS", "8")
    with pytest.raises(SpecError, match="SCHEDSIM_MAX_RANKS"):
        check_expansion({}, {"world_size": 9}, "f")
    monkeypatch.setenv("SCHEDSIM_MAX_RANKS", "lots")
    with pytest.raises(SpecError, match="not a positive integer"):
        check_expansion({}, {"world_size": 9}, "f")


@pytest.mark.parametrize("expr", ["len([" + ", ".join(["range(9999999)"] * 30) + "])", "len([range(1500000)] + "
                                  "[range(1500000)])", "len('ab' * 400000 + 'cd' * 400000)"])
def test_expression_element_budget(expr: str) -> None:
    with pytest.raises(ExprError, match="list elements"):
        evaluate(expr, {})


def test_expression_within_budget_is_exact() -> None:
    assert evaluate("len(range(1000000)) + len('ab' * 1000)", {}) == 1_002_000


def test_yaml_nesting_depth_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="nest"):
        load_text(HEAD + "ops: " + "[" * 100 + "]" * 100 + "\n", "deep.yaml")
    with pytest.raises(SpecError, match="nest"):
        load_text(HEAD + "ops: " + "[" * 1200, "deeper.yaml")


def test_safe_dirname_distinct_and_safe() -> None:
    names = ["訓練", "推論", ".", "..", "a/b", "a_b", "", "x" * 300]
    dirs = [safe_dirname(n) for n in names]
    assert len(set(dirs)) == len(dirs)
    assert dirs[5] == "a_b"  # already safe: unchanged
    for d in dirs:
        assert d not in (".", "..", "") and "/" not in d and not d.startswith(".") and len(d) <= 100
        assert d.isascii()


def test_output_set_replaces_the_set_whole(tmp_path: Path) -> None:
    import hashlib

    from schedsim.sim.timeline import output_set

    (tmp_path / "notes.txt").write_text("mine")
    with output_set(tmp_path, "t") as st:
        for n in ("a.json", "b.png", "c.png"):
            (st / n).write_text(n)
    with output_set(tmp_path, "t") as st:
        (st / "a.json").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, "a.json", "notes.txt"]
    assert json.loads((tmp_path / MANIFEST).read_text())["sets"] == {
        "t": {"a.json": hashlib.sha256(b"new").hexdigest()}}
    # the manifest records what was written: a later set of other names removes it, never a user's file
    finish_set(tmp_path, "t", {"z.txt": "0" * 64})
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST, "notes.txt"]
    (tmp_path / MANIFEST).write_text(json.dumps(["../outside", "notes.txt/..", "notes.txt"]))
    finish_set(tmp_path, "t", {})
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_stale_staging_cleaned_live_ones_kept(tmp_path: Path) -> None:
    from schedsim.outdir import STAGING_MARKER, host_id

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".schedsim-staging-{dead_pid}-abc"
    live = tmp_path / f".schedsim-staging-{os.getpid()}-def"
    elsewhere = tmp_path / f".schedsim-staging-{dead_pid}-ghi"  # the same dead pid, on another host (NFS)
    unmarked = tmp_path / ".schedsim-staging-xyz"  # not made by schedsim: never removed
    for d, pid, host in ((stale, dead_pid, host_id()), (live, os.getpid(), host_id()),
                         (elsewhere, dead_pid, "node7|boot|pid:[1]"), (unmarked, None, None)):
        d.mkdir()
        (d / "timeline.json").write_text("x" * 1000)
        if pid is not None:
            (d / STAGING_MARKER).write_text(json.dumps({"format": "schedsim.staging", "folder": d.name, "pid": pid,
                                                        "host": host}))
    removed = clean_stale_staging(tmp_path)
    assert removed == [stale] and live.exists() and elsewhere.exists() and unmarked.exists()
    assert clean_stale_staging(tmp_path, now=time.time() + 7200) == []
    assert sorted(clean_stale_staging(tmp_path, now=time.time() + 2 * 86400)) == sorted([live, elsewhere])
    assert unmarked.exists()


def test_closed_stdout_pipe_exits_0_quietly(tmp_path: Path) -> None:
    # predict without charts: the pipe is closed while the summary prints; drawing charts (tested elsewhere)
    # would only add matplotlib's start-up to the fresh interpreter
    for cmd in (["schema"], ["predict", "schedules/tp_allreduce_graph.yaml", "--no-gantt", "-o", str(tmp_path / "o")]):
        p = subprocess.Popen([sys.executable, "-m", "schedsim", *cmd], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert p.stdout is not None
        p.stdout.read(10)
        p.stdout.close()  # the reader leaves, like `| head -c 10`
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        # nothing but the run's own warnings (predict names the estimates its numbers rest on): no traceback
        assert all(line.startswith((b"warning", b"  fix:")) for line in err.splitlines()), err


def test_nccl_rows_with_bad_values_are_refused() -> None:
    from schedsim.network.nccl_tests import parse_nccl_tests

    head = "# nThread 1 nGpus 2\n"
    good = " 1024 256 float sum -1 10.0 0.10 0.10 0 9.0 0.11 0.11 0\n"
    for bad, what in ((" 2048 512 float sum -1 10.0 0.20 -nan 0 9.0 0.2 0.2 0", "out-of-place busbw is nan"),
                      (" 2048 512 float sum -1 10.0 0.20 0.2 0 inf 0.2 0.2 0", "in-place time is inf"),
                      (" 2048 512 float sum -1 10.0 0.20 0.2 0 9.0 0.2 0.2 12", "in-place #wrong is 12")):
        with pytest.raises(SchedsimError, match=what):
            parse_nccl_tests(head + good + bad, collective="all_reduce", source="x.log")
    # old logs' error column holds a max error such as 2e-07: not a count of wrong elements
    log = parse_nccl_tests(head + " 2048 512 float sum 10.0 0.20 0.2 2e-07 9.0 0.2 0.2 0e+00", collective="all_reduce")
    assert log.rows[0].oop_wrong == 2e-07


def test_two_file_from_nccl_tests_reads_both(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from schedsim.cli import app

    log = ROOT / "tests" / "data" / "hostile" / "nccl_nan_busbw.log"
    good = tmp_path / "ok.log"
    good.write_text(log.read_text().replace(" nan ", " 0.20 "))
    res = CliRunner().invoke(app, ["calibrate", "--from-nccl-tests", str(good), str(tmp_path / "missing.log"),
                                   "-o", str(tmp_path / "p.yaml")])
    assert res.exit_code == 2 and "missing.log: no such file" in res.output
    res = CliRunner().invoke(app, ["calibrate", "--from-nccl-tests", str(good), str(log), "-o", str(tmp_path / "p.yaml")])
    assert res.exit_code == 2 and "busbw is nan" in res.output
    assert not (tmp_path / "p.yaml").exists()


def test_names_that_look_like_rich_markup_print_verbatim(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from schedsim.cli import app

    f = tmp_path / "m.yaml"
    f.write_text('schema_version: 1\nname: "[/x] [bold]"\nworld_size: 1\nops:\n'
                 '  - {name: "a[b]", kind: compute, duration_us: 1}\n')
    res = CliRunner().invoke(app, ["predict", str(f), "-o", str(tmp_path / "o"), "--no-gantt"])
    assert res.exit_code == 0, res.output
    assert "[/x] [bold]" in res.output and "a[b]@r0" in res.output


def test_names_that_look_like_emoji_codes_print_verbatim(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from schedsim.cli import app

    f = tmp_path / "e.yaml"
    f.write_text('schema_version: 1\nname: "mm:smile:x"\nworld_size: 1\nops:\n'
                 '  - {name: op, kind: compute, duration_us: 1}\n')  # op names cannot hold ':'; the schedule's can
    res = CliRunner().invoke(app, ["predict", str(f), "-o", str(tmp_path / "o"), "--no-gantt"])
    assert res.exit_code == 0, res.output
    assert "mm:smile:x" in res.output and "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}" not in res.output


def test_the_cli_keeps_freed_memory_mapped_on_glibc() -> None:
    import subprocess
    import sys

    code = "from schedsim.clicore import keep_freed_memory; print(keep_freed_memory())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    libc = __import__("platform").libc_ver()[0]
    assert out == ("True" if sys.platform.startswith("linux") and libc == "glibc" else "False")
