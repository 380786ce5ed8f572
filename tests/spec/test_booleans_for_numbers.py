"""A YAML ``true`` / ``false`` where a schedule wants a number is refused (exit 2, the field named), not read as
1 / 0 by pydantic's lax mode: op sizes and dimensions, per-peer all_to_all sizes, pipeline block numbers, and the
same through ``foreach`` and parameters. Fields that take a boolean keep it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.errors import SchedsimError
from schedsim.spec.loader import load_text

HEAD = "schema_version: 1\nname: b\nworld_size: 2\n"


@pytest.mark.parametrize(("body", "field"), [
    ("ops:\n  - {name: ar, kind: all_reduce, bytes: true}\n", "bytes"),
    ("ops:\n  - {name: mm, kind: matmul, m: false, n: 64, k: 64, dtype: bf16}\n", "m"),
    ("ops:\n  - {name: c, kind: compute, duration_us: true}\n", "duration_us"),
    ("ops:\n  - {name: a, kind: all_to_all, send_bytes: [[0, true], [5, 0]]}\n", "send_bytes"),
    ("params: {flag: true}\nops:\n  - foreach: {i: range(3)}\n    ops:\n"
     "      - {name: \"ar{i}\", kind: all_reduce, bytes: \"flag\"}\n", "bytes"),
    ("pipeline: {schedule: 1f1b, p: 2, m: true, stage: {forward: [{name: f, kind: compute, duration_us: 5}]}}\n",
     "m"),
])
def test_a_boolean_for_a_number_is_refused_naming_the_field(body: str, field: str) -> None:
    with pytest.raises(SchedsimError) as e:
        load_text(HEAD + body, "b.yaml")
    assert f"{field}: a number, not a boolean (YAML true/false)" in e.value.message


@pytest.mark.parametrize("value", ["true", "false", '"{2 > 1}"'])
def test_a_boolean_world_size_is_refused(tmp_path: Path, value: str) -> None:
    """``world_size: true`` (or an expression giving True) loaded as a world of 1 rank, ``false`` as 0 (then
    refused only as "greater than 0"): the top level's number had no boolean check."""
    text = HEAD.replace("world_size: 2", f"world_size: {value}") + "ops:\n  - {name: ar, kind: all_reduce, bytes: 8}\n"
    with pytest.raises(SchedsimError) as e:
        load_text(text, "b.yaml")
    assert e.value.path == "world_size" and e.value.message.startswith("a number of ranks, not a boolean (YAML")
    (f := tmp_path / "b.yaml").write_text(text)
    r = CliRunner().invoke(app, ["check", str(f)])
    assert r.exit_code == 2 and "world_size: a number of ranks, not a boolean" in r.stderr
    assert "Traceback" not in r.stderr
    assert load_text(HEAD + "ops:\n  - {name: ar, kind: all_reduce, bytes: 8}\n").world_size == 2


def test_the_number_itself_still_loads_and_a_boolean_field_keeps_its_boolean() -> None:
    spec = load_text(HEAD + "ops:\n  - {name: ar, kind: all_reduce, bytes: 1}\n", "b.yaml")
    assert spec.ops[0].bytes == 1
    spec = load_text(HEAD.replace("world_size: 2", "world_size: 4") + "pipeline: {schedule: 1f1b, p: 2, m: 4, "
                     "data_parallel: 2, optimizer: true, stage: {forward: [{name: f, kind: compute, "
                     "duration_us: 5}]}}\n", "b.yaml")
    assert spec.pipeline is not None and spec.pipeline.optimizer is True


def test_check_exits_2_without_a_traceback(tmp_path: Path) -> None:
    f = tmp_path / "b.yaml"
    f.write_text(HEAD + "ops:\n  - {name: ar, kind: all_reduce, bytes: true}\n")
    r = CliRunner().invoke(app, ["check", str(f)])
    assert r.exit_code == 2 and "bytes: a number, not a boolean" in r.stderr and "Traceback" not in r.stderr


