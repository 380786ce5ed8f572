"""Bad or odd inputs (each was a real bug, now fixed): every bad input exits 2 with ``error: ...``
naming the file and no traceback; every valid input does not crash; outputs are written all or nothing
with the umask's permissions.

The command line runs in-process (typer's ``CliRunner``), from the repository root as its working
directory; only the two hang guards use a child process, so that a regression fails instead of hanging.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from test_hostile import hang_guard
from typer.testing import CliRunner, Result

from schedsim.cli import app

ROOT = Path(__file__).resolve().parents[2]
PCIE = ROOT / "schedsim" / "hardware" / "profiles" / "pcie2.yaml"

HEAD = "schema_version: 1\nname: t\nworld_size: 2\n"


@pytest.fixture(autouse=True)
def _in_repo_root(monkeypatch):
    """The cases name shipped schedules by their repository-relative path, as a user in a checkout would."""
    monkeypatch.chdir(ROOT)


def run(*args: str, timeout: int | None = None) -> Result:
    """``schedsim ARGS`` in-process, failing after ``timeout`` seconds when given."""
    with hang_guard(timeout) if timeout else contextlib.nullcontext():
        return CliRunner().invoke(app, list(args))


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def assert_clean_exit_2(r: Result, needle: str | None = None) -> None:
    """Exit code 2, ``error: ...`` on stderr (containing ``needle``), and no uncaught exception."""
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, (r.exit_code, r.stderr[-800:])
    assert r.stderr.startswith("error: ")
    if needle is not None:
        assert needle in r.stderr, r.stderr


# 1. The expression walker lets Python exceptions other than ZeroDivision/TypeError-in-BinOp escape.
# regression (was xfail; fixed mid-session): expr: math/int/min/len/index/compare errors escape as tracebacks (rc 1)
@pytest.mark.parametrize("expr", ["log2(0)", "sqrt(-1)", "int('abc')", "int(1e400)", "min()", "len(5)",
                                  "'[1, 2][5]'", "-'x'"])
def test_expression_runtime_errors_exit_2(tmp_path, expr):
    f = write(tmp_path, HEAD + f"ops:\n  - {{name: a, kind: matmul, m: {expr}, n: 1, k: 1}}\n")
    assert_clean_exit_2(run("check", str(f)), str(f))


# 2. --set with a value of the wrong type crashes in `when: chunks > 1` of the shipped schedule.
# regression (was xfail; fixed mid-session): --set chunks=abc / empty / 1e3 / null gives a TypeError traceback
@pytest.mark.parametrize("value", ["chunks=abc", "chunks=", "chunks=1e3", "chunks=null"])
def test_set_wrong_type_exit_2(value):
    assert_clean_exit_2(run("check", "schedules/allgather_mm.yaml", "--set", value), "chunks")


# 3. A pipeline op name that collides with a hand-written op (or a repeated stage op name) passes
#    `check`, then `predict` reports a bogus deadlock.
PP = """\
    schema_version: 1
    name: pp
    world_size: 4
    pipeline:
      schedule: 1f1b
      p: 4
      m: 8
      stage: {forward: [{name: f, kind: compute, duration_us: 10}, {name: FORWARD2, kind: compute, duration_us: 1}]}
    """


@pytest.mark.parametrize("extra", [
    "ops:\n  - {name: F0.0.f, kind: compute, duration_us: 1, ranks: [0]}\n",
    "",
])
def test_pipeline_duplicate_names_rejected_by_check(tmp_path, extra):
    text = textwrap.dedent(PP) + extra
    if not extra:
        text = text.replace("name: FORWARD2", "name: f")
    f = write(tmp_path, text)
    assert_clean_exit_2(run("check", str(f)), "F0.0.f")


# 4. A custom pipeline with empty action lists has every microbatch missing: check says ok, predict crashes.
CUSTOM_EMPTY = """\
    schema_version: 1
    name: cu
    world_size: 2
    pipeline:
      schedule: custom
      p: 2
      m: 2
      stage: {forward: [{name: f, kind: compute, duration_us: 10}]}
      actions: {0: "", 1: ""}
    """


# regression (was xfail; fixed mid-session): custom pipeline with no actions passes check; predict crashes
def test_custom_pipeline_empty_actions(tmp_path):
    f = write(tmp_path, CUSTOM_EMPTY)
    assert_clean_exit_2(run("check", str(f)))
    assert_clean_exit_2(run("predict", str(f), "--out", str(tmp_path / "o")))


# regression (was xfail; fixed mid-session): pipeline csv: missing file or directory gives a traceback
@pytest.mark.parametrize("csv", ["nope.csv", "."])
def test_pipeline_csv_unreadable_exit_2(tmp_path, csv):
    f = write(tmp_path, CUSTOM_EMPTY.replace('actions: {0: "", 1: ""}', f"csv: {csv}"))
    assert_clean_exit_2(run("check", str(f)), str(f))


# 5. Non-finite durations are accepted; predict then writes timeline.json with `Infinity` and crashes in matplotlib.
# regression (was xfail; fixed mid-session): duration_us: .inf accepted; predict writes Infinity JSON, then crashes
def test_infinite_duration(tmp_path):
    f = write(tmp_path, HEAD + "ops:\n  - {name: a, kind: compute, duration_us: .inf}\n")
    assert_clean_exit_2(run("predict", str(f), "--out", str(tmp_path / "o")))


# 6. Output folder problems.
@pytest.mark.parametrize("cmd", ["predict", "sweep", "schema"])
def test_out_is_a_file_or_dir_exit_2(tmp_path, cmd):
    target = tmp_path / "afile"
    target.write_text("x")
    if cmd == "predict":
        p = run("predict", "schedules/allgather_mm.yaml", "--no-gantt", "--out", str(target))
    elif cmd == "sweep":
        p = run("sweep", "schedules/allgather_mm.yaml", "--set", "chunks=1", "--out", str(target))
    else:
        p = run("schema", "--out", str(tmp_path))  # a directory
    assert_clean_exit_2(p)


def test_schedule_name_cannot_escape_output_folder(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    f = write(tmp_path, HEAD.replace("name: t", 'name: "../escaped"')
              + "ops:\n  - {name: a, kind: matmul, m: 1, n: 1, k: 1}\n")
    monkeypatch.chdir(work)
    assert run("predict", str(f), "--no-gantt").exit_code == 0
    assert not (work / "escaped").exists()  # written to schedsim_out/../escaped


def test_interrupt_leaves_no_partial_output_set(tmp_path, monkeypatch):
    from schedsim.report import gantt

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(gantt, "write_gantt", boom)
    out = tmp_path / "o"
    r = CliRunner().invoke(app, ["predict", str(ROOT / "schedules/allgather_mm.yaml"), "--out", str(out)])
    assert r.exit_code == 130
    assert not (out / "timeline.json").exists() and not (out / "trace.json").exists()


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600)])
def test_output_files_follow_umask(tmp_path, umask, mode):
    out = tmp_path / "o"
    old = os.umask(umask)
    try:
        r = run("predict", "schedules/allgather_mm.yaml", "--no-gantt", "--out", str(out))
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.stderr
    assert stat.S_IMODE((out / "timeline.json").stat().st_mode) == mode


# 7. Bad hardware profiles.
def _profile(tmp_path: Path, name: str, mutate) -> Path:
    d = yaml.safe_load(PCIE.read_text())
    mutate(d)
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


PROFILE_CASES = {
    "gemm_ms_zero": lambda d: d["gemm"].update(entries=[["fp32", 16384, 8192, 8192, 0.0]]),
    "gemm_m_zero": lambda d: d["gemm"].update(entries=[["fp32", 0, 8192, 8192, 1.0]]),
    "table_empty": lambda d: d["collectives"]["tables"]["all_gather"].update({2: []}),
    "busbw_zero": lambda d: d["collectives"]["tables"]["all_gather"].update({2: [[536870912, 0.0]]}),
    "busbw_negative": lambda d: d["collectives"]["tables"]["all_gather"].update({2: [[536870912, -5.0]]}),
    "table_kind_typo": lambda d: d["collectives"]["tables"].update({"allgather": {2: [[1, 1.0]]}}),
}


@pytest.mark.parametrize("case", sorted(PROFILE_CASES))
def test_bad_profile_values_exit_2(tmp_path, case):
    prof = _profile(tmp_path, case, PROFILE_CASES[case])
    p = run("predict", "schedules/allgather_mm.yaml", "--set", "chunks=2", "--no-gantt", "--profile", str(prof),
            "--out", str(tmp_path / "o"))
    assert_clean_exit_2(p, str(prof))


@pytest.mark.parametrize("kind", ["binary", "latin1", "dir"])
def test_unreadable_profile_exit_2(tmp_path, kind):
    prof = tmp_path / "prof.yaml"
    if kind == "binary":
        prof.write_bytes(bytes(range(256)))
    elif kind == "latin1":
        prof.write_bytes(b"name: caf\xe9\n")
    else:
        prof.mkdir()
    p = run("predict", "schedules/allgather_mm.yaml", "--no-gantt", "--profile", str(prof),
            "--out", str(tmp_path / "o"))
    assert_clean_exit_2(p, str(prof))


# 8. Static checks miss collectives whose entries disagree across ranks (NCCL would hang or corrupt).
# regression (was xfail; fixed mid-session): check accepts one collective with different kinds/sizes on different ranks
@pytest.mark.parametrize("second", ["{name: x, kind: all_gather, bytes: 10, ranks: [1], group: [0, 1]}",
                                    "{name: x, kind: all_reduce, bytes: 99999999, ranks: [1], group: [0, 1]}"])
def test_collective_mismatch_rejected(tmp_path, second):
    f = write(tmp_path, HEAD + "ops:\n  - {name: x, kind: all_reduce, bytes: 10, ranks: [0], group: [0, 1]}\n"
              f"  - {second}\n")
    assert_clean_exit_2(run("check", str(f)), "x")


# 9. sweep.
def test_sweep_names_failing_setting(tmp_path):
    assert_clean_exit_2(run("sweep", "schedules/allgather_mm.yaml", "--set", "chunks=1,3,7", "--out", str(tmp_path)),
                        "chunks=3")


@pytest.mark.parametrize("sets", [["chunks="], ["chunks=1,2", "chunks=4"]])
def test_sweep_degenerate_grid_exit_2(tmp_path, sets):
    args = [a for s in sets for a in ("--set", s)]
    assert_clean_exit_2(run("sweep", "schedules/allgather_mm.yaml", *args, "--out", str(tmp_path)))


def test_sweep_value_listed_twice_exit_2(tmp_path):
    """``--set chunks=2,2`` simulated the point twice, wrote one timeline_*.json for both and said "wrote ... and 2
    timeline_*.json"; it is refused like a key given twice."""
    r = run("sweep", "schedules/allgather_mm.yaml", "--set", "chunks=2, 4,2", "--keep-timelines", "--out",
            str(tmp_path / "sw"))
    assert_clean_exit_2(r, "--set chunks=... lists '2' twice")
    assert "fix: list each value of chunks once" in r.stderr and not (tmp_path / "sw").exists()


