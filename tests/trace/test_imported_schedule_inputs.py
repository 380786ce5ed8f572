"""Schedules written by ``schedsim import`` and their ``ops_file``: the input checks of every other input
(a FIFO, the size cap, nesting, ``--max-ops``) hold for them, a trace's file name cannot inject keys, and
``replay`` refuses bad recorded times and factors. Commands run in a subprocess with a timeout
(tests/cli_subprocess.py), so a hang fails the test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from replaygen import rank_doc, write

from tests.cli_subprocess import run_cli as _cli


def _imported(tmp_path: Path, trace_name: str = "r0.json") -> Path:
    """``schedsim import kineto`` of the one-rank hand-built trace (replaygen, with a device sync); returns the
    output folder holding schedule.yaml and schedule.ops.json."""
    write(tmp_path / trace_name, rank_doc(0, 1, sync=True))
    r = _cli("import", "kineto", trace_name, "--out", "imp", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path / "imp"


def _with_ops_file(tmp_path: Path, ops_file: str) -> Path:
    """An imported schedule.yaml whose ``ops_file:`` names ``ops_file`` instead."""
    imp = _imported(tmp_path)
    text = (imp / "schedule.yaml").read_text()
    (imp / "schedule.yaml").write_text(text.replace("ops_file: schedule.ops.json", f"ops_file: {ops_file}"))
    return imp / "schedule.yaml"


# ------------------------------------------------------------------ issue 32 discipline on issue 37's new input
def test_ops_file_naming_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    sched = _with_ops_file(tmp_path, "fifo.json")
    os.mkfifo(sched.parent / "fifo.json")
    r = _cli("predict", sched, "--out", tmp_path / "o", "--no-gantt", cwd=tmp_path, timeout=20)
    assert r.returncode == 2 and "FIFO" in r.stderr, (r.returncode, r.stderr[-500:])


def test_ops_file_past_the_input_size_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sched = _with_ops_file(tmp_path, "schedule.ops.json")
    ops = sched.parent / "schedule.ops.json"
    ops.write_text(ops.read_text() + " " * 200_000)  # valid JSON, 200 kB
    assert sched.stat().st_size < 4000
    monkeypatch.setenv("SCHEDSIM_MAX_INPUT_BYTES", "50000")  # above the profile (23 kB) and schedule.yaml
    r = _cli("predict", sched, "--out", tmp_path / "o", "--no-gantt", cwd=tmp_path, timeout=20)
    assert r.returncode == 2 and "error:" in r.stderr, (r.returncode, r.stderr[-500:])


def test_deep_ops_file_is_bad_input_not_an_internal_error(tmp_path: Path) -> None:
    sched = _with_ops_file(tmp_path, "deep.json")
    (sched.parent / "deep.json").write_text("[" * 100_000)
    r = _cli("predict", sched, "--out", tmp_path / "o", "--no-gantt", cwd=tmp_path)
    assert r.returncode == 2 and "internal error" not in r.stderr, r.stderr[-500:]


# ------------------------------------------------------------------ issue 37: import's schedule.yaml
def test_trace_file_name_cannot_inject_keys_into_the_written_schedule(tmp_path: Path) -> None:
    imp = _imported(tmp_path, "t\nlaunch: cuda_graph\n#.json")
    r = _cli("replay", imp / "schedule.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "launch:" not in [line.split(" ")[0] for line in (imp / "schedule.yaml").read_text().splitlines()]
    assert "replay 217.0 µs (-0.00%)" in r.stdout + r.stderr  # the run as recorded (replaygen's sync trace)


def test_replay_of_a_non_numeric_recorded_time_is_bad_input(tmp_path: Path) -> None:
    imp = _imported(tmp_path)
    ops = json.loads((imp / "schedule.ops.json").read_text())
    ops[0]["tags"]["start_us"] = "abc"
    (imp / "schedule.ops.json").write_text(json.dumps(ops))
    r = _cli("replay", imp / "schedule.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "internal error" not in r.stderr and "start_us" in r.stderr, r.stderr[-500:]


def test_replay_refuses_a_host_gap_factor_that_overflows(tmp_path: Path) -> None:
    imp = _imported(tmp_path)
    r = _cli("replay", imp / "schedule.yaml", "--host-gaps", "1e308", cwd=tmp_path)
    assert r.returncode == 2 and "inf" not in r.stdout, r.stdout[-500:]


@pytest.mark.parametrize("args", [("--what-if", "kernel*1e300"), ("--host-gaps", "1e300")])
def test_replay_refuses_a_factor_past_the_op_time_limit(tmp_path: Path, args: tuple[str, str]) -> None:
    """A finite result past an op's 1e12 µs limit (units.MAX_DURATION_US) is refused too: it printed a makespan
    of ~1e294 s."""
    imp = _imported(tmp_path)
    r = _cli("replay", imp / "schedule.yaml", *args, cwd=tmp_path)
    assert r.returncode == 2 and "makespan" not in r.stdout, r.stdout[-500:]
    assert args[0] in r.stderr and "1e+12" in r.stderr and "fix:" in r.stderr, r.stderr[-500:]


@pytest.mark.parametrize("bad", ["-1", "nan", "inf"])
def test_replay_refuses_a_host_gap_factor_below_zero_naming_file_and_option(tmp_path: Path, bad: str) -> None:
    """The error names the schedule and the option (it said ``<schedule>``, the placeholder of a missing file)."""
    imp = _imported(tmp_path)
    r = _cli("replay", imp / "schedule.yaml", "--host-gaps", bad, cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-500:]
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"error: {imp / 'schedule.yaml'}: --host-gaps: ") and "not a factor >= 0" in first, first
    assert "<schedule>" not in r.stderr and "fix:" in r.stderr

MC = """\
schema_version: 1
name: mc
world_size: 1
ops:
  - {name: A, kind: compute, stream: s1, duration_us: 1000}
  - {name: B, kind: compute, stream: s2, duration_us: 10, deps: [A]}
  - {name: C, kind: compute, stream: s3, duration_us: 1000}
