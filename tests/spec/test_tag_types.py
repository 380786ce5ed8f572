"""Tag values keep their JSON type through the lowering, the simulator and timeline.json: ``1``, ``1.0`` and
``true`` (and ``0``, ``0.0``, ``-0.0``, ``false``) are equal in Python, so a table keyed by the tag set merged
them (an op tagged ``x: true`` came out ``x: 1``). Written ops, ``foreach`` blocks (both loader paths), and a
pipeline's ops next to written ones with the same values, checked against the tags as written."""

from __future__ import annotations

import json

import pytest

from schedsim.errors import TraceError
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.sim.timeline import Timeline
from schedsim.spec import foreach as spec_foreach
from schedsim.spec.loader import load_text

VALUES = ["1", "true", "1.0", "0.0", "-0.0", "0", "false", "null", '"1"']
WANT = [1, True, 1.0, 0.0, -0.0, 0, False, None, "1"]


def typed(tags: dict) -> list:  # type: ignore[type-arg]
    """What tells tag values apart in a JSON file: key, type and text (``-0.0`` is not ``0.0``)."""
    return [(k, type(v).__name__, repr(v)) for k, v in sorted(tags.items())]


def written() -> str:
    ops = "\n".join(f"  - {{name: o{i}, kind: compute, duration_us: 1, tags: {{x: {v}}}}}"
                    for i, v in enumerate(VALUES))
    return f"schema_version: 1\nname: t\nworld_size: 1\nops:\n{ops}\n"


def foreach() -> str:  # one entry, its tag from the loop value: a block of rows (names o1, oTrue, o1.0, ...)
    return ("schema_version: 1\nname: t\nworld_size: 1\nops:\n  - foreach: {v: [" + ", ".join(VALUES[:-1]) + "]}\n"
            "    ops: [{name: \"o{v}\", kind: compute, duration_us: 1, tags: {x: \"{v}\"}}]\n")


