"""Places that test an op kind by its name, held to a committed baseline that may only shrink.

A stage should read a kind's registry entry (:data:`schedsim.kinds.KINDS`: resource, cost rule, host call, table,
spec model...) rather than ask ``if kind == "send"``, so that a new kind is its entry alone (issue 34). A *place* is
a line of ``schedsim/`` or ``executor/`` (``schedsim/kinds.py``, the registry, aside) holding a comparison of a
name or attribute that holds a kind (``kind``, ``op.kind``, ``t.kind`` ...) with a string of an op kind name or a tuple,
list or set of them (``kind == "memcpy"``, ``op.kind in ("send", "recv")``), or a mapping literal keyed by two or
more op kind names (a table per kind). The package's total is in ``kind_names_baseline.json`` next to this file
(a total, so that code moving between files does not fail it); a test fails when the package has more places than
that, naming the count of each file. Removing places needs no baseline edit; to record the smaller number, run::

    SCHEDSIM_UPDATE_BASELINES=1 python -m pytest -q tests/quality/test_kind_names.py

and commit the rewritten JSON (review the diff: the numbers may only go down).
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

from schedsim.kinds import OP_KINDS

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).resolve().parent / "kind_names_baseline.json"
UPDATE = os.environ.get("SCHEDSIM_UPDATE_BASELINES") == "1"
SCANNED = ("schedsim", "executor")
REGISTRY = "schedsim/kinds.py"


def _strings(node: ast.expr) -> list[str]:
    """The string constants of ``node``: itself, or the items of a tuple, list or set display."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _names_a_kind(node: ast.expr) -> bool:
    """``node`` is a name or attribute that holds a kind: ``kind``, ``op.kind``, ``table_kind`` (not a field of
    the kind's registry entry, ``KINDS[op.kind].resource``)."""
    return (isinstance(node, ast.Name) and "kind" in node.id) or (isinstance(node, ast.Attribute)
                                                                  and "kind" in node.attr)


def kind_name_lines(source: str) -> set[int]:
    """Lines of ``source`` (Python text) that test an op kind by name (module docstring)."""
    kinds = set(OP_KINDS)
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            named = [p for p in parts if set(_strings(p)) & kinds]
            if named and any(_names_a_kind(p) for p in parts if p not in named):
                lines.add(node.lineno)
        elif isinstance(node, ast.Dict):
            if sum(isinstance(k, ast.Constant) and k.value in kinds for k in node.keys) >= 2:
                lines.add(node.lineno)
    return lines


def kind_name_counts(root: Path = ROOT) -> dict[str, int]:
    """Places per file of :data:`SCANNED` (paths relative to ``root``), files without any left out."""
    out = {}
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            n = len(kind_name_lines(path.read_text(encoding="utf-8"))) if rel != REGISTRY else 0
            if n:
                out[rel] = n
    return out


def test_places_that_test_a_kind_by_name_do_not_grow() -> None:
    found = kind_name_counts()
    total = sum(found.values())
    if UPDATE:
        BASELINE.write_text(json.dumps({"total": total}, indent=1) + "\n")
    allowed = json.loads(BASELINE.read_text())["total"]
    assert total <= allowed, (
        f"{total} places test an op kind by name, above the {allowed} of tests/quality/kind_names_baseline.json: "
        "read the kind's registry entry (schedsim.kinds.KINDS) instead. Per file:\n"
        + "\n".join(f"{f}: {n}" for f, n in sorted(found.items())))


def test_the_scan_finds_each_form_of_a_kind_test() -> None:
    src = '''
if op.kind == "memcpy":            # 2
    pass
x = kind in ("send", "recv")       # 4
y = "all_reduce" != t.kind         # 5
z = {"all_reduce": 2, "send": 1}   # 6
ok = kind == "sendrecv"            # 7: not an op kind
ok2 = stream == "compute"          # 8: no kind compared
ok3 = {"matmul": 1}                # 9: one kind is no table
ok4 = KINDS[op.kind].resource == "compute"  # 10: the registry's answer
'''
    assert kind_name_lines(src) == {2, 4, 5, 6}


def test_the_registry_itself_is_not_counted(tmp_path: Path) -> None:
    for top in SCANNED:
        (tmp_path / top).mkdir()
    (tmp_path / REGISTRY).write_text('A = kind == "send"\n')
    (tmp_path / "executor" / "k.py").write_text('A = kind == "send"\nB = op.kind in ("matmul", "compute")\n')
    assert kind_name_counts(tmp_path) == {"executor/k.py": 2}