"""


def test_replay_what_if_of_one_connection_queues_behind_a_blocked_launch() -> None:
    """With one hardware queue C (launched after B, which waits for A) cannot start before A ends (about 2.01 ms);
    with 8 it runs beside A (1.010 ms)."""
    from schedsim import api
    from schedsim.hardware.profile import load_profile

    spec, prof = api.load_text(MC), load_profile("h200")
    one = api.simulate_spec(spec, prof, gpu_model="replay", max_connections=1).timeline.makespan_s
    eight = api.simulate_spec(spec, prof, gpu_model="replay", max_connections=8).timeline.makespan_s
    assert eight == pytest.approx(1.010e-3, rel=0.02)
    assert one > 1.9e-3


def test_compare_of_the_replay_against_its_import_matches_every_op(tmp_path: Path) -> None:
    """The replay's ops carry their imported span ids (trace_id), so compare matches all 5 (issue 37: compare shows
    where the replay differs, op by op)."""
    imp = _imported(tmp_path)
    r = _cli("predict", imp / "schedule.yaml", "--gpu-model", "replay", "--no-gantt", "--out", "rep", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = _cli("compare", "rep/timeline.json", imp / "timeline.json", "--out", "cmp", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ops matched by id: 5 " in r.stdout, [ln for ln in r.stdout.splitlines() if "matched" in ln]


def test_max_ops_counts_the_ops_file(tmp_path: Path) -> None:
    imp = _imported(tmp_path)
    r = _cli("predict", imp / "schedule.yaml", "--max-ops", "2", "--no-gantt", "--out", "o", cwd=tmp_path)
    assert r.returncode == 2 and "max-ops" in r.stderr, r.stdout[-300:]


def test_ops_file_rows_load_as_the_same_ops_written_inline(tmp_path: Path) -> None:
    """The ops file's rows are validated as parsed, not copied first; the loader's own keys (``__path__``,
    ``__env__``, also spelled with a ``\\u`` escape), which it drops from written ops, are dropped from them too."""
    from schedsim.spec.loader import _strip_doc, load_schedule

    rows = [{"name": "a", "kind": "compute", "duration_us": 2.5, "tags": {"start_us": 0.0}},
            {"name": "b", "kind": "memcpy", "direction": "d2d", "bytes": 256, "duration_us": 1.5, "deps": ["a"],
             "tags": {"x": 1}}]
    head = "schema_version: 1\nname: t\nworld_size: 1\ndurations: recorded\n"
    (tmp_path / "inline.yaml").write_text(head + "ops:\n" + "".join(f"  - {json.dumps(r)}\n" for r in rows))
    want = [o.model_dump() for o in load_schedule(tmp_path / "inline.yaml").ops]
    bent = [dict(rows[0], __path__="x"), dict(rows[1], tags={"x": 1, "__env__": 2})]
    escaped = json.dumps(bent).replace("__path__", "\\u005f_path__")
    for i, text in enumerate([json.dumps(rows), json.dumps(bent), escaped]):
        (tmp_path / f"ops{i}.json").write_text(text)
        (tmp_path / f"s{i}.yaml").write_text(head + f"ops_file: ops{i}.json\n")
        assert [o.model_dump() for o in load_schedule(tmp_path / f"s{i}.yaml").ops] == want, text
    written = {"name": "w", "__path__": "ops[0]"}
    doc = {"name": "t", "__env__": {}, "ops": [written, *rows]}
    out = _strip_doc(doc, len(rows))
    assert out == {"name": "t", "ops": [{"name": "w"}, *rows]} and out["ops"][1] is rows[0]


def test_predict_drops_the_op_models_once_lowered(tmp_path: Path) -> None:
    """``simulate_spec(..., release_ops=True)`` (predict) frees the spec's op models after lowering: the replay
    is the same, and ``spec.ops`` then raises instead of reading as no ops."""
    from schedsim import api
    from schedsim.hardware.profile import load_profile

    sched = _imported(tmp_path) / "schedule.yaml"
    prof = load_profile("h200")
    kept, dropped = api.load(sched), api.load(sched)
    a = api.simulate_spec(kept, prof, file=sched)
    b = api.simulate_spec(dropped, prof, file=sched, release_ops=True)
    assert a.timeline.spans == b.timeline.spans and a.metrics == b.metrics
    assert len(kept.ops) == len(a.timeline.spans) > 0
    with pytest.raises(AttributeError):
        dropped.ops  # noqa: B018


@pytest.mark.parametrize("value", [[1, 2], {"a": 1}])
def test_ops_file_row_with_a_tag_that_is_no_scalar_is_refused(tmp_path: Path, value: object) -> None:
    from schedsim.errors import SpecError
    from schedsim.spec.loader import load_schedule

    row = {"name": "a", "kind": "compute", "duration_us": 2.5, "tags": {"start_us": 0.0, "mb": value, "k": None}}
    (tmp_path / "ops.json").write_text(json.dumps([row]))
    (tmp_path / "s.yaml").write_text("schema_version: 1\nname: t\nworld_size: 1\nops_file: ops.json\n")
    with pytest.raises(SpecError, match=f"tag 'mb' holds a {type(value).__name__}"):
        load_schedule(tmp_path / "s.yaml")
