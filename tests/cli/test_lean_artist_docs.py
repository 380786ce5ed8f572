"""``clicore.lean_artist_docs``: in a command's process matplotlib's ``kwdoc`` property tables are not built into
its artists' docstrings; the ``set()`` signatures are, and a process that does not call it (a library user's)
keeps matplotlib's tables. The charts drawn are the same pixels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]

PROBE = """\
import inspect, json, sys
{setup}
import matplotlib.figure, matplotlib.lines
from matplotlib.artist import kwdoc
print(json.dumps({{"doc": matplotlib.lines.Line2D.set.__doc__, "kwdoc": kwdoc(matplotlib.lines.Line2D),
                   "params": list(inspect.signature(matplotlib.lines.Line2D.set).parameters),
                   "finders": [type(f).__name__ for f in sys.meta_path]}}))
"""


def probe_json(template: str, setup: str) -> dict:
    """The JSON a fresh interpreter prints running ``template`` with ``setup`` in its ``{setup}`` slot (the checkout
    first on its path): a command's process stand-in, for the lean-docstring tests."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", template.format(setup=setup)], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def _probe(setup: str) -> dict:
    return probe_json(PROBE, setup)


def test_command_process_skips_property_tables_library_keeps_them() -> None:
    lean = _probe("from schedsim.clicore import lean_artist_docs, LEAN_KWDOC\nlean_artist_docs()")
    full = _probe("")
    from schedsim.clicore import LEAN_KWDOC

    assert LEAN_KWDOC in lean["doc"] and lean["kwdoc"] == LEAN_KWDOC
    assert "zorder: float" in full["doc"] and LEAN_KWDOC not in full["doc"]  # matplotlib's own table
    assert lean["params"] == full["params"] and "linewidth" in lean["params"]  # set()'s signature as before
    assert "LeanDocs" not in lean["finders"]  # the finder leaves sys.meta_path once it has seen the module


def test_after_matplotlib_is_imported_too() -> None:
    late = _probe("import matplotlib.artist\nfrom schedsim.clicore import lean_artist_docs, LEAN_KWDOC\n"
                  "lean_artist_docs()")
    from schedsim.clicore import LEAN_KWDOC

    assert late["kwdoc"] == LEAN_KWDOC


CHARTS = """\
import sys
if sys.argv[2] == "lean":
    from schedsim.clicore import lean_artist_docs
    lean_artist_docs()
from schedsim.api import load, predict
from schedsim.report.charts import write_charts
tl = predict(load("schedules/megatron_gpt_pp4.yaml")).timeline
print(sorted(p.name for p in write_charts(sys.argv[1], tl, tl.schedule)))
"""


def test_charts_the_same_pixels(tmp_path: Path) -> None:
    """The charts of one timeline drawn in a process with lean docs and in one without: the same pixels."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    names = [subprocess.run([sys.executable, "-c", CHARTS, str(tmp_path / mode), mode], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=True).stdout for mode in ("lean", "full")]
    assert names[0] == names[1] and "pipeline.png" in names[0]
    pngs = sorted((tmp_path / "full").glob("*.png"))
    assert len(pngs) >= 3
    for p in pngs:
        a = np.asarray(Image.open(p))
        b = np.asarray(Image.open(tmp_path / "lean" / p.name))
        assert a.shape == b.shape and (a == b).all(), p.name


ZIPPED = """\
import json, sys, zipfile
z = sys.argv[1]
with zipfile.ZipFile(z, "w") as f:  # a stand-in matplotlib: zipimport's one loader serves every module of the zip
    f.writestr("matplotlib/__init__.py", "")
    f.writestr("matplotlib/artist.py", "def kwdoc(a):\\n    return 'full'\\n")
    f.writestr("matplotlib/lines.py", "from matplotlib.artist import kwdoc as table\\n")
sys.path.insert(0, z)
from schedsim.clicore import lean_artist_docs, LEAN_KWDOC
lean_artist_docs()
import matplotlib.artist, matplotlib.lines
print(json.dumps({"lean": matplotlib.artist.kwdoc(None) == LEAN_KWDOC, "lines": hasattr(matplotlib.lines, "kwdoc"),
                  "loader": "exec_module" in vars(matplotlib.artist.__spec__.loader)}))
