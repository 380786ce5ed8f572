"""Every error path of the schedule language: file, line, column, field path and fix are checked."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from schedsim.errors import SpecError
from schedsim.spec.loader import load_schedule, load_text
from schedsim.spec.overrides import parse_overrides

GOOD = """\
schema_version: 1
name: t
world_size: 2
params: {chunks: 2, M: 64}
ops:
  - foreach: {i: range(chunks)}
    ops:
      - name: ag{i}
        kind: all_gather
        shape: [M/chunks, 8]
        buffer: shard
      - name: mm{i}
        kind: matmul
        m: M*world_size/chunks
        n: 8
        k: 8
        deps: ["ag{i}"]
"""


def load(text: str, **ov):
    return load_text(textwrap.dedent(text), "s.yaml", ov)


def test_good_expands():
    spec = load(GOOD)
    assert [o.name for o in spec.ops] == ["ag0", "mm0", "ag1", "mm1"]
    assert spec.ops[1].m == 64  # 64*2/2
    assert spec.ops[0].shape == [32, 8]
    spec4 = load(GOOD, chunks=4)
    assert len(spec4.ops) == 8 and spec4.ops[1].m == 32


def test_yaml_syntax_error_has_line_and_column():
    with pytest.raises(SpecError) as e:
        load("schema_version: 1\nname: [unclosed\n")
    assert e.value.file == "s.yaml" and e.value.line is not None
    assert "invalid YAML" in str(e.value)


def test_unquoted_braces_in_flow_list_gets_quoting_fix():
    with pytest.raises(SpecError, match=r'quote strings that hold \{expr\}'):
        load(GOOD.replace('deps: ["ag{i}"]', "deps: [ag{i}]"))


def test_unknown_key_suggests_nearest():
    with pytest.raises(SpecError) as e:
        load(GOOD.replace('deps: ["ag{i}"]', 'dep: ["ag{i}"]'))
    err = e.value
    assert "unknown key 'dep'" in str(err)
    assert err.fix == "did you mean 'deps'?"
    assert err.line == 17 and err.path == "ops[0].ops[1].dep"


def test_unknown_top_level_key():
    with pytest.raises(SpecError, match="did you mean 'world_size'"):
        load(GOOD.replace("world_size: 2", "world_sise: 2"))


def test_unknown_kind_suggests():
    with pytest.raises(SpecError) as e:
        load(GOOD.replace("kind: matmul", "kind: matmull"))
    assert "unknown op kind 'matmull'" in str(e.value) and e.value.fix == "did you mean 'matmul'?"
    assert e.value.line == 13


def test_missing_field():
    with pytest.raises(SpecError, match="missing required field 'k'") as e:
        load(GOOD.replace("        k: 8\n", ""))
    assert e.value.path == "ops[0].ops[1].k"


def test_non_integral_expression():
    with pytest.raises(SpecError) as e:
        load(GOOD, M=63)
    assert "ops[0]" in str(e.value) and "31.5" in str(e.value)
    assert "divide evenly" in e.value.fix


def test_bad_expression_names_parameters():
    with pytest.raises(SpecError) as e:
        load(GOOD.replace("m: M*world_size/chunks", "m: Q*2"))
    assert "unknown name 'Q'" in str(e.value) and "chunks" in e.value.fix and e.value.line == 14


def test_eval_is_never_used():
    with pytest.raises(SpecError, match="only the functions"):
        load(GOOD.replace("m: M*world_size/chunks", "m: __import__('os').getpid()"))


def test_unknown_override_suggests():
    with pytest.raises(SpecError, match="did you mean --set chunks="):
        load(GOOD, chunk=4)


def test_parse_overrides_types():
    assert parse_overrides(["chunks=4", "dtype=fp16", "x=1.5"]) == {"chunks": 4, "dtype": "fp16", "x": 1.5}
    with pytest.raises(SpecError, match="key=value"):
        parse_overrides(["chunks"])


def test_rank_out_of_range():
    with pytest.raises(SpecError, match="uses rank 5 but world_size is 2") as e:
        load(GOOD.replace("        kind: matmul\n", "        kind: matmul\n        ranks: [5]\n"))
    assert e.value.path.endswith(".ranks")


def test_undeclared_stream():
    with pytest.raises(SpecError, match="did you mean 'comm'"):
        load(GOOD.replace("world_size: 2\n", "world_size: 2\nstreams: [compute, comm]\n").replace(
            "        buffer: shard\n", "        buffer: shard\n        stream: comms\n"))


def test_duplicate_name_on_a_rank():
    with pytest.raises(SpecError, match="used twice on rank 0"):
        load(GOOD.replace("name: mm{i}", "name: mm"))


def test_bytes_and_shape_both_given():
    with pytest.raises(SpecError, match="exactly one of `bytes` or `shape`"):
        load(GOOD.replace("buffer: shard", "buffer: shard\n        bytes: 100"))


def test_schema_version():
    with pytest.raises(SpecError, match="schema_version") as e:
        load(GOOD.replace("schema_version: 1", "schema_version: 2"))
    assert e.value.line == 1


def test_send_to_self_and_bad_peer():
    base = "schema_version: 1\nname: t\nworld_size: 2\nops:\n  - {name: s, kind: send, ranks: [0], peer: %s, bytes: 8}\n"
    with pytest.raises(SpecError, match="names itself as peer"):
        load(base % 0)
    with pytest.raises(SpecError, match="peer 3 but world_size is 2"):
        load(base % 3)


def test_root_outside_group():
    with pytest.raises(SpecError, match="root 3 outside its group"):
        load("schema_version: 1\nname: t\nworld_size: 2\nops:\n  - {name: b, kind: broadcast, root: 3, bytes: 8}\n")


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_a_root_on_a_collective_without_one_is_refused_not_ignored(kind):
    """NCCL's all-reduce, all-gather, reduce-scatter and all-to-all have no root: ``root: 1`` written on one was
    accepted and read by nothing. The error names the op's line and the field; root 0 (the default) written out is
    refused too."""
    for root in (1, 0):
        with pytest.raises(SpecError) as e:
            load(f"schema_version: 1\nname: t\nworld_size: 2\nops:\n"
                 f"  - {{name: a, kind: {kind}, bytes: 8, root: {root}}}\n")
        assert e.value.format().splitlines() == [
            f"s.yaml:5:{39 + len(kind)}: ops[0].root: {kind} 'a' has no root rank (only broadcast, reduce, scatter, "
            "gather have one)", f"  fix: remove root from the {kind}"]


def test_foreach_with_stray_key():
    with pytest.raises(SpecError, match="foreach block holds only"):
        load("schema_version: 1\nname: t\nworld_size: 1\nops:\n  - foreach: {i: range(2)}\n    name: x\n    ops: []\n")


def test_when_filters():
    spec = load(GOOD.replace("        kind: matmul\n", "        kind: matmul\n        when: i > 0\n"))
    assert [o.name for o in spec.ops] == ["ag0", "ag1", "mm1"]


def test_missing_file():
    with pytest.raises(SpecError, match="no such file"):
        load_schedule("/nonexistent/x.yaml")


def test_empty_schedule():
    with pytest.raises(SpecError, match="no ops"):
        load("schema_version: 1\nname: t\nworld_size: 1\n")


def test_unclosed_flow_mapping_is_not_blamed_on_braces():
    with pytest.raises(SpecError) as e:
        load("schema_version: 1\nname: t\nops:\n  - {name: a, kind: matmul\n")
    assert "unclosed" in e.value.fix and "quote strings" not in e.value.fix


def _marked(x: object) -> object:
    """``x`` with the marks that :func:`parse_yaml` attached to its mappings and lists, for comparing."""
    if isinstance(x, dict):
        return (x.mark, x.key_marks, {k: _marked(v) for k, v in x.items()})  # type: ignore[attr-defined]
    if isinstance(x, list):
        return (x.mark, x.item_marks, [_marked(v) for v in x])  # type: ignore[attr-defined]
    return (type(x), x)


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).parents[2] / "schedules").glob("*.yaml")))
def test_libyaml_and_pure_python_parsers_agree(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """parse_yaml composes with libyaml when PyYAML has it: the values, their types and every line and column
    are those of the pure-Python parser (what parse_yaml uses without libyaml)."""
    import yaml

    from schedsim.spec.yaml_reader import parse_yaml

    text = (Path(__file__).parents[2] / "schedules" / name).read_text()
    fast = _marked(parse_yaml(text, name))
    monkeypatch.delattr(yaml, "CSafeLoader")
    assert _marked(parse_yaml(text, name)) == fast


def test_yaml_syntax_error_worded_by_pure_python_parser() -> None:
    """libyaml refuses the text; the message is the pure-Python parser's (libyaml's would say "did not find
    expected ',' or '}'")."""
    with pytest.raises(SpecError) as e:
        load_text("schema_version: 1\nname: t\nops:\n  - {name: a, kind: matmul\n  - x\n", "s.yaml")
    assert str(e.value).startswith("s.yaml:6:1: invalid YAML: expected ',' or '}', but got '<stream end>'\n")


