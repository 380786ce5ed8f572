"""tests/ mirrors the package (issue 34): every folder of test files is named after a part of schedsim.

A folder of ``test_*.py`` files under ``tests/`` is either a subpackage of ``schedsim`` (``tests/sim`` tests
``schedsim/sim``) or one of the folders for what has no subpackage: ``cli`` (the command line, ``api``,
outputs and errors: top-level modules of ``schedsim``), ``executor`` (the top-level ``executor/``), ``oracle``
(test oracles and the differential suite) and ``quality`` (the repository's own rules). No test file is named
after how it came about (a review round, a second hostile pass) rather than what it guards.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTRA = {"cli", "executor", "oracle", "quality"}
HISTORY = re.compile(r"(review|_break|_round\d|hostile\d|_v\d+(_|$)|fix\d|pass\d|again)", re.IGNORECASE)


def _subpackages() -> set[str]:
    return {p.parent.name for p in (ROOT / "schedsim").glob("*/__init__.py")}


def _test_folders() -> set[Path]:
    return {p.parent for p in (ROOT / "tests").rglob("test_*.py") if "data" not in p.relative_to(ROOT / "tests").parts}


def test_every_test_folder_mirrors_a_part_of_the_package() -> None:
    allowed = _subpackages() | EXTRA
    stray = sorted(
        str(folder.relative_to(ROOT))
        for folder in _test_folders()
        if folder.parent != ROOT / "tests" or folder.name not in allowed
    )
    assert not stray, f"test folders that mirror no part of schedsim/ (allowed: {sorted(allowed)}): {stray}"


def test_the_mirror_rule_refuses_a_flat_folder() -> None:
    """The rule above is not vacuous: ``tests/core`` (the old flat folder) is no part of the package."""
    assert "core" not in _subpackages() | EXTRA
    assert {"sim", "lower", "gpu", "network", "spec", "report"} <= _subpackages()


def test_no_test_file_is_named_after_how_it_came_about() -> None:
    for old in ("test_review_break2", "test_hostile2", "test_review_rule9", "test_timeline_v3_props"):
        assert HISTORY.search(old), old  # the names issue 34 found are caught
    named = sorted(p.name for p in (ROOT / "tests").rglob("test_*.py") if HISTORY.search(p.stem))
    assert not named, f"name these test files after what they guard: {named}"
