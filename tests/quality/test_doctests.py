"""Every docstring example of schedsim (and of executor, where torch is installed) runs as written."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import executor
import schedsim

FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def _modules(pkg) -> list[str]:
    names = [pkg.__name__]
    names += [m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=pkg.__name__ + ".")]
    return sorted(n for n in names if not n.endswith("__main__"))


@pytest.mark.parametrize("name", _modules(schedsim) + _modules(executor))
def test_docstring_examples(name):
    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as e:  # executor's modules need the optional torch
        if name.startswith("executor.") and e.name and e.name.split(".")[0] in {"torch", "nvtx"}:
            pytest.skip(f"{name} needs {e.name}")
        raise
    result = doctest.testmod(mod, optionflags=FLAGS, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (output above)"


def test_the_examples_are_found():
    """A control: the walk reaches nested packages and counts their examples."""
    from schedsim import errors

    assert "schedsim.pipeline.schedules" in _modules(schedsim)
    assert doctest.testmod(errors, optionflags=FLAGS).attempted >= 1