def test_only_booleans_and_containers_are_asked_for_a_boolean_number() -> None:
    """``no_bool_numbers`` asks ``bool_for_number`` only of values that are booleans, dicts, lists or tuples: for
    any other value it is false on every field of every op model and the pipeline block's models, so skipping
    them refuses exactly what asking every field refuses."""
    from schedsim._pydantic import bool_for_number, no_bool_numbers
    from schedsim.spec.model import OP_MODELS
    from schedsim.spec.pipeline_block import PipelineSpec, TransformerSpec

    models = [*OP_MODELS.values(), PipelineSpec, TransformerSpec]
    others = [0, 1, 2.5, "x", None, b"y", frozenset({True})]
    held = [True, False, [True], [1, 2], (1, False), {"a": True}, {"a": 1}, [[True]]]
    for m in models:
        for name, f in m.model_fields.items():
            assert not any(bool_for_number(v, f.annotation) for v in others), (m.__name__, name)
            for v in held + others:
                want = bool_for_number(v, f.annotation)
                try:
                    no_bool_numbers(m.model_fields, {name: v})
                    got = False
                except ValueError:
                    got = True
                assert got is want, (m.__name__, name, v)
    assert any(bool_for_number(True, f.annotation) for f in OP_MODELS["compute"].model_fields.values())


def test_values_without_a_boolean_are_never_a_boolean_number() -> None:
    """``holds_bool`` (a boolean anywhere in the value) is what ``bool_for_number`` needs to be true on any field of
    the op, pipeline and profile models, so the profile's check may skip the annotation walk where it is false."""
    from pydantic import BaseModel

    import schedsim.hardware.profile as hp
    from schedsim._pydantic import bool_for_number, holds_bool
    from schedsim.spec.model import OP_MODELS
    from schedsim.spec.pipeline_block import PipelineSpec, TransformerSpec

    models = [*OP_MODELS.values(), PipelineSpec, TransformerSpec,
              *[m for m in vars(hp).values() if isinstance(m, type) and issubclass(m, BaseModel)
                and m.__module__ == hp.__name__]]
    plain = [0, 2.5, "x", None, [1, 2], (1, 2.0), {"a": 1}, [[1, 2], [3]], {"a": {"b": [1.5]}}, [], {}]
    with_bool = [True, False, [True], (1, False), {"a": True}, [[1, True]], {"a": {"b": [0, False]}}]
    assert not any(map(holds_bool, plain)) and all(map(holds_bool, with_bool))
    anns = [f.annotation for m in models for f in m.model_fields.values()]
    assert len(anns) > 100
    assert not any(bool_for_number(v, a) for v in plain for a in anns)
    assert all(any(bool_for_number(v, a) for a in anns) for v in with_bool[:-2])  # the walk still finds these


@pytest.mark.parametrize(("value", "read", "fix"), [
    ("010", 8, "fix: write 8 if that is meant, else 10 without the leading zero"),
    ("-010", -8, "fix: write -8 if that is meant, else -10 without the leading zero"),
    ("1:30", 90, "fix: write 90 if that is meant, or quote the text as a string"),
    ("1:30.5", 90.5, "fix: write 90.5 if that is meant, or quote the text as a string"),
])
def test_a_yaml_11_octal_or_base_60_number_is_refused(tmp_path: Path, value: str, read: float, fix: str) -> None:
    """YAML 1.1, which PyYAML reads, takes ``010`` as octal 8 and ``1:30`` as base-60 90: ``bytes: 010`` was 8
    bytes and ``duration_us: 1:30`` 90 µs, silently (a quoted ``"010"`` is refused by the expression parser for its
    leading zero). Refused in a schedule, through ``--set`` and in a profile; numbers read as written still load."""
    text = HEAD + f"ops:\n  - {{name: c, kind: compute, duration_us: {value}}}\n"
    with pytest.raises(SchedsimError) as e:
        load_text(text, "b.yaml")
    assert str(e.value).startswith(f"b.yaml:5:43: {value} is ") and f"to YAML 1.1, which schedsim reads: {read!r}" \
        in str(e.value) and fix in str(e.value)
    (f := tmp_path / "b.yaml").write_text(HEAD + "params: {n: 1}\nops:\n  - {name: c, kind: compute, duration_us: n}\n")
    r = CliRunner().invoke(app, ["check", str(f), "--set", f"n={value}"])
    assert r.exit_code == 2 and f"{value} is " in r.stderr and fix in r.stderr and "Traceback" not in r.stderr
    import yaml

    from schedsim.spec.yaml_reader import parse_yaml

    for same in ("00", "0_1", "07", "0x10", "0o10", "0b11", "1_000", "0.50", "'1:30'", "1e3"):  # read as written
        assert parse_yaml(f"n: {same}\n", "b.yaml")["n"] == yaml.safe_load(f"n: {same}")["n"]
    from schedsim.errors import ProfileError
    from schedsim.hardware.profile import load_profile

    prof = tmp_path / "p.yaml"
    prof.write_text(f"base: h200\nname: p\nlaunch: {{eager_per_op_us: {value}}}\n")
    with pytest.raises(ProfileError, match="to YAML 1.1"):
        load_profile(str(prof))
