"""The command line end to end (exit codes, files, no traceback, no torch).

``python -m schedsim`` runs in a fresh process where that is the point (the entry point, no torch
imported); the other cases run the same typer app in-process, which is 1 s faster per case.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``schedsim ARGS`` in-process (typer's CliRunner); an uncaught exception's traceback ends stderr."""
    import os
    import traceback

    from typer.testing import CliRunner

    from schedsim.cli import app

    old = Path.cwd()
    os.chdir(cwd)
    try:
        r = CliRunner().invoke(app, list(args))
    finally:
        os.chdir(old)
    err = r.stderr
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        err += "".join(traceback.format_exception(r.exception))
    return subprocess.CompletedProcess(["schedsim", *args], r.exit_code, r.stdout, err)


def test_predict_writes_everything_and_never_imports_torch(tmp_path):
    """``python -m schedsim predict`` (the entry point run as ``-m`` does, by runpy, in a fresh interpreter):
    every output, and neither torch nor the nsys importer's sqlite3 loaded by the end."""
    out = tmp_path / "o"
    code = ("import runpy, sys\nsys.argv = ['schedsim'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('schedsim', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.') or m in ('sqlite3', 'schedsim.trace.nsys')]\n"
            "assert not bad, bad\nprint('no torch')\n")
    p = subprocess.run([sys.executable, "-c", code, "predict", "schedules/allgather_mm8.yaml", "--profile", "pcie2",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "makespan" in p.stdout and "critical path" in p.stdout and "no torch" in p.stdout
    for f in ("timeline.json", "trace.json", "gantt.png", "gantt.svg"):
        assert (out / f).stat().st_size > 0
    tl = json.loads((out / "timeline.json").read_text())
    assert tl["format"] == "schedsim.timeline" and tl["layout"] == "columns"
    assert tl["n_ops"] == 274 and all(len(tl["columns"][c]) == 274 for c in ("id", "name", "rank", "start_s", "end_s"))
    trace = json.loads((out / "trace.json").read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 274 and {e["pid"] for e in xs} == {0, 1}
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temp files


def test_predict_json_and_set(tmp_path):
    p = run("predict", "schedules/allgather_mm.yaml", "--set", "chunks=4", "--format", "json", "--no-gantt",
            "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["metrics"]["ops"] == 2 * (1 + 4 + 2 * 16)


@pytest.mark.parametrize("args,needle", [
    (["predict", "missing.yaml"], "no such file"),
    (["predict", "schedules/allgather_mm8.yaml", "--set", "chunk=4"], "did you mean --set chunks="),
    (["predict", "schedules/allgather_mm8.yaml", "--profile", "h2000"], "unknown profile 'h2000'"),
    (["check", "schedules/allgather_mm8.yaml", "--set", "M=8191"], "divide evenly"),
])
def test_errors_exit_2_without_traceback(args, needle, tmp_path):
    p = run(*args, "--out", str(tmp_path)) if args[0] == "predict" else run(*args)
    assert p.returncode == 2
    assert needle in p.stderr and p.stderr.startswith("error: ")
    assert "Traceback" not in p.stderr + p.stdout


def test_bad_yaml_file_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nname: x\nworld_size: 2\nops:\n  - {name: a, kind: matmal, m: 1, n: 1, k: 1}\n")
    p = run("check", str(bad))
    assert p.returncode == 2 and f"{bad}:5:" in p.stderr and "did you mean 'matmul'" in p.stderr


def test_check_and_schema_and_profiles():
    p = run("check", "schedules/tp_ffn.yaml")
    assert p.returncode == 0 and "12 ops on 4 rank(s), 1 collective(s)" in p.stdout
    s = run("schema")
    schema = json.loads(s.stdout)
    assert "ops" in schema["properties"] and "MatmulOp" in json.dumps(schema)
    pr = run("profiles")
    assert "h200" in pr.stdout and "pcie2" in pr.stdout


def test_sweep_chunks(tmp_path):
    p = run("sweep", "schedules/allgather_mm.yaml", "--set", "chunks=1,2,8", "--profile", "pcie2",
            "--out", str(tmp_path), "--format", "json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [r["setting"]["chunks"] for r in rows] == [1, 2, 8]
    assert rows[0]["makespan_s"] > rows[2]["makespan_s"]  # chunking pays on the PCIe box
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_sweep_table_prints_no_overlap_ratio_without_communication(tmp_path):
    # docs/metrics.md: the overlap ratio is 0 where there is no communication and tables print "–", as predict's
    # summary does; the sweep's table printed 0.000 (nothing hidden) for a schedule of compute only
    sched = tmp_path / "compute_only.yaml"
    sched.write_text("schema_version: 1\nname: compute_only\nworld_size: 1\nparams: {d: 5}\n"
                     "ops:\n  - {name: a, kind: compute, duration_us: d}\n")
    p = run("sweep", str(sched), "--set", "d=5,7", "--profile", "tests/data/unit_profile.yaml",
            "--out", str(tmp_path / "o"))
    assert p.returncode == 0, p.stderr
    rows = [ln for ln in p.stdout.splitlines() if "µs" in ln]
    assert len(rows) == 2 and all("0.000" not in ln and "–" in ln for ln in rows), p.stdout
    assert "–" in run("predict", str(sched), "--profile", "tests/data/unit_profile.yaml",
                      "--out", str(tmp_path / "p")).stdout


def test_compare_refuses_timelines_of_two_different_schedules(tmp_path):
    """It warned and printed error percentages of one schedule against another; now exit 2 naming both and the
    flag, unless --different-schedules says they are meant to differ (then the warning stays)."""
    from schedsim.sim.timeline import Span, Timeline

    for name, sched, src in (("p", "x", "predict"), ("m", "y", "execute")):
        Timeline(sched, src, 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1e-3)]).write_json(
            tmp_path / f"{name}.json")
    c = run("compare", str(tmp_path / "p.json"), str(tmp_path / "m.json"), "--out", str(tmp_path / "c"))
    assert c.returncode == 2 and "Traceback" not in c.stderr, c.stderr
    assert "'x'" in c.stderr and "'y'" in c.stderr and "--different-schedules" in c.stderr, c.stderr
    assert "makespan" not in c.stdout and not (tmp_path / "c").exists()
    c = run("compare", str(tmp_path / "p.json"), str(tmp_path / "m.json"), "--out", str(tmp_path / "c"),
            "--different-schedules")
    assert c.returncode == 0 and "different schedules: 'x' vs 'y'" in c.stderr, c.stderr


def test_analyze_and_compare_print_no_overlap_ratio_without_communication(tmp_path):
    # the same rule in analyze's per-rank lines and its "all" line, and in compare's overlap line: a timeline of
    # compute only has no ratio to give (they printed 0.000); with communication the ratio is printed
    from schedsim.sim.timeline import Span, Timeline

    def tl(source: str, end: float, comm: bool = False) -> Timeline:
        spans = [Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, end)]
        if comm:
            spans.append(Span("b@r0", "b", 0, "c", "all_reduce", "comm", end / 2, 2 * end))
        return Timeline("x", source, 1, spans=spans)

    for name, t in (("p", tl("predict", 1e-3)), ("m", tl("execute", 2e-3)), ("pc", tl("predict", 1e-3, True))):
        t.write_json(tmp_path / f"{name}.json")
    a = run("analyze", str(tmp_path / "p.json"))
    assert a.returncode == 0, a.stderr
    lines = [ln for ln in a.stdout.splitlines() if ln.startswith(("   0 ", "all  overlap"))]
    assert len(lines) == 2 and all("0.000" not in ln and "–" in ln for ln in lines), a.stdout
    c = run("compare", str(tmp_path / "p.json"), str(tmp_path / "m.json"), "--out", str(tmp_path / "c"))
    assert c.returncode == 0, c.stderr
    assert "overlap ratio: predicted –, measured –;" in c.stdout, c.stdout
    c = run("compare", str(tmp_path / "pc.json"), str(tmp_path / "m.json"), "--out", str(tmp_path / "c2"))
    assert "overlap ratio: predicted 0.333, measured –;" in c.stdout, c.stdout


@pytest.mark.parametrize("schedule", sorted(p.name for p in (ROOT / "schedules").glob("*.yaml")))
def test_every_shipped_schedule_checks_and_opens_with_a_comment(schedule):
    text = (ROOT / "schedules" / schedule).read_text()
    assert text.startswith("#"), "each shipped schedule opens with a comment saying what it models"
    p = run("check", f"schedules/{schedule}")
    assert p.returncode == 0 and p.stdout.startswith("ok:"), p.stderr


def test_predict_twice_writes_identical_files(tmp_path):
    # the same input must give byte-identical outputs (diffable, cacheable); the SVG chart carried its save time
    # (dc:date) and random clip-path/marker ids
    from schedsim.report.chart_base import write_figure

    for d in ("a", "b"):
        r = run("predict", "tests/data/pp_unit.yaml", "--gpu-model", "waves", "--no-gantt", "--out", str(tmp_path / d))
        assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert "timeline.json" in names and names == sorted(p.name for p in (tmp_path / "b").iterdir())
    from schedsim.outdir import MANIFEST

    for n in names:
        a, b = (tmp_path / "a" / n).read_bytes(), (tmp_path / "b" / n).read_bytes()
        if n == MANIFEST:  # the same hashes; the files' identities (inode, times) are each folder's own
            ma, mb = json.loads(a), json.loads(b)
            assert ma["sets"] == mb["sets"] and ma["identities"].keys() == mb["identities"].keys()
            continue
        assert a == b, n
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.barh([0, 1], [1.0, 2.0], clip_on=True)
    svg = [write_figure(fig, tmp_path / f"{d}.svg", "svg").read_bytes() for d in ("a", "b")]
    plt.close(fig)
    assert b"<svg" in svg[0] and b"clip-path" in svg[0] and svg[0] == svg[1]


def test_help_lists_every_command_and_a_typo_gets_a_suggestion():
    """Commands are built only when invoked, yet ``--help`` lists them all in their order, and a mistyped
    command is answered with the close names."""
    r = run("--help")
    assert r.returncode == 0
    names = ["predict", "check", "schema", "profiles", "sweep", "execute", "calibrate", "compare", "import",
             "analyze"]
    at = [r.stdout.find(f"\n  {n} ") for n in names]
    assert -1 not in at and at == sorted(at), at
    r = run("chek", "x.yaml")
    assert r.returncode == 2
    assert "No such command 'chek'. Did you mean 'check', 'schema'?" in r.stderr


def test_python_m_schedsim_cli_runs_the_command_line() -> None:
    # it imported the module and exited 0 without a word (no __main__ guard)
    out = subprocess.run([sys.executable, "-m", "schedsim.cli", "--version"], capture_output=True, text=True,
                         timeout=120)
    ref = subprocess.run([sys.executable, "-m", "schedsim", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == ref.returncode == 0 and out.stdout == ref.stdout and "schedsim" in out.stdout
