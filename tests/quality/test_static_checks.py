"""ruff and mypy, held to committed baselines that may only shrink.

The code base predates these checks, so today's findings are listed in ``ruff_baseline.json`` and
``mypy_baseline.json`` (next to this file). A test fails when a file gains a finding of a kind it did
not have (or more of one it had), when a function not in the baseline exceeds the mccabe complexity
limit of ``[tool.ruff.lint.mccabe]`` (15), or when a baselined function grows more complex. Likewise
``any_baseline.json`` holds the ``Any`` in the signatures of the stage-boundary modules (issue 34).
Fixing findings needs no baseline edit; to record the smaller numbers, run::

    SCHEDSIM_UPDATE_BASELINES=1 python -m pytest -q tests/quality/test_static_checks.py

and commit the rewritten JSON (review the diff: the numbers may only go down).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RUFF_BASELINE = HERE / "ruff_baseline.json"
MYPY_BASELINE = HERE / "mypy_baseline.json"
LINTED = ["schedsim", "executor", "tests", "benchmarks"]
UPDATE = os.environ.get("SCHEDSIM_UPDATE_BASELINES") == "1"
C901 = re.compile(r"^`(?P<name>[^`]+)` is too complex \((?P<n>\d+) > \d+\)$")


def _growth(found: dict[str, dict[str, int]], allowed: dict[str, dict[str, int]]) -> list[str]:
    """Findings above the baseline: ``file: key: n > allowed`` lines, sorted."""
    out = []
    for file, counts in sorted(found.items()):
        for key, n in sorted(counts.items()):
            limit = allowed.get(file, {}).get(key, 0)
            if n > limit:
                out.append(f"{file}: {key}: {n} > {limit}")
    return out


def _write(path: Path, data: dict[str, dict[str, int]]) -> None:
    path.write_text(json.dumps({f: dict(sorted(c.items())) for f, c in sorted(data.items()) if c},
                               indent=1) + "\n")


def ruff_findings() -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """``(counts, complexity)``: rule code counts per file, and each over-limit function's mccabe number.

    A function name that occurs twice in one file (methods, nested helpers) keeps the larger number.
    """
    ruff = pytest.importorskip("ruff")
    del ruff
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "json", "--no-cache", *LINTED],
                       cwd=ROOT, capture_output=True, text=True, check=False)
    assert p.returncode in (0, 1), p.stderr
    counts: dict[str, Counter[str]] = {}
    complexity: dict[str, dict[str, int]] = {}
    for item in json.loads(p.stdout):
        file = Path(item["filename"]).resolve().relative_to(ROOT).as_posix()
        if item["code"] == "C901":
            m = C901.match(item["message"])
            assert m, item["message"]
            fns = complexity.setdefault(file, {})
            fns[m["name"]] = max(fns.get(m["name"], 0), int(m["n"]))
        else:
            counts.setdefault(file, Counter())[item["code"]] += 1
    return {f: dict(c) for f, c in counts.items()}, complexity


def test_ruff_findings_do_not_grow():
    counts, complexity = ruff_findings()
    if UPDATE:
        _write(RUFF_BASELINE, {**{f"rules:{f}": c for f, c in counts.items()},
                               **{f"complexity:{f}": c for f, c in complexity.items()}})
    base = json.loads(RUFF_BASELINE.read_text())
    allowed_rules = {k.removeprefix("rules:"): v for k, v in base.items() if k.startswith("rules:")}
    allowed_cx = {k.removeprefix("complexity:"): v for k, v in base.items() if k.startswith("complexity:")}
    grew = _growth(counts, allowed_rules)
    too_complex = [f"{line} (split the function: mccabe limit 15)" for line in _growth(complexity, allowed_cx)]
    assert not grew + too_complex, ("ruff findings above tests/quality/ruff_baseline.json "
                                    "(see `ruff check <file>`):\n" + "\n".join(grew + too_complex))


def test_ruff_baseline_counts_the_complex_functions():
    """The baseline's complexity section parses ruff's message; a changed message must not pass silently."""
    assert C901.match("`_simulate` is too complex (62 > 15)")["n"] == "62"
    base = json.loads(RUFF_BASELINE.read_text())
    assert any(k.startswith("complexity:") for k in base), "the baseline lost its complexity section"


MYPY_LINE = re.compile(r"^(?P<file>[^:\s]+\.py):\d+(?::\d+)?: error: ")


def mypy_counts() -> dict[str, dict[str, int]]:
    """mypy errors per file (configuration: ``[tool.mypy]`` of pyproject.toml; cache in .mypy_cache)."""
    pytest.importorskip("mypy")
    p = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--show-error-codes"],
                       cwd=ROOT, capture_output=True, text=True, check=False)
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]
    counts: Counter[str] = Counter()
    for line in p.stdout.splitlines():
        m = MYPY_LINE.match(line)
        if m:
            counts[m["file"]] += 1
    return {f: {"errors": n} for f, n in counts.items()}


def _check_baseline(found: dict[str, dict[str, int]], baseline: Path, what: str) -> None:
    """Rewrite ``baseline`` under SCHEDSIM_UPDATE_BASELINES=1; fail naming each count above it."""
    if UPDATE:
        _write(baseline, found)
    grew = _growth(found, json.loads(baseline.read_text()))
    assert not grew, f"{what} above tests/quality/{baseline.name}:\n" + "\n".join(grew)


def test_mypy_errors_do_not_grow():
    _check_baseline(mypy_counts(), MYPY_BASELINE, "mypy errors (run `python -m mypy`)")


GLUED_BASELINE = HERE / "glued_fix_baseline.json"


def glued_fix_counts() -> dict[str, dict[str, int]]:
    """String literals (not docstrings) that spell ``fix:`` per file of schedsim/ and executor/.

    An error's fix is its ``fix=`` field (:class:`schedsim.errors.SchedsimError` prints it); a
    ``"...\\n  fix: ..."`` glued into the message by hand is what this counts. errors.py, which
    formats the field, is exempt.
    """
    import ast

    counts: dict[str, dict[str, int]] = {}
    for path in sorted([*ROOT.glob("schedsim/**/*.py"), *ROOT.glob("executor/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "schedsim/errors.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.value) for n in ast.walk(tree)
                      if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        n = sum(1 for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings and "fix:" in node.value)
        if n:
            counts[rel] = {"glued fix": n}
    return counts


def test_fixes_are_fields_not_glued_into_messages():
    _check_baseline(glued_fix_counts(), GLUED_BASELINE,
                    "string literals spelling 'fix:' (pass the fix as the error's fix= field instead)")


OUTSIDE = re.compile(r"\bshared/(?:reference|data|seeds)|/work/|h200_measurements\.md|PROFILE_CONTRACT")


def test_package_cites_no_path_outside_the_repository():
    """Facts keep their source as a paper, vendor doc or measurement (hardware, date), never a path
    to a document the repository does not hold."""
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
           for p in sorted([*ROOT.glob("schedsim/**/*.py"), *ROOT.glob("schedsim/**/*.yaml"),
                            *ROOT.glob("executor/**/*.py"), *ROOT.glob("schedules/*.yaml")])
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert not bad, "\n".join(bad)
    assert OUTSIDE.search("see ../shared/reference/pipelines.md") and not OUTSIDE.search("shared memory")


ANY_BASELINE = HERE / "any_baseline.json"
#: The modules at the stage boundaries of issue 34 (ScheduleSpec → Program → gpu/ and network/ models → sim loop →
#: Timeline → Metrics and views → api), whose signatures name the real types rather than ``Any``.
BOUNDARY_MODULES = [
    "schedsim/api.py", "schedsim/lower/__init__.py", "schedsim/lower/program.py", "schedsim/gpu/cost.py",
    "schedsim/gpu/power.py", "schedsim/network/model.py", "schedsim/network/explain.py", "schedsim/network/share.py",
    "schedsim/sim/engine.py", "schedsim/sim/symmetry.py", "schedsim/sim/timeline.py", "schedsim/sim/metrics.py",
    "schedsim/sim/pipeline_metrics.py", "schedsim/compare.py", "schedsim/notes.py", "schedsim/report/summary.py",
    "schedsim/report/chrome.py", "schedsim/report/compare.py", "schedsim/report/memory.py",
]


def _any_names(annotation: ast.expr | None) -> int:
    """``Any`` (a name or ``typing.Any``) in an annotation, a string annotation parsed first."""
    n = 0
    for node in ast.walk(annotation) if annotation is not None else ():
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            n += _any_names(ast.parse(node.value, mode="eval").body)
        n += (isinstance(node, ast.Name) and node.id == "Any") or (isinstance(node, ast.Attribute)
                                                                   and node.attr == "Any")
    return n


def any_in_signatures(source: str) -> int:
    """``Any`` in the signatures of ``source``: every function's (nested ones too) parameters and return, and every
    annotated name of a class body (dataclass fields, NamedTuple and TypedDict members, annotated attributes)."""
    n = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x is not None)]
            n += sum(_any_names(p.annotation) for p in params) + _any_names(node.returns)
        elif isinstance(node, ast.ClassDef):
            n += sum(_any_names(s.annotation) for s in node.body if isinstance(s, ast.AnnAssign))
    return n


def test_any_in_signatures_of_the_stage_boundaries_does_not_grow():
    counts = {rel: {"Any in signatures": any_in_signatures((ROOT / rel).read_text(encoding="utf-8"))}
              for rel in BOUNDARY_MODULES}
    _check_baseline({f: c for f, c in counts.items() if c["Any in signatures"]}, ANY_BASELINE,
                    "`Any` in the signatures of the stage-boundary modules (name the real type)")


def test_the_any_count_reads_parameters_returns_fields_and_string_annotations():
    src = ("from typing import Any\nimport typing\n"
           "def f(a: Any, *b: Any, c: 'dict[str, Any]' = None, **d: typing.Any) -> list[Any]:\n"
           "    def g(x: Any) -> None:\n        y: Any = x\n"
           "class C:\n    f: Any\n    g: int = 0\n    def m(self, z: int) -> Any: ...\n")
    assert any_in_signatures(src) == 8  # not the local ``y: Any`` (a body, not a signature)
