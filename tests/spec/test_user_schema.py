"""`schedsim schema` describes schedule files as written; every shipped schedule validates."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema")

from schedsim.spec.loader import load_text  # noqa: E402
from schedsim.spec.user_schema import user_schema  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCHEDULES = sorted((ROOT / "schedules").glob("*.yaml")) + sorted((ROOT / "tests" / "executor" / "data").glob("*.yaml")) \
    + [ROOT / "tests" / "data" / "pp_unit.yaml"]


@pytest.fixture(scope="module")
def validator():
    s = user_schema()
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


@pytest.mark.parametrize("path", SCHEDULES, ids=lambda p: p.name)
def test_every_shipped_schedule_validates(validator, path):
    errors = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


def doc_schedules():
    """Complete schedules in fenced YAML blocks of the docs and README."""
    out = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", md.read_text(), re.S)):
            if "schema_version" in block:
                out.append(pytest.param(block, id=f"{md.name}#{i}"))
    return out


@pytest.mark.parametrize("text", doc_schedules())
def test_documented_examples_validate(validator, text):
    assert [e.message for e in validator.iter_errors(yaml.safe_load(text))] == []


GOOD = """$schema: ./schedule.schema.json
schema_version: 1
name: g
world_size: "{tp}"
params: {tp: 2, chunks: 2}
ops:
  - when: tp > 1
    ops: [{name: ar, kind: all_reduce, bytes: "{1024 * tp}", dtype: "{'bf16'}"}]
  - foreach: {i: range(chunks)}
    ops: [{name: "mm{i}", kind: matmul, m: 64, n: 64, k: "64 * tp", when: "i >= 0"}]
  - {name: s, kind: send, peer: "{rank + 1}", bytes: 64, ranks: [0], p2p_batch: b}
  - {name: r, kind: recv, peer: "{rank - 1}", bytes: 64, ranks: [1], p2p_batch: b}
"""


def test_a_file_using_every_construct_validates_and_loads(validator):
    assert list(validator.iter_errors(yaml.safe_load(GOOD))) == []
    assert load_text(GOOD).world_size == 2  # `$schema` is ignored by the loader


@pytest.mark.parametrize("bad,where", [
    ("name: g\n", "schema_version"),                                            # missing key
    ("schema_version: 1\nname: g\nworld_size: 1\nopz: []\n", "opz"),          # unknown top-level key
    ("schema_version: 1\nname: g\nworld_size: 1\nops: [{name: a, kind: matmull, m: 1, n: 1, k: 1}]\n", "ops"),
    ("schema_version: 1\nname: g\nworld_size: 1\nops: [{name: a, kind: matmul, m: 1, n: 1, kk: 1}]\n", "ops"),
    ("schema_version: 1\nname: g\nworld_size: 1\nops: [{when: 1, ops: [], kind: matmul}]\n", "ops"),
    ("schema_version: 1\nname: g\nworld_size: 2\npipeline: {schedule: 1f1b, p: 2, m: 2, pp: 1}\n", "pipeline"),
])
def test_mistakes_are_rejected(validator, bad, where):
    errors = list(validator.iter_errors(yaml.safe_load(bad)))
    assert errors and any(where in (list(e.absolute_path) + [e.message])[0] or where in e.message for e in errors)


def test_cli_prints_the_user_schema():
    out = subprocess.run([sys.executable, "-m", "schedsim", "schema"], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert out.returncode == 0
    s = json.loads(out.stdout)
    assert {"Foreach", "Group", "OpList"} <= set(s["$defs"]) and "$schema" in s["properties"]


def test_expanded_schema_holds_the_pipeline_block_model():
    """``ScheduleSpec.pipeline`` is typed lazily (its module loads only for a ``pipeline:`` block); its JSON
    Schema is still the block model's own, one ``$defs`` entry referred to as when the field named the model."""
    from schedsim.spec.model import ScheduleSpec
    from schedsim.spec.pipeline_block import PipelineSpec

    full = ScheduleSpec.model_json_schema()
    own = PipelineSpec.model_json_schema()
    own_defs = own.pop("$defs")
    described = ScheduleSpec.model_fields["pipeline"].description
    assert full["properties"]["pipeline"] == {"anyOf": [{"$ref": "#/$defs/PipelineSpec"}, {"type": "null"}],
                                              "default": None, "description": described}
    assert full["$defs"]["PipelineSpec"] == own
    assert sorted(own_defs) == ["StageOps", "TransformerSpec"]
    assert {k: full["$defs"][k] for k in own_defs} == own_defs
