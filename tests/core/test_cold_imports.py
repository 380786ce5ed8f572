"""What the CLI's cold start imports: the entry point loads no numpy, networkx or simulator module, and
``predict`` (trace.json included) never imports networkx; ``check`` never imports the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "networkx", "schedsim.sim", "schedsim.graph.build", "rich")


def _loaded(code: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout.split("\n")[-2]
    return [m for m in out.split() if m.startswith(HEAVY)]


def test_entry_point_imports_nothing_heavy() -> None:
    assert _loaded("import schedsim.cli") == []


def test_check_and_predict_skip_networkx(tmp_path: Path) -> None:
    run = ("import sys\nfrom schedsim.cli import main\n"
           "sys.argv = ['schedsim', {!r}, 'schedules/allgather_mm8.yaml'{}]\n"
           "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n")
    checked = _loaded(run.format("check", ""))
    assert not any(m.startswith(("networkx", "schedsim.sim", "rich")) for m in checked), checked
    predicted = _loaded(run.format("predict", f", '--no-gantt', '--out', {str(tmp_path)!r}"))
    assert (tmp_path / "trace.json").exists()
    assert not any(m.startswith(("networkx", "schedsim.graph.build")) for m in predicted), predicted
    assert "numpy" in predicted  # the lowering's arrays: the modules above are really what the run loaded
