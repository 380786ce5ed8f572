"""schedsim: predict and execute comm/compute schedules of GPU clusters.

Data flows one way: YAML → :func:`load_schedule` (pydantic spec) → :func:`lower` (the checked Program) →
:func:`simulate` (with a hardware profile) → :class:`Timeline` → reports. The executor
(``torchrun -m schedsim execute``) runs the same Program as a networkx DAG (:func:`build_graph`). This package
never imports torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load_schedule", "load_text", "lower", "build_graph", "simulate", "load_profile", "Timeline", "compute_metrics", "__version__"]


def __getattr__(name: str) -> Any:  # lazy: keep `import schedsim` cheap
    if name == "load_schedule":
        from schedsim.spec.loader import load_schedule

        return load_schedule
    if name == "load_text":
        from schedsim.spec.loader import load_text

        return load_text
    if name == "lower":
        from schedsim.lower import lower

        return lower
    if name == "build_graph":
        from schedsim.graph.build import build_graph

        return build_graph
    if name == "simulate":
        from schedsim.sim.engine import simulate

        return simulate
    if name == "load_profile":
        from schedsim.hardware.profile import load_profile

        return load_profile
    if name == "Timeline":
        from schedsim.sim.timeline import Timeline

        return Timeline
    if name == "compute_metrics":
        from schedsim.sim.metrics import compute_metrics

        return compute_metrics
    raise AttributeError(name)
