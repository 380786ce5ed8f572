"""``topology.placement`` (rank r on GPU ``placement[r]``, node ``GPU // gpus_per_node``) checked against the
cluster it names (:class:`schedsim.hardware.profile.Topology`)."""

from __future__ import annotations

from collections import Counter

from schedsim.io import work_limit

__all__ = ["check_placement"]


def check_placement(v: list[int], g: int | None, nodes: int | None) -> list[int]:
    """``v`` itself where each rank has a GPU of its own among the cluster's: ``nodes`` x ``g`` (gpus_per_node)
    GPUs, or without ``nodes`` below ``SCHEDSIM_MAX_RANKS`` x ``g`` (each rank on a node of its own at most: the
    GPUs imply the nodes, whose NICs' links the shared-link model allocates).

    Raises
    ------
    ValueError
        More ranks than GPUs, a GPU past the cluster's, a GPU placed twice.
    """
    if g is not None and nodes is not None:
        world = g * nodes
        if len(v) > world:
            raise ValueError(f"{len(v)} ranks placed but nodes x gpus_per_node = {nodes} x {g} = {world} GPUs")
        if bad := [x for x in v if x >= world]:
            raise ValueError(f"GPU {bad[0]} is beyond the {world} GPUs of nodes x gpus_per_node")
    elif g is not None and v and max(v) >= (most := work_limit("SCHEDSIM_MAX_RANKS") * g):
        raise ValueError(f"GPU {max(v)} is beyond the {most} GPUs of SCHEDSIM_MAX_RANKS nodes x gpus_per_node "
                         "(each rank on a node of its own at most); place the ranks on GPUs below that, or raise "
                         "SCHEDSIM_MAX_RANKS")
    if len(set(v)) != len(v):  # the first GPU placed twice, in one pass (a count per GPU: minutes at 100k ranks)
        dup = next(x for x, n in Counter(v).items() if n > 1)
        raise ValueError(f"GPU {dup} is placed twice: each rank needs a GPU of its own")
    return v
