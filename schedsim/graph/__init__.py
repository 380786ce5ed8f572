"""The schedule as a networkx DAG of per-rank op instances, and its static checks.

``build_graph`` and ``check_graph`` are imported on first use, so that importing :mod:`schedsim.graph.ops`
(the simulator does) does not import networkx.
"""

from typing import Any

from schedsim.graph.ops import Op, format_op_id, parse_op_id

__all__ = ["Op", "build_graph", "check_graph", "format_op_id", "parse_op_id"]


def __getattr__(name: str) -> Any:
    if name == "build_graph":
        from schedsim.graph.build import build_graph

        return build_graph
    if name == "check_graph":
        from schedsim.graph.checks import check_graph

        return check_graph
    raise AttributeError(f"module 'schedsim.graph' has no attribute {name!r}")
