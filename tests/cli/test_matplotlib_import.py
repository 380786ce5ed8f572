"""The CLI's matplotlib import without the artists' ``set`` docstrings (:mod:`schedsim._matplotlib`): ``set`` works
as before, the charts are the same bytes, and a process that did not ask keeps matplotlib's docstrings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Draws a small Gantt (PNG and SVG: boxes, text, ticks, legend) and prints each file's SHA-256, then what ``set``
#: of a Line2D, and of an Artist subclass defined after the import, does.
_DRAW = """
import hashlib, sys, tempfile
{setup}
import matplotlib.artist, matplotlib.lines
from matplotlib.lines import Line2D
from schedsim.report.gantt import write_gantt
from schedsim.sim.timeline import Span, Timeline
spans = [Span(f"k{{i}}@r{{r}}", f"k{{i}}", r, "compute" if i % 2 else "comm",
              "matmul" if i % 2 else "all_reduce", "compute" if i % 2 else "comm", i * 1e-3, (i + 0.8) * 1e-3)
         for r in range(3) for i in range(6)]
tl = Timeline("g", "predict", 3, spans=spans)
d = tempfile.mkdtemp()
for p in write_gantt(d + "/gantt", [("predict", tl)], title="t", formats=("png", "svg")):
    print(p.name, hashlib.sha256(p.read_bytes()).hexdigest())
line = Line2D([0, 1], [0, 1])
line.set(linewidth=3, color="red")
print("set", line.get_linewidth(), line.get_color())
try:
    line.set(no_such_property=1)
except AttributeError as e:
    print("refused", type(e).__name__)
class Mine(matplotlib.artist.Artist):
    def set_weight(self, w):
        self.w = w
m = Mine()
m.set(weight=7)
print("subclass", m.w, Mine.set is not matplotlib.artist.Artist.set)
print("doc", "linewidth" in (Line2D.set.__doc__ or ""))
"""


def _run(setup: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", _DRAW.format(setup=setup)], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True).stdout.splitlines()


def test_deferred_docstrings_draw_the_same_bytes_and_set_works() -> None:
    plain = _run("")
    lean = _run("from schedsim._matplotlib import defer_artist_docstrings\ndefer_artist_docstrings()\n"
                "assert 'matplotlib.artist' not in sys.modules")
    assert plain[:2] == lean[:2] and [n.split()[0] for n in plain[:2]] == ["gantt.png", "gantt.svg"]
    for out in (plain, lean):
        assert out[2:5] == ["set 3.0 red", "refused AttributeError", "subclass 7 True"]
    assert plain[5] == "doc True" and lean[5] == "doc False"  # help() text only where the process did not ask


def test_cli_process_defers_them_and_the_finder_leaves() -> None:
    code = ("import sys\nfrom schedsim.cli import _run_app\nimport schedsim.cli\nschedsim.cli._app = lambda: None\n"
            "_run_app()\nfrom schedsim._matplotlib import _Finder\nimport matplotlib.lines\n"
            "doc = matplotlib.lines.Line2D.set.__doc__ or ''\n"
            "print('linewidth' not in doc, any(isinstance(f, _Finder) for f in sys.meta_path))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "False"]
