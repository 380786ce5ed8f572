"""Issue 34's measurable limits on the house, held: no package module over 1,000 lines, a README of at most
15 KB, at most 60 files in ``benchmarks/`` and none dated in its name, at most 75 ``# type: ignore`` and at most 20
dated lines in the package source. (Import cycles: ``test_layers.py``; test file names: ``test_tests_mirror.py``.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATE = re.compile(r"20\d\d-[01]\d-[0-3]\d")


def _sources() -> dict[Path, list[str]]:
    return {p: p.read_text(encoding="utf-8").splitlines() for p in sorted((ROOT / "schedsim").rglob("*.py"))}


def _benchmark_files() -> list[str]:
    """The tracked files of ``benchmarks/`` (``git ls-files``), or, outside a git checkout, every file but caches."""
    try:
        out = subprocess.run(["git", "ls-files", "benchmarks"], cwd=ROOT, capture_output=True, text=True, check=True)
        files = out.stdout.split()
    except (OSError, subprocess.CalledProcessError):
        files = []
    return files or [str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts]


def test_no_package_module_is_over_1000_lines() -> None:
    big = {str(p.relative_to(ROOT)): len(lines) for p, lines in _sources().items() if len(lines) > 1000}
    assert not big, f"split these modules (issue 34: none over 1,000 lines): {big}"


def test_type_ignores_and_dated_lines_in_the_package_stay_under_the_limits() -> None:
    src = _sources()
    ignores = sum(line.count("# type: ignore") for lines in src.values() for line in lines)
    dated = [f"{p.relative_to(ROOT)}:{i}" for p, lines in src.items() for i, line in enumerate(lines, 1)
             if DATE.search(line)]
    assert ignores <= 75, f"{ignores} `# type: ignore` in schedsim/ (issue 34: at most 75)"
    assert len(dated) <= 20, f"{len(dated)} dated lines in schedsim/ (at most 20; dates go in docs/validation.md)"


def test_readme_and_benchmarks_stay_a_map() -> None:
    size = (ROOT / "README.md").stat().st_size
    assert size <= 15_000, f"README.md is {size} bytes (issue 34: at most 15 KB; history goes in docs/validation.md)"
    files = _benchmark_files()
    assert 0 < len(files) <= 60, f"{len(files)} files in benchmarks/ (issue 34: at most 60)"
    dated = [f for f in files if DATE.search(Path(f).name) or re.search(r"20\d\d[01]\d[0-3]\d", Path(f).name)]
    assert not dated, f"benchmark files named after a date: {dated}"


def test_the_limits_are_not_vacuous() -> None:
    """The date pattern and the line count see what they should."""
    assert DATE.search("measured 2026-12-06") and not DATE.search("version 2.30.7")
    assert max(len(lines) for lines in _sources().values()) > 500