@pytest.mark.parametrize("text", ["schema_version: 1\nname:\tt\n", "schema_version: 1\nname: t\t\n",
                                  "schema_version: 1\nname: t\nstreams: [a,\tb]\n"])
def test_a_tab_between_tokens_is_refused_with_or_without_libyaml(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """libyaml takes a tab where the pure-Python parser refuses it ("found character '\\t' that cannot start any
    token"); a schedule must not be valid on one machine and invalid on another, so the tab is refused with the
    pure-Python parser's error either way."""
    import yaml

    errors = []
    for libyaml in (True, False):
        if not libyaml:
            monkeypatch.delattr(yaml, "CSafeLoader")
        with pytest.raises(SpecError) as e:
            load_text(text, "s.yaml")
        errors.append(str(e.value))
    assert errors[0] == errors[1]
    assert "found character '\\t' that cannot start any token" in errors[0]


@pytest.mark.parametrize("text", ["# a comment\n\ufeffschema_version: 1\n", "---\n\ufeffschema_version: 1\n"])
def test_a_byte_order_mark_inside_the_text_reads_the_same_with_or_without_libyaml(
        monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """libyaml drops a BOM before a document's first content, so the key read ``schema_version``; the
    pure-Python parser keeps it in the key. Both now read it as the pure-Python parser does (one schedule,
    one meaning on every machine), and a BOM at the very start stays a BOM."""
    import yaml

    from schedsim.spec.yaml_reader import parse_yaml

    fast = _marked(parse_yaml(text, "s.yaml"))
    assert "\ufeffschema_version" in fast[2]
    assert list(parse_yaml("\ufeffname: t\n", "s.yaml")) == ["name"]
    monkeypatch.delattr(yaml, "CSafeLoader")
    assert _marked(parse_yaml(text, "s.yaml")) == fast


def test_a_lone_surrogate_is_a_spec_error() -> None:
    # libyaml reads UTF-8: encoding the text fails before it parses; the pure-Python parser names the character
    with pytest.raises(SpecError, match=r"s.yaml: invalid YAML: unacceptable character #xd800"):
        load_text("schema_version: 1\nname: '\ud800'\n", "s.yaml")


# fragments of tricky YAML (flow collections, anchors, tags, block scalars, directives, BOMs, odd line breaks);
# texts are lines of them, which are often not valid YAML: both parsers must then refuse them
_YAML_FRAGMENTS = [
    "a: 1", "b: [1, 2]", "c: {x: 1, y: [2]}", "- x", "- {a: 1}", "d: 'it''s'", 'e: "\\u00e9\\x41"', "f: |\n  l1\n  l2",
    "g: >-\n  folded\n  text", "h: &A {k: 1}", "i: *A", "j: !!str 12", "k: 0x1F", "l: 1_000", "m: .inf", "n: ~",
    "o: 2026-12-01", "q: yes", "r: 'a: b'", "s: a # comment", "# only comment", "---", "...", "%YAML 1.1\n---",
    "t: [a, {b: c}, [d]]", "u: ? complex\n  : value", "? q\n: r", 'v: "multi\n  line"', "x:\n  - 1\n  -   2",
    "y: {a: 1,}", "z: [1,]", "bb: !custom x", "ff:\n  <<: *A\n  k: 2", "jj: 017", "kk: 1:20", "ll: 'x'y", "mm: [a b]",
    "oo: a: b", "pp: @x", "ss: x\r\n", "\ufeffuu: 1", "vv: \x85", "zz: [", "a1: ]", 'a2: "\\q"', "a3: |2\n    x",
    "a5: - 1", "a6:\n- 1\n- 2", "  a7: 1", "b5: &a1 [*a1]", "b6: \u2028x",
]


def _values(x):  # the parse without its marks: nested dicts and lists of (type, value)
    if isinstance(x, dict):
        return {k: _values(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_values(v) for v in x]
    return (type(x), x)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_YAML_FRAGMENTS), min_size=1, max_size=4), st.sampled_from(["", "\n", " "]))
