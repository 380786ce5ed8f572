"""``plugins_off``: build schedsim's own pydantic models without pydantic's plugin discovery.

The first validator pydantic builds while plugins are not disabled looks for plugins: it reads the entry
points of every installed distribution (:func:`importlib.metadata.entry_points`), 4.5 ms with the 52 of the
development venv, more in a bigger environment. schedsim's models have no use for plugins (typer
turns them off for its own validators in the same way). ``PYDANTIC_DISABLE_PLUGINS`` is read by
``pydantic.plugin._loader.get_plugins`` each time a validator is built and nothing of it is cached, so setting it
only while our models are built turns discovery off for them alone: other models in the same process, and
other programs, see the environment as it was.

Even with discovery off, building a validator imports ``pydantic.plugin._loader``, and that module imports
:mod:`importlib.metadata` (with :mod:`email`, :mod:`zipfile`, :mod:`csv`, ...): 5% of the instructions of a
cold ``check`` (callgrind), for a scan nobody asks for. :func:`defer_plugin_discovery` puts a
stand-in under that name that answers "no plugins" while they are disabled and hands over to the real module
the first time a validator is built with plugins on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Annotated, Any, Union, get_args, get_origin

__all__ = ["bool_for_number", "defer_plugin_discovery", "holds_bool", "no_bool_numbers", "plugins_off",
           "signature_once"]

_LOADER = "pydantic.plugin._loader"


def _get_plugins() -> Iterable[Any]:
    """``pydantic.plugin._loader.get_plugins`` of the stand-in: no plugins while ``PYDANTIC_DISABLE_PLUGINS``
    disables them all (the values pydantic 2 takes for that), else the real loader's answer, the real module
    then replacing the stand-in for good."""
    if os.getenv("PYDANTIC_DISABLE_PLUGINS") in ("__all__", "1", "true"):
        return ()
    import importlib

    if sys.modules.get(_LOADER) is _STAND_IN:
        del sys.modules[_LOADER]
    return importlib.import_module(_LOADER).get_plugins()


_STAND_IN = ModuleType(_LOADER, "schedsim's stand-in for pydantic's plugin loader (see schedsim._pydantic).")
_STAND_IN.get_plugins = _get_plugins  # type: ignore[attr-defined]


def defer_plugin_discovery() -> None:
    """Let pydantic build validators with plugins disabled without importing its plugin loader: the stand-in
    described in the module's docstring goes in ``sys.modules``, unless the real loader is already there.
    pydantic imports the loader by name each time it builds a validator
    (``pydantic.plugin._schema_validator.create_schema_validator``), so it finds the stand-in; with plugins
    enabled the result is the real loader's."""
    sys.modules.setdefault(_LOADER, _STAND_IN)


@contextmanager
def plugins_off() -> Iterator[None]:
    """``PYDANTIC_DISABLE_PLUGINS=1`` inside the block; the variable as it was (set or not) after it.
    Also :func:`defer_plugin_discovery`."""
    defer_plugin_discovery()
    was = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "1"
    try:
        yield
    finally:
        if was is None:
            del os.environ["PYDANTIC_DISABLE_PLUGINS"]
        else:
            os.environ["PYDANTIC_DISABLE_PLUGINS"] = was


def bool_for_number(v: object, ann: object) -> bool:
    """True when ``v`` holds a boolean where ``ann`` wants a number: the value itself, or any value of a dict or
    item of a list typed as numbers (``peak_tflops: {bf16: true}``). A type that takes a boolean keeps it."""
    if get_origin(ann) is Annotated:
        return bool_for_number(v, get_args(ann)[0])
    if ann is bool:
        return False
    if ann in (int, float):
        return isinstance(v, bool)
    origin, args = get_origin(ann), get_args(ann)
    if origin is Union or type(ann).__name__ == "UnionType":
        return bool not in args and any(bool_for_number(v, a) for a in args)
    if origin is dict and isinstance(v, dict) and len(args) == 2:
        return any(bool_for_number(x, args[1]) for x in v.values())
    if origin in (list, tuple) and isinstance(v, (list, tuple)) and args:
        return any(bool_for_number(x, args[0]) for x in v)
    return False


def holds_bool(v: object) -> bool:
    """Whether ``v`` is a boolean or a dict, list or tuple holding one at any depth: where it does not,
    :func:`bool_for_number` is false whatever the annotation, and need not walk ``v`` with it (a profile's GEMM
    tables: ~2,000 calls, 2% of a cold ``predict``). The types of a collection's items are gathered at once
    (``set(map(type, ...))``); only items that are collections are looked into."""
    if v is True or v is False:
        return True
    if isinstance(v, dict):
        v = v.values()
    elif not isinstance(v, (list, tuple)):
        return False
    types = set(map(type, v))  # type: ignore[call-overload]
    if bool in types:
        return True
    if any(issubclass(t, _COLLECTIONS) for t in types):
        return any(holds_bool(x) for x in v if isinstance(x, _COLLECTIONS))  # type: ignore[attr-defined]
    return False


_COLLECTIONS = (dict, list, tuple)


def no_bool_numbers(fields: dict[str, Any], data: Any) -> Any:
    """A model's ``mode="before"`` check: ``data`` (a mapping of field name to raw value) unchanged, or ValueError
    naming the first field given a boolean where its annotation (``fields[name].annotation``, pydantic's
    ``model_fields``) wants a number (:func:`bool_for_number`)."""
    if isinstance(data, dict):
        for key, v in data.items():
            if not holds_bool(v):  # bool_for_number is false for a value holding no boolean: not asked
                continue
            f = fields.get(key) if isinstance(key, str) else None
            if f is not None and bool_for_number(v, f.annotation):
                raise ValueError(f"{key}: a number, not a boolean (YAML true/false): {v!r}")
    return data


def signature_once(fn: Any) -> Any:
    """``fn`` with its :func:`inspect.signature` worked out now and kept as ``__signature__`` (which
    ``inspect.signature`` returns as it is, PEP 362): pydantic inspects a validator's signature once per field it
    applies to, and a ``field_validator("*")`` applies to every field of every model (the profile's models: 136
    inspections)."""
    import inspect

    fn.__signature__ = inspect.signature(fn)
    return fn