"""


def test_a_loader_that_serves_other_modules_is_left_as_it_was(tmp_path: Path) -> None:
    """matplotlib.artist loaded by a loader shared with other modules (zipimport's, a frozen application's): only
    matplotlib.artist gets the lean ``kwdoc``, and the loader is given back its own ``exec_module``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", ZIPPED, str(tmp_path / "mpl.zip")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"lean": True, "lines": False, "loader": False}


SLOTTED = """\
import importlib.machinery, json, sys
class Loader:  # takes no attributes: its exec_module cannot be wrapped
    __slots__ = ()
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        module.kwdoc = lambda a: "full"
class Finder:
    def find_spec(self, name, path, target=None):
        if name in ("matplotlib", "matplotlib.artist"):
            return importlib.machinery.ModuleSpec(name, Loader(), is_package=name == "matplotlib")
        return None
sys.meta_path.insert(0, Finder())
from schedsim.clicore import lean_artist_docs
lean_artist_docs()
import matplotlib.artist
print(json.dumps(matplotlib.artist.kwdoc(None)))
"""


def test_a_loader_that_takes_no_attributes_imports_as_it_was() -> None:
    """A loader whose ``exec_module`` cannot be wrapped (``__slots__``): matplotlib.artist still imports, with its
    own ``kwdoc`` (before: the AttributeError of the assignment failed the import)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    got = subprocess.run([sys.executable, "-c", SLOTTED], cwd=ROOT, env=env, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-2000:]
    assert json.loads(got.stdout) == "full"


SIGNATURES = """\
import inspect, json, sys
if sys.argv[1] == "lean":
    from schedsim.clicore import lean_artist_docs
    lean_artist_docs()
import matplotlib.figure, matplotlib.table, matplotlib.quiver
import mpl_toolkits.mplot3d.axes3d
from matplotlib.artist import Artist
def walk(c):
    for s in c.__subclasses__():
        yield s
        yield from walk(s)
out = {}
for c in sorted(set(walk(Artist)), key=lambda c: c.__module__ + "." + c.__qualname__):
    fn = c.set
    waiting = hasattr(fn, "__wrapped__")  # lean: the signature not built yet
    accessors = {k: v for k, v in vars(c).items() if k.startswith(("set_", "get_"))}
    sig = str(inspect.signature(fn))
    same = accessors == {k: v for k, v in vars(c).items() if k.startswith(("set_", "get_"))} and c.set is fn
    out[c.__module__ + "." + c.__qualname__] = [sig, waiting, hasattr(fn, "__wrapped__"), "__signature__" in vars(fn),
                                                fn._autogenerated_signature, fn.__name__, fn.__qualname__, same]
print(json.dumps(out))
"""


def test_every_artist_set_signature_is_matplotlibs() -> None:
    """Every Artist subclass's ``set()`` (matplotlib's, mplot3d's) has the signature matplotlib builds as the class is
    defined, read after the class is built: also Axes3D's, whose ``set_xlim3d`` (a setter when the class body ran)
    ``define_aliases`` has replaced by an alias since (built from the class as it is now, the signature would lack
    ``xlim3d``). The read leaves ``set`` as matplotlib makes it (its own ``__signature__``, no ``__wrapped__``) and
    the class's entries as they were."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    lean, full = (json.loads(subprocess.run([sys.executable, "-c", SIGNATURES, mode], cwd=ROOT, env=env,
                                            capture_output=True, text=True, check=True).stdout)
                  for mode in ("lean", "full"))
    assert list(lean) == list(full) and len(full) > 100
    assert sum(v[1] for v in lean.values()) > 90  # built on the first read, not as the class was defined
    assert not any(v[1] for v in full.values())
    for name, (sig, _waiting, *rest) in lean.items():
        assert sig == full[name][0], name
        assert rest == [False, True, True, "set", full[name][6], True] and rest[4] == full[name][6], name
    assert "xlim3d=" in lean["mpl_toolkits.mplot3d.axes3d.Axes3D"][0]