# 10. Errors that do not name the file.
@pytest.mark.parametrize("body", [
    "pipeline:\n  {schedule: 1f1b, p: 2, m: 1, stage: {forward: [{name: f, kind: compute, duration_us: 1}]}}\n",
    ("ops:\n  - {name: a, kind: compute, duration_us: 1, deps: [b], stream: x}\n"
     "  - {name: b, kind: compute, duration_us: 1, deps: [a], stream: y}\n"),
])
def test_errors_name_the_file(tmp_path, body):
    f = write(tmp_path, HEAD + body)
    assert_clean_exit_2(run("check", str(f)), str(f))


# 11. Resource guards of the expression language are bypassed.
# regression (was xfail; fixed mid-session): nested ** bypasses the 'exponent larger than 64' guard (hangs;
# a child process, since a big-integer power does not return to Python to see an alarm)
def test_nested_power_is_bounded():
    code = ("from schedsim.expr import evaluate, ExprError\n"
            "try:\n    evaluate('((((((2**64)**64)**64)**64)**64)**64)', {})\nexcept ExprError:\n    pass\n")
    p = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=10)
    assert p.returncode == 0


def test_well_formed_schedule_still_predicts(tmp_path):
    """Control: a well-formed tiny schedule still works."""
    f = write(tmp_path, HEAD + "ops:\n  - {name: a, kind: matmul, m: 1, n: 1, k: 1}\n")
    r = run("predict", str(f), "--no-gantt", "--format", "json", "--out", str(tmp_path / "o"))
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["metrics"]["ops"] == 2


