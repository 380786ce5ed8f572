"""Trace import and analysis: Nsight Systems SQLite and PyTorch profiler (Kineto) traces as Timelines.

* :func:`import_nsys` — ``nsys export --type sqlite`` files;
* :func:`import_kineto` — Kineto ``.json``/``.json.gz``, one per rank, merged on one time base;
* :mod:`schedsim.trace.analyze` — seed 004's kernel-share and NCCL-volume tables, overlap, idle, critical path.

Nothing here imports torch.
"""

from schedsim.trace.common import ImportResult
from schedsim.trace.kineto import import_kineto
from schedsim.trace.nsys import import_nsys

__all__ = ["ImportResult", "import_kineto", "import_nsys"]
