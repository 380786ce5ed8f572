"""Every documented maximum holds (issue 32, item 8): at the limit the input is taken and simulated without
overflow; just past it, it is refused before any work with exit 2, an ``error:`` naming the field or knob and a
``fix:`` line.

The limits: the field bounds of schedsim/spec/model.py (m, n, k, batch up to 2**40; bytes up to 2**60; flops up
to 1e30; duration_us up to 1e12; repeat up to 10**6), the expansion limits of schedsim/spec/limits.py and
docs/schedule_language.md (ops, ranks, streams, characters; their knobs), the expression budget of
schedsim/expr.py (2,000,000 elements and characters), the YAML and JSON nesting limits, and the input size cap
of schedsim/io.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.expr import MAX_ELEMENTS
from schedsim.io import MAX_JSON_DEPTH
from schedsim.spec.limits import DEFAULTS, MAX_YAML_DEPTH
from schedsim.spec.model import MAX_BYTES, MAX_DIM, MAX_DURATION_US, MAX_FLOPS, MAX_REPEAT

H = "schema_version: 1\nname: lim\n"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in (*DEFAULTS, "SCHEDSIM_MAX_INPUT_BYTES"):
        monkeypatch.delenv(k, raising=False)


def run(args: list[str]):  # type: ignore[no-untyped-def]
    r = CliRunner().invoke(app, args)
    text = r.output + (r.stderr if r.stderr_bytes is not None else "")
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in text
    return r.exit_code, text


def refused(args: list[str], *words: str) -> str:
    code, text = run(args)
    assert code == 2, text
    assert "error: " in text and "fix:" in text, text
    for w in words:
        assert w in text, (w, text)
    return text


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def makespan(tmp_path: Path, text: str, *more: str) -> float:
    f = write(tmp_path, text)
    out = tmp_path / "out"
    code, out_text = run(["predict", f, "-o", str(out), *more])
    assert code == 0, out_text
    doc = json.loads((out / "timeline.json").read_text())
    m = doc["metrics"]["makespan_s"]
    assert math.isfinite(m), m
    return float(m)


def test_the_documented_values() -> None:
    # docs/schedule_language.md "Limits" and the field descriptions state these numbers
    assert DEFAULTS == {"SCHEDSIM_MAX_OPS": 2_000_000, "SCHEDSIM_MAX_RANKS": 100_000,
                        "SCHEDSIM_MAX_CHARS": 200_000_000, "SCHEDSIM_MAX_STREAMS": 100_000,
                        "SCHEDSIM_MAX_TRACE_EVENTS": 10_000_000}
    assert (MAX_DIM, MAX_BYTES, MAX_FLOPS, MAX_DURATION_US, MAX_REPEAT) == (2**40, 2**60, 1e30, 1e12, 10**6)
    assert MAX_YAML_DEPTH == 64 and MAX_ELEMENTS == 2_000_000


@pytest.mark.parametrize("field", ["m", "n", "k", "batch"])
def test_gemm_dimension_at_and_past_2_pow_40(tmp_path: Path, field: str) -> None:
    dims = {"m": 128, "n": 128, "k": 128, "batch": 1}
    op = "  - {{name: mm, kind: matmul, m: {m}, n: {n}, k: {k}, batch: {batch}, dtype: bf16}}\n"
    at = makespan(tmp_path, H + "world_size: 1\nops:\n" + op.format(**{**dims, field: MAX_DIM}), "--no-gantt")
    half = makespan(tmp_path, H + "world_size: 1\nops:\n" + op.format(**{**dims, field: MAX_DIM // 2}), "--no-gantt")
    assert at == pytest.approx(2 * half, rel=0.01)  # this large, the time is linear in the dimension
    f = write(tmp_path, H + "world_size: 1\nops:\n" + op.format(**{**dims, field: MAX_DIM + 1}))
    refused(["check", f], field)


def test_gemm_of_all_three_dimensions_at_2_pow_40_simulates_and_draws(tmp_path: Path) -> None:
    # before: m = n = k = 2**40 overflowed int64 CTA counts in the simulator (2**66 output tiles)
    op = f"  - {{name: mm, kind: matmul, m: {MAX_DIM}, n: {MAX_DIM}, k: {MAX_DIM}, dtype: bf16}}\n"
    t = makespan(tmp_path, H + "world_size: 1\nops:\n" + op, "--trace")  # with the Gantt chart and trace
    from schedsim.hardware.profile import load_profile

    g = load_profile("h200").gpu
    # compute-bound: 2 m n k FLOPs at the bf16 peak times the GEMM efficiency, to within the model's rules
    assert t == pytest.approx(2 * MAX_DIM**3 / (g.peak_tflops["bf16"] * 1e12 * g.gemm_efficiency), rel=0.5)


@pytest.mark.parametrize(("kind", "field", "top", "past"), [
    ("all_reduce", "bytes", MAX_BYTES, MAX_BYTES + 1),
    ("compute_bytes", "bytes", MAX_BYTES, MAX_BYTES * 1.001),  # a float field: 2**60 + 1 is 2**60
    ("compute_flops", "flops", MAX_FLOPS, MAX_FLOPS * 1.001),
    ("compute_duration", "duration_us", MAX_DURATION_US, MAX_DURATION_US * 1.001),
])
def test_sizes_at_and_past_their_maximum(tmp_path: Path, kind: str, field: str, top: float, past: float) -> None:
    def doc(v: float) -> str:
        if kind == "all_reduce":
            return H + f"world_size: 2\nops:\n  - {{name: ar, kind: all_reduce, bytes: {v}}}\n"
        return H + f"world_size: 1\nops:\n  - {{name: c, kind: compute, {field}: {v!r}}}\n"

    assert makespan(tmp_path, doc(top), "--no-gantt") > 0
    refused(["check", write(tmp_path, doc(past))], field)


def test_repeat_at_and_past_its_maximum(tmp_path: Path) -> None:
    op = "  - {{name: mm, kind: matmul, m: 256, n: 256, k: 256, dtype: bf16, repeat: {r}}}\n"
    half = makespan(tmp_path, H + "world_size: 1\nops:\n" + op.format(r=MAX_REPEAT // 2), "--no-gantt")
    top = makespan(tmp_path, H + "world_size: 1\nops:\n" + op.format(r=MAX_REPEAT), "--no-gantt")
    assert top == pytest.approx(2 * half, rel=0.01)  # back-to-back launches of one kernel
    refused(["check", write(tmp_path, H + "world_size: 1\nops:\n" + op.format(r=MAX_REPEAT + 1))], "repeat")


@pytest.mark.parametrize(("knob", "doc_at", "doc_past", "words"), [
    ("SCHEDSIM_MAX_OPS", "world_size: 1\nops:\n  - foreach: {{i: range({n})}}\n    ops:\n"
     "      - {{name: 'o{{i}}', kind: compute, duration_us: 1}}\n", None, ("op instances", "--max-ops")),
    ("SCHEDSIM_MAX_RANKS", "world_size: {n}\nops:\n  - {{name: ar, kind: all_reduce, bytes: 1024}}\n", None,
     ("world_size", "SCHEDSIM_MAX_RANKS")),
    ("SCHEDSIM_MAX_STREAMS", "world_size: 1\nops:\n  - foreach: {{i: range({n})}}\n    ops:\n"
     "      - {{name: 'o{{i}}', kind: compute, duration_us: 1, stream: 's{{i}}'}}\n", None, ("streams",)),
])
def test_expansion_limits_at_and_past_the_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, knob: str,
                                               doc_at: str, doc_past: None, words: tuple[str, ...]) -> None:
    # the same estimate the defaults use, at a small value of the knob (the defaults' work would take minutes)
    monkeypatch.setenv(knob, "50")
    code, text = run(["check", write(tmp_path, H + doc_at.format(n=50))])
    assert code == 0, text
    refused(["check", write(tmp_path, H + doc_at.format(n=51))], "about 51", "past the limit of 50", *words)


def test_character_limit_at_and_past_the_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the expander counts every string of every op: a name of 16 n's and one digit (17) and "compute" (7), 24 per
    # op; 10 ops make 240 (the estimate before expanding, 10 x the longest written string "n...n{i}" = 190,
    # passes too); an 11th op (a name of 18) passes 240
    monkeypatch.setenv("SCHEDSIM_MAX_CHARS", "240")
    text = H + "world_size: 1\nops:\n  - foreach: {i: range(%d)}\n    ops:\n      - {name: '%s{i}', kind: compute, " \
        "duration_us: 1}\n"
    code, out = run(["check", write(tmp_path, text % (10, "n" * 16))])
    assert code == 0, out
    refused(["check", write(tmp_path, text % (11, "n" * 16))], "240 characters", "SCHEDSIM_MAX_CHARS")


@pytest.mark.parametrize(("expr", "ok"), [
    (f"len(range({MAX_ELEMENTS}))", True),
    (f"len(range({MAX_ELEMENTS + 1}))", False),
    (f"len('%{MAX_ELEMENTS - 20}d' % 1)", True),  # the format's own characters count too
    (f"len('%{MAX_ELEMENTS + 1}d' % 1)", False),
    ("len('%2000000000d' % 1)", False),  # before: built a 2 GB string past the budget
    ("len('%.2000000000f' % 1)", False),
    ("len('%*d' % (5, 1))", False),
    ("len('a' * 1000000)", True),
    ("len('a' * 1000001)", False),
])
def test_expression_budget_at_and_past(tmp_path: Path, expr: str, ok: bool) -> None:
    f = write(tmp_path, H + f"world_size: 1\nparams:\n  s: \"{{{expr}}}\"\nops:\n"
              "  - {name: o, kind: compute, duration_us: '{s * 0 + 1}'}\n")
    if ok:
        code, text = run(["check", f])
        assert code == 0, text
    else:
        refused(["check", f])


def _nested_param(depth: int) -> str:
    # the document root (depth 0) -> params (1) -> x (2) -> `depth - 2` more lists, the innermost holding 1
    inner = "[" * (depth - 2) + "1" + "]" * (depth - 2)
    return H + f"world_size: 1\nparams:\n  x: {inner}\nops:\n  - {{name: o, kind: compute, duration_us: 1}}\n"


def test_yaml_nesting_at_and_past_64_levels(tmp_path: Path) -> None:
    code, text = run(["check", write(tmp_path, _nested_param(MAX_YAML_DEPTH))])
    assert code == 0, text
    refused(["check", write(tmp_path, _nested_param(MAX_YAML_DEPTH + 1))], "64 levels")


def test_set_value_nesting_at_and_past_64_levels(tmp_path: Path) -> None:
    f = write(tmp_path, H + "world_size: 1\nparams:\n  x: 1\nops:\n  - {name: o, kind: compute, duration_us: 1}\n")
    code, text = run(["check", f, "--set", "x=" + "[" * MAX_YAML_DEPTH + "1" + "]" * MAX_YAML_DEPTH])
    assert code == 0, text
    d = MAX_YAML_DEPTH + 1
    refused(["check", f, "--set", "x=" + "[" * d + "1" + "]" * d], "--set x", "64 levels")


def _timeline(meta: object) -> str:
    op = {"id": "mm@r0", "name": "mm", "rank": 0, "stream": "s0", "kind": "matmul", "start_s": 0.0, "end_s": 0.001}
    return json.dumps({"format": "schedsim.timeline", "version": 1, "schedule": "t", "source": "predict",
                       "world_size": 1, "meta": meta, "ops": [op]})


def test_json_nesting_at_and_past_the_limit(tmp_path: Path) -> None:
    # the document (1) -> meta (2) -> x (3) -> ... : MAX_JSON_DEPTH levels in all
    def meta(levels: int) -> object:
        v: object = 1
        for _ in range(levels):
            v = [v]
        return {"x": v}

    at, past = tmp_path / "at.json", tmp_path / "past.json"
    at.write_text(_timeline(meta(MAX_JSON_DEPTH - 2)))
    past.write_text(_timeline(meta(MAX_JSON_DEPTH - 1)))
    code, text = run(["analyze", str(at)])
    assert code == 0, text
    refused(["analyze", str(past)], str(past), f"more than {MAX_JSON_DEPTH} levels")


def test_input_size_cap_at_and_past(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = write(tmp_path, H + "world_size: 1\nops:\n  - {name: o, kind: compute, duration_us: 1}\n")
    size = Path(f).stat().st_size
    monkeypatch.setenv("SCHEDSIM_MAX_INPUT_BYTES", str(size))
    code, text = run(["check", f])
    assert code == 0, text
    monkeypatch.setenv("SCHEDSIM_MAX_INPUT_BYTES", str(size - 1))
    refused(["check", f], f"{size:,} bytes, past the {size - 1:,}-byte limit", "SCHEDSIM_MAX_INPUT_BYTES")