# Resource bombs, profile values, pipeline-block misuse, declared streams.
@pytest.mark.parametrize("body", [
    "ops:\n  - foreach: {i: '[0]*100000000'}\n    ops: [{name: 'a{i}', kind: compute, duration_us: 1}]\n",
    "ops:\n  - {name: '{\"a\"*1000000000}', kind: compute, duration_us: 1}\n",
])
def test_expression_bombs_exit_2_quickly(tmp_path, body):
    f = write(tmp_path, HEAD + body)
    assert_clean_exit_2(run("check", str(f), timeout=60), "1,000,000")


def test_recursive_yaml_alias_exit_2(tmp_path):
    # `&a [1, *a]` is a list that holds itself: the expansion check leaves it to the depth limit (an endless walk
    # otherwise), with or without libyaml
    f = write(tmp_path, HEAD + "x: &a [1, *a]\nops: []\n")
    assert_clean_exit_2(run("check", str(f), timeout=60), "nests lists/mappings more than 64 levels deep")


def test_yaml_alias_bomb_exit_2_quickly(tmp_path):
    # 9**9 leaves through 8 levels of aliases, refused from the composed node graph before any expansion (the
    # shipped 2,000,000-node limit; constructing up to it took 3-9 s). Node counts by hand: a0 is its sequence
    # and 9 scalars (10), a_i = 1 + 9 a_(i-1). The root's running total (itself, then each key and value)
    # passes 2,000,000 at a6's value (1 + 6 keys + 10 + 91 + ... + 597,871 + 1 key + 5,380,840), line 7.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    f = write(tmp_path, "\n".join(lines) + "\n")
    r = run("check", str(f), timeout=60)
    assert_clean_exit_2(r, "aliases")
    assert r.stderr.startswith(f"error: {f}:7:5: the YAML expands to more than 2,000,000 nodes"), r.stderr
    # the same bomb with a recursive alias after it: the cycle counts 0, the bomb is still refused at a6
    f.write_text("\n".join(lines) + "\nz: &c [1, *c]\n")
    r = run("check", str(f), timeout=60)
    assert r.stderr.startswith(f"error: {f}:7:5: the YAML expands to more than 2,000,000 nodes"), r.stderr


