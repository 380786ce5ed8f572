"""The schedule as a networkx DAG of per-rank op instances, built from a lowered Program (``build.graph_of``).

``build_graph`` is imported on first use, so that importing :mod:`schedsim.graph.ops` (the simulator does) does
not import networkx. The static checks run on the Program's arrays (:mod:`schedsim.lower.checks`), when it is
lowered.
"""

from typing import Any

from schedsim.graph.ops import Op, format_op_id, parse_op_id

__all__ = ["Op", "build_graph", "format_op_id", "parse_op_id"]


def __getattr__(name: str) -> Any:
    if name == "build_graph":
        from schedsim.graph.build import build_graph

        return build_graph
    raise AttributeError(f"module 'schedsim.graph' has no attribute {name!r}")
