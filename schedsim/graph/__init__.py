"""The schedule as a networkx DAG of per-rank op instances, and its static checks."""

from schedsim.graph.build import build_graph
from schedsim.graph.checks import check_graph
from schedsim.graph.ops import Op, format_op_id, parse_op_id

__all__ = ["Op", "build_graph", "check_graph", "format_op_id", "parse_op_id"]