def test_yaml_alias_chains_and_keys_exit_2_cleanly(tmp_path):
    # a chain of 4,400 aliases, each doubling: the count saturates instead of growing 4,400-bit integers (whose
    # formatting raised ValueError). By hand: a_i expands to 2**(i+1) - 1 nodes, so the root's running total
    # after a_i's value is 1 + 4 (two header entries) + sum of (1 + a_k) = 2**(i+2) + 3; the limit is 2,000,000
    # plus 16 per alias written (8,798 aliases: 2,140,768) beyond the 8,805 nodes written, passed first at
    # i = 20 (4,194,307; at i = 19, 2,097,155 - 8,805 = 2,088,350): a20's value, line 23, column 6
    lines = ["schema_version: 1", "name: t", "a0: &a0 x"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 4400)]
    f = write(tmp_path, "\n".join(lines) + "\n")
    r = run("check", str(f), timeout=60)
    assert_clean_exit_2(r, "expands to more than 2,000,000 nodes")
    assert r.stderr.startswith(f"error: {f}:23:6:"), r.stderr
    # a list as a mapping key (its string copy of aliased text could take gigabytes): refused where it stands
    f = write(tmp_path, "schema_version: 1\nname: t\ns: &s xxxx\n? [*s, *s]\n: 1\n")
    r = run("check", str(f), timeout=60)
    assert_clean_exit_2(r, "a mapping key is a list or a mapping")
    assert r.stderr.startswith(f"error: {f}:4:3:"), r.stderr


