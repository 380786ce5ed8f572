"""The flow is one-way: nothing below the entry point imports the command line."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (lazy imports included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_only_the_entry_point_imports_the_cli():
    importers = sorted(p.relative_to(ROOT).as_posix()
                       for p in [*ROOT.glob("schedsim/**/*.py"), *ROOT.glob("executor/**/*.py")]
                       if "schedsim.cli" in _imports(p))
    assert importers == ["schedsim/__main__.py"], importers


def test_the_import_scan_sees_lazy_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from schedsim.cli import app\n    import schedsim.api\n")
    assert _imports(f) == {"schedsim.cli", "schedsim.api"}
