"""Trace import and analysis: Nsight Systems SQLite and PyTorch profiler (Kineto) traces as Timelines.

* :func:`import_nsys` — ``nsys export --type sqlite`` files;
* :func:`import_kineto` — Kineto ``.json``/``.json.gz``, one per rank, merged on one time base;
* :mod:`schedsim.trace.analyze` — kernel-share and NCCL-volume tables, overlap, idle, critical path.

Nothing here imports torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ImportResult", "import_kineto", "import_nsys"]


def __getattr__(name: str) -> Any:  # lazy: the CLI registers `import`/`analyze` without loading the importers
    if name == "ImportResult":
        from schedsim.trace.common import ImportResult

        return ImportResult
    if name == "import_kineto":
        from schedsim.trace.kineto import import_kineto

        return import_kineto
    if name == "import_nsys":
        from schedsim.trace.nsys import import_nsys

        return import_nsys
    raise AttributeError(name)
