"""``clicore.lean_numpy_docs``: in a command's process numpy's docstring modules are not run (their stand-ins are in
``sys.modules``), numpy computes as before; a library user's process, or one that imported numpy first, keeps
numpy's texts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli.test_lean_artist_docs import probe_json

ROOT = Path(__file__).resolve().parents[2]

PROBE = """\
import json, sys
{setup}
import numpy as np
from schedsim.clicore import NUMPY_DOC_MODULES
a = np.arange(12, dtype=np.float64).reshape(3, 4)
print(json.dumps({{"doc": np.ndarray.__doc__, "astype_doc": np.ndarray.astype.__doc__,
                   "stand_ins": [getattr(sys.modules[m], "__file__", None) is None for m in NUMPY_DOC_MODULES],
                   "sums": a.sum(axis=0).tolist(), "argsort": np.argsort(-a[1]).tolist(),
                   "scalar": repr(np.float32(1.5))}}))
"""


def _probe(setup: str) -> dict:
    return probe_json(PROBE, setup)


def test_command_process_skips_numpys_docstrings_library_keeps_them() -> None:
    lean = _probe("from schedsim.clicore import lean_numpy_docs\nlean_numpy_docs()")
    full = _probe("")
    assert lean["doc"] is None and lean["astype_doc"] is None and lean["stand_ins"] == [True, True]
    assert full["doc"].startswith("ndarray(shape") and "astype" in full["astype_doc"]
    assert full["stand_ins"] == [False, False]
    assert lean["sums"] == full["sums"] == [12.0, 15.0, 18.0, 21.0]
    assert lean["argsort"] == full["argsort"] == [3, 2, 1, 0]
    assert lean["scalar"] == full["scalar"] == "np.float32(1.5)"


def test_numpy_imported_first_keeps_its_docstrings() -> None:
    late = _probe("import numpy\nfrom schedsim.clicore import lean_numpy_docs\nlean_numpy_docs()")
    assert late["doc"].startswith("ndarray(shape") and late["stand_ins"] == [False, False]


def test_check_and_predict_run_without_numpys_docstrings(tmp_path: Path) -> None:
    code = ("import sys\nfrom schedsim.cli import main\n"
            "import atexit\natexit.register(lambda: print('DOC', sys.modules['numpy'].ndarray.__doc__ is None))\n"
            "sys.argv = ['schedsim', {!r}, 'schedules/allgather_mm8.yaml'{}]\nmain()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for cmd, extra in (("check", ""), ("predict", f", '--no-gantt', '--out', {str(tmp_path)!r}")):
        p = subprocess.run([sys.executable, "-c", code.format(cmd, extra)], cwd=ROOT, env=env, capture_output=True,
                           text=True)
        assert p.returncode == 0, p.stderr
        assert p.stdout.rstrip().endswith("DOC True"), p.stdout[-300:]