@pytest.mark.parametrize("blocks", [True, False])
@pytest.mark.parametrize("text", [written, foreach])
def test_equal_tag_values_of_different_types_stay_apart(tmp_path, monkeypatch, text, blocks):
    monkeypatch.setattr(spec_foreach, "TEMPLATES", blocks)
    spec = load_text(text())
    want = [typed({"x": v}) for v in (WANT if text is written else WANT[:-1])]
    assert [typed(o.tags) for o in spec.ops] == want  # what the loader gives, the reference
    prog = lower(spec)
    assert [typed(dict(prog.tagsets[k])) for k in prog.tags_id.tolist()] == want
    tl = simulate(prog, load_profile("h200"), gpu_model="waves")
    assert [typed(s.tags) for s in tl.spans] == want
    tl.write_json(tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["version"] == 3
    assert [typed(s.tags) for s in Timeline.read_json(tmp_path / "t.json").spans] == want
    tl.write_json(tmp_path / "rows.json", layout="rows")
    assert [typed(s.tags) for s in Timeline.read_json(tmp_path / "rows.json").spans] == want


def test_a_written_op_tagged_like_a_pipeline_op_keeps_its_float_microbatch():
    """A written op's tag set equal (by Python's ==) to a pipeline compute phase's: both kept as written."""
    stage = "{kind: compute, duration_us: 1}"
    text = ("schema_version: 1\nname: t\nworld_size: 2\nops:\n"
            "  - {name: w, kind: compute, duration_us: 1, ranks: [0], "
            "tags: {chunk: 0, mb: 0.0, phase: F, pp_op: F, stage: 0}}\n"
            f"pipeline: {{schedule: 1f1b, p: 2, m: 2, stage: {{forward: [{stage}], backward_input: [{stage}], "
            f"backward_weight: [{stage}]}}}}\n")
    prog = lower(load_text(text))
    tags = [dict(prog.tagsets[k]) for k in prog.tags_id.tolist()]
    names = prog.op_names(range(prog.N))
    w = names.index("w")
    assert typed(tags[w]) == typed({"chunk": 0, "mb": 0.0, "phase": "F", "pp_op": "F", "stage": 0})
    f0 = names.index("F0.0.0")
    assert typed(tags[f0]) == typed({"chunk": 0, "mb": 0, "phase": "F", "pp_op": "F", "stage": 0})


BIG = """\
schema_version: 1
name: big
world_size: 1
ops:
  - {name: a, kind: compute, duration_us: 1, tags: {x: 18446744073709551617}}
  - {name: c, kind: compute, duration_us: 1, tags: {x: -9223372036854775809}}
  - {name: b, kind: compute, duration_us: 1, tags: {x: 0.5}}
"""


def test_a_tag_integer_past_64_bits_is_written_exactly(tmp_path):
    """orjson writes integers of at most 64 bits; a larger tag value (legal JSON, legal YAML) is written by the
    standard library instead, every layout and the Perfetto trace, and reads back as the same integer (orjson
    reads such a literal as a float, 2**64 + 1 as 2.0**64)."""
    from typer.testing import CliRunner

    from schedsim import api
    from schedsim.cli import app

    (tmp_path / "big.yaml").write_text(BIG)
    r = CliRunner().invoke(app, ["predict", str(tmp_path / "big.yaml"), "-o", str(tmp_path / "out"), "--no-gantt"])
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "out" / "timeline.json").read_text())
    assert typed({"x": d["columns"]["tags"]["keys"]["x"]["values"]}) == typed({"x": [2**64 + 1, -2**63 - 1, 0.5]})
    trace = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert 2**64 + 1 in [e.get("args", {}).get("x") for e in trace["traceEvents"] if isinstance(e, dict)]
    tl = api.predict(api.load(tmp_path / "big.yaml")).timeline
    for layout in ("columns", "rows"):
        tl.write_json(tmp_path / f"{layout}.json", layout=layout)
        got = [typed(s.tags) for s in Timeline.read_json(tmp_path / f"{layout}.json").spans]
        assert got == [typed({"x": 2**64 + 1}), typed({"x": -2**63 - 1}), typed({"x": 0.5})]  # ints, not floats
    doc = tl.to_dict()  # the document as dicts, parsed from the same bytes
    assert typed({"x": doc["columns"]["tags"]["keys"]["x"]["values"]}) == typed({"x": [2**64 + 1, -2**63 - 1, 0.5]})


@pytest.mark.parametrize("layout", ["v3", "v2", "rows"])
@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_tag_value_in_a_file_is_refused(tmp_path, layout, token):
    """NaN and Infinity are not JSON (Python's reader takes them) and no tag holds one (the schedule language
    refuses them): a file with one was edited, and writing it again would turn the value into null."""
    tl = simulate(lower(load_text(written())), load_profile("h200"), gpu_model="waves")
    if layout == "v3":
        tl.write_json(tmp_path / "t.json")
        d = json.loads((tmp_path / "t.json").read_text())
        d["columns"]["tags"]["keys"]["x"]["values"][2] = 12345.678  # the 1.0 of op o2
        where = "'tags'.keys['x'].values"
    elif layout == "v2":
        Timeline("t", "predict", 1, spans=list(tl.spans)).write_json(tmp_path / "t.json")
        d = json.loads((tmp_path / "t.json").read_text())
        d["columns"]["tags"]["values"][2]["x"] = 12345.678
        where = "tags"
    else:
        tl.write_json(tmp_path / "t.json", layout="rows")
        d = json.loads((tmp_path / "t.json").read_text())
        d["ops"][2]["tags"]["x"] = 12345.678
        where = "ops[2]"
    text = json.dumps(d).replace("12345.678", token)
    assert text.count(token) == 1
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(TraceError, match="bad.json") as e:
        Timeline.read_json(tmp_path / "bad.json")
    assert where in str(e.value) and token.lstrip("-") in str(e.value).replace("inf", "Infinity").replace(
        "nan", "NaN") and "fix:" in str(e.value)
