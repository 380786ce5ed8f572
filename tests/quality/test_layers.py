"""The flow is one-way, counting lazy imports (imports inside functions) as imports.

The layers, lowest first (issue 34): core (errors, kinds, units, io, …) → lang (spec, expr) → pipeline →
lower (and graph) → gpu/network models (hardware, gpu, network) → sim → timeline (Timeline,
metrics, compare logic, trace readers) → views (report, search) → api → cli. A module may import only from
its own layer or below, and no module may be in an import cycle. Today's upward imports are listed in
``layers_baseline.json`` next to this file; a test fails when an import goes upward that the baseline does not
list, or when any module is in an import cycle. Removing them needs no baseline edit; to record the smaller lists, run::

    SCHEDSIM_UPDATE_BASELINES=1 python -m pytest -q tests/quality/test_layers.py

and commit the rewritten JSON (review the diff: the lists may only shrink).
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).resolve().parent / "layers_baseline.json"
UPDATE = os.environ.get("SCHEDSIM_UPDATE_BASELINES") == "1"

#: Layer of each top-level module or subpackage of ``schedsim`` (the first name after ``schedsim.``).
LAYER = {
    "errors": 0, "kinds": 0, "units": 0, "io": 0, "_gc": 0, "_pydantic": 0, "coded": 0, "monotone": 0,
    "results": 0, "outdir": 0, "arrays": 0, "tags": 0, "made": 0,
    "expr": 1, "spec": 1,
    "pipeline": 2,
    "lower": 3, "graph": 3,
    "hardware": 4, "gpu": 4, "network": 4,
    "sim": 5,
    "compare": 6, "trace": 6,
    "report": 7, "search": 7, "search_cluster": 7,
    "notes": 7,  # the guesses a prediction rests on, judged from its profile and cost model; read by cli and api
    "api": 8,
    "cliutil": 9, "clicore": 9, "cli": 9, "__main__": 10,
}
#: Modules of ``schedsim.sim`` that are the timeline layer rather than the simulator.
TIMELINE_MODULES = {"schedsim.sim.timeline", "schedsim.sim.timeline_json", "schedsim.sim.metrics",
                    "schedsim.sim.pipeline_metrics", "schedsim.sim.path_ids"}
#: Modules outside the top level that hold command-line commands (typer), the cli layer.
CLI_MODULES = {"schedsim.trace.commands"}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (lazy imports included), absolute names only."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _modules() -> dict[str, Path]:
    mods = {}
    for p in ROOT.glob("schedsim/**/*.py"):
        parts = p.relative_to(ROOT).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


def import_graph() -> nx.DiGraph:
    """Module → module edges of the package (an import of ``a.b.c`` where only ``a.b`` is a module counts as
    ``a.b``; ``from pkg import name`` counts the submodule ``pkg.name`` where there is one)."""
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        for t in _imports(path):
            while t and t not in mods:
                t = t.rpartition(".")[0]
            if t and t != name and not name.startswith(t + "."):  # a package's own parents are not imports
                g.add_edge(name, t)
    return g


def layer(module: str) -> int:
    if module in TIMELINE_MODULES:
        return 6
    if module in CLI_MODULES:
        return 9
    parts = module.split(".")
    return LAYER.get(parts[1], 5) if len(parts) > 1 else 0


def findings() -> dict[str, list[str]]:
    g = import_graph()
    cyclic = sorted(m for c in nx.strongly_connected_components(g) if len(c) > 1 for m in c)
    upward = sorted(f"{a} -> {b}" for a, b in g.edges() if a != "schedsim" and layer(a) < layer(b))
    return {"in_cycles": cyclic, "upward": upward}


def test_no_new_upward_import_and_no_new_module_in_a_cycle() -> None:
    found = findings()
    if UPDATE:
        BASELINE.write_text(json.dumps(found, indent=1) + "\n")
    allowed = json.loads(BASELINE.read_text())
    for key in ("in_cycles", "upward"):
        new = sorted(set(found[key]) - set(allowed[key]))
        assert not new, f"{key} not in {BASELINE.name}: {new}"


def test_no_module_is_in_an_import_cycle() -> None:
    """Zero, not a baseline: no two modules import each other, directly or round a loop (lazy imports counted)."""
    assert findings()["in_cycles"] == []


def test_only_the_entry_point_imports_the_cli() -> None:
    importers = sorted(p.relative_to(ROOT).as_posix()
                       for p in [*ROOT.glob("schedsim/**/*.py"), *ROOT.glob("executor/**/*.py")]
                       if "schedsim.cli" in _imports(p))
    assert importers == ["schedsim/__main__.py"], importers


def test_the_package_imports_no_test_oracle() -> None:
    """The second implementations are test oracles (``tests/oracle/``: the Python event loop, the object-based build
    and its static checks, NCCL's rules on a networkx graph); the package and the executor never import them, so
    every result of the package comes from its own one road."""
    importers = sorted(p.relative_to(ROOT).as_posix()
                       for p in [*ROOT.glob("schedsim/**/*.py"), *ROOT.glob("executor/**/*.py")]
                       if any(m == "tests" or m.startswith("tests.") for m in _imports(p)))
    assert importers == [], importers


def test_the_import_scan_sees_lazy_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from schedsim.cli import app\n    import schedsim.api\n")
    assert _imports(f) == {"schedsim.cli", "schedsim.cli.app", "schedsim.api"}


def test_the_scan_finds_a_lazy_cycle_and_an_upward_import(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    pkg = tmp_path / "schedsim"
    (pkg / "spec").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "spec" / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("def f():\n    from schedsim.spec import loader\n")
    (pkg / "spec" / "loader.py").write_text("from schedsim.errors import f\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert findings() == {"in_cycles": ["schedsim.errors", "schedsim.spec.loader"],
                          "upward": ["schedsim.errors -> schedsim.spec",  # the package's __init__ runs too
                                     "schedsim.errors -> schedsim.spec.loader"]}