@pytest.mark.parametrize("case", ["peak_zero", "gemm_bad_dtype"])
def test_more_bad_profile_values_exit_2(tmp_path, case):
    def mutate(d):
        if case == "peak_zero":
            d["gpu"]["peak_tflops"]["fp32"] = 0
        else:
            d["gemm"]["entries"] = [["fp33", 16384, 8192, 8192, 56.89]]
    prof = _profile(tmp_path, case, mutate)
    p = run("predict", "schedules/allgather_mm.yaml", "--no-gantt", "--profile", str(prof),
            "--out", str(tmp_path / "o"))
    assert_clean_exit_2(p, str(prof))


PP_BASE = """\
    schema_version: 1
    name: pp
    world_size: 2
    pipeline:
      schedule: 1f1b
      p: 2
      m: 2
    """


@pytest.mark.parametrize("extra,needle", [
    ("  stage: {forward: [{kind: send, peer: 1, bytes: 8}]}\n", "stage ops must be compute work"),
    ("  stage: {forward: [{kind: all_reduce, bytes: 8}]}\n", "has no `group`"),
    ("  stage: {forward: [{kind: all_reduce, bytes: 8, group: tp}]}\n", "group 'tp' is not a group of the pipeline"),
    ("  stage: {forward: [{kind: all_reduce, bytes: 8, group: [0, 1]}]}\n", "not a group of the pipeline block"),
    ("  stage: {forward: [{kind: compute, duration_us: 1, group: dp}]}\n", "`group` is for collectives"),
    ("  stage: {forward: [{name: a, kind: compute, duration_us: 1, deps: [b]}, {name: b, kind: compute, "
     "duration_us: 1}]}\n", "which is written after it"),
    ("  stage: {forward: [{name: a, kind: compute, duration_us: 1, deps: [zz]}]}\n", "not an op of this list"),
    ("  stage: {forward: [{kind: broadcast, bytes: 8, group: dp, root: 1}]}\n", "is not a replica of its group"),
    ("  stage: {forward: [{kind: compute, duration_us: 1, ranks: [0]}]}\n", "cannot set 'ranks'"),
    ("  stage: {forward: [{kind: compute, duration_us: 1}]}\n  actions: {0: '0F0'}\n", "schedule: custom"),
    ("  transformer: {layers: 2, hidden: 10, ffn: 4, heads: 3, seq: 4}\n", "multiple of heads"),
])
def test_pipeline_block_misuse_exit_2(tmp_path, extra, needle):
    f = write(tmp_path, textwrap.dedent(PP_BASE) + extra)
    assert_clean_exit_2(run("check", str(f)), needle)


def test_declared_streams_cover_default_streams(tmp_path):
    f = write(tmp_path, HEAD + "streams: [a]\nops:\n  - {name: x, kind: compute, duration_us: 1}\n")
    assert_clean_exit_2(run("check", str(f)), "'compute' (the default for compute)")
