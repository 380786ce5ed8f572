"""``plugins_off``: build schedsim's own pydantic models without pydantic's plugin discovery.

The first validator pydantic builds while plugins are not disabled looks for plugins: it reads the entry
points of every installed distribution (:func:`importlib.metadata.entry_points`), 4.5 ms with the 52 of the
development venv (2026-12-01), more in a bigger environment. schedsim's models have no use for plugins (typer
turns them off for its own validators in the same way). ``PYDANTIC_DISABLE_PLUGINS`` is read by
``pydantic.plugin._loader.get_plugins`` each time a validator is built and nothing of it is cached, so setting it
only while our models are built turns discovery off for them alone: other models in the same process, and
other programs, see the environment as it was.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["plugins_off"]


@contextmanager
def plugins_off() -> Iterator[None]:
    """``PYDANTIC_DISABLE_PLUGINS=1`` inside the block; the variable as it was (set or not) after it."""
    was = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "1"
    try:
        yield
    finally:
        if was is None:
            del os.environ["PYDANTIC_DISABLE_PLUGINS"]
        else:
            os.environ["PYDANTIC_DISABLE_PLUGINS"] = was
