"""A literal schedule (every op written out, issue 32 item 6): the YAML is built from libyaml's parse events
without composing a node graph, and its op entries are expanded without a compiled plan each, with the
same values, types and source marks as the composing and compiling paths."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from schedsim.errors import SpecError
from schedsim.spec import foreach as F
from schedsim.spec import loader as L
from schedsim.spec import yaml_reader as Y

TEXT = """\
schema_version: 1
name: lit
world_size: 2
params: {chunks: 2}
ops:
  - {name: a, kind: compute, duration_us: 1.5, stream: s0, ranks: [0, 1]}
  - name: b
    kind: all_reduce
    bytes: 1024
    deps: [a]
    ranks: 1
    tags: {mb: 3}
  - {name: 'c{chunks}', kind: compute, duration_us: '2*chunks', when: 'chunks > 1'}
  - {name: d, kind: compute, duration_us: 0x10, stream: "q", ranks: all, deps: [a, 'b']}
  - {name: e, kind: compute, duration_us: 1.5e+3, tags: [x, y], note: ~, flag: yes, day: 2026-01-01}
"""


def _tree(v: Any) -> Any:
    """Values, types and marks of a parsed/expanded document, for equality."""
    if isinstance(v, Y.LDict):
        return ("D", v.mark, [(k, v.key_marks.get(k), _tree(x)) for k, x in v.items()])
    if isinstance(v, Y.LList):
        return ("L", v.mark, list(v.item_marks), [_tree(x) for x in v])
    if isinstance(v, list):
        return ("list", [_tree(x) for x in v])
    return (type(v).__name__, repr(v))


def _composed(text: str) -> Any:
    return Y._construct(yaml.compose(text, Loader=yaml.CSafeLoader), "f.yaml")


@pytest.mark.parametrize("text", [TEXT, "", "---\n", "[1, [2, {3: 4}]]\n", "a: 'x'\nb: |\n  z\n", "k: !!float 1\n",
                                  "1: a\n2.5: b\nnull: c\ntrue: d\n", "- .inf\n- -.nan\n- 0o17\n- +12\n- 1_000\n"])
def test_event_built_document_equals_the_composed_one(text: str) -> None:
    got = Y._construct_events(text, yaml.CSafeLoader)
    want = _composed(text) if yaml.compose(text, Loader=yaml.CSafeLoader) is not None else Y.LDict()
    assert _tree(got) == _tree(want)


def test_literal_schedule_is_not_composed(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_compose(*a: Any, **k: Any) -> Any:
        raise AssertionError("composed")

    monkeypatch.setattr(yaml, "compose", no_compose)
    doc = Y.parse_yaml(TEXT, "f.yaml")
    assert doc["ops"][1]["deps"] == ["a"] and doc["ops"][1].key_marks["bytes"] == (9, 12)
    assert doc["ops"][3]["duration_us"] == 16 and doc["ops"][4]["duration_us"] == 1500.0


@pytest.mark.parametrize(("text", "msg"), [
    ("a: 1\na: 2\n", r"f.yaml:2:1: duplicate key 'a'"),
    ("? [a]\n: 1\n", r"f.yaml:1:3: a mapping key is a list or a mapping"),
    ("a: 1\n---\nb: 2\n", r"f.yaml:2:1: invalid YAML: but found another document"),
    ("a: *x\n", r"f.yaml:1:4: invalid YAML: found undefined alias"),
    ("a: [1, 2\n", r"f.yaml:2:1: invalid YAML"),
    ("x: !foo 3\n", r"f.yaml:1:4: invalid YAML value"),
])
def test_what_events_leave_is_worded_by_the_composing_path(text: str, msg: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(Y._Unsettled):
        Y._construct_events(text, yaml.CSafeLoader)
    with pytest.raises(SpecError, match=msg) as got:
        Y.parse_yaml(text, "f.yaml")
    monkeypatch.setattr(Y, "_construct_events", lambda text, loader: (_ for _ in ()).throw(Y._Unsettled()))
    with pytest.raises(SpecError) as composed:
        Y.parse_yaml(text, "f.yaml")
    assert str(got.value) == str(composed.value)


def test_literal_ops_expand_as_compiled_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = L.expand(Y.parse_yaml(TEXT, "f.yaml"), "f.yaml")
    monkeypatch.setattr(F, "_literal_op", lambda item, km, m: None)
    general = L.expand(Y.parse_yaml(TEXT, "f.yaml"), "f.yaml")
    assert _tree(fast) == _tree(general)
    assert [o["name"] for o in fast["ops"]] == ["a", "b", "c2", "d", "e"]
    assert fast["ops"][0]["ranks"] == [0, 1] and fast["ops"][1]["ranks"] == [1] and fast["ops"][3]["ranks"] is None


@pytest.mark.parametrize(("item", "literal"), [
    ({"name": "a", "kind": "compute", "duration_us": 1}, True),
    ({"name": "a", "kind": "compute", "duration_us": "1"}, False),  # a numeric field's string is an expression
    ({"name": "a{i}", "kind": "compute", "duration_us": 1}, False),
    ({"name": "rank", "kind": "compute", "duration_us": 1}, False),  # the bare word `rank`: per-rank instances
    ({"name": "a", "kind": "compute", "duration_us": 1, "when": True}, False),
    ({"name": "a", "kind": "compute", "duration_us": 1, "ranks": "{r}"}, False),
    ({"name": "a", "kind": "compute", "duration_us": 1, "tags": {"mb": 1}}, False),
])
def test_which_entries_are_literal(item: dict[str, Any], literal: bool) -> None:
    assert (F._literal_op(Y.LDict(item), {}, (1, 1)) is not None) is literal


def _aliased_deps(n_ops: int, n_deps: int) -> str:
    names = ", ".join(f"a{j}" for j in range(n_deps))
    head = "".join(f"  - {{name: a{j}, kind: compute, duration_us: 1}}\n" for j in range(n_deps))
    return ("schema_version: 1\nname: h\nworld_size: 1\nops:\n" + head
            + f"  - {{name: b, kind: compute, duration_us: 1, deps: &d [{names}]}}\n"
            + "".join(f"  - {{name: o{i}, kind: compute, duration_us: 1, deps: *d}}\n" for i in range(n_ops)))


def test_an_alias_per_op_is_allowed_past_the_node_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """300 ops of `deps: *d` (a list of 4 names: 5 nodes each, 1,500 in all) pass a limit of 1,000 expanded
    nodes: each alias written may add ALIAS_NODES (16) more. Nested aliases are still refused."""
    monkeypatch.setattr(Y, "MAX_NODES", 1000)
    doc = Y.parse_yaml(_aliased_deps(300, 4), "f.yaml")
    assert len(doc["ops"]) == 305 and doc["ops"][-1]["deps"] == ["a0", "a1", "a2", "a3"]
    with pytest.raises(SpecError, match="more than 1,000 nodes"):
        Y.parse_yaml(_aliased_deps(100, 40), "f.yaml")  # 100 aliases of 41 nodes: 4,100 > 1,000 + 100 × 16
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcd", "bcde", strict=True))
    with pytest.raises(SpecError, match="more than 1,000 nodes"):
        Y.parse_yaml(bomb, "f.yaml")