@example(["# only comment", "\ufeffuu: 1"], "\n")  # the fuzz's finds (2026-12-02): libyaml dropped these BOMs
@example(["---", "\ufeffuu: 1"], "")
def test_libyaml_and_pure_python_read_every_text_alike(lines: list[str], end: str) -> None:
    """Differential: whatever the text, parse_yaml with libyaml gives the pure-Python parser's outcome: the
    same values and types, or the same error. (Marks may differ in one known place: the column of an empty
    value inside ``[ ]``, see parse_yaml.)"""
    import yaml

    from schedsim.spec.yaml_reader import parse_yaml

    def outcome() -> object:
        try:
            return _values(parse_yaml(text, "f.yaml"))
        except SpecError as e:
            return str(e)

    text = "\n".join(lines) + end
    fast = outcome()
    saved = yaml.CSafeLoader
    del yaml.CSafeLoader
    try:
        assert outcome() == fast
    finally:
        yaml.CSafeLoader = saved


@pytest.mark.parametrize("key", ["NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
                                 "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_ALGO"])
def test_env_boolean_is_no_setting(key: str):
    # `NCCL_MAX_CTAS: true` was read as 1 by pydantic's int | str (one channel: the all_reduce 2.4x slower),
    # `CUDA_DEVICE_MAX_CONNECTIONS: true` as 1 (false serialization of every stream)
    text = GOOD.replace("params:", f"env: {{{key}: true}}\nparams:")
    with pytest.raises(SpecError, match=rf"s.yaml:4:.*{key} must be an? (integer|string), not a boolean") as e:
        load(text)
    assert e.value.fix
    assert load(text.replace("true", "ring" if key == "NCCL_ALGO" else "2")).env[key] in (2, "ring")
