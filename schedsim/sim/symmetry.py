"""The symmetric lowering of a ``training:`` block at prediction time: whether it is exact on a profile
(:func:`symmetric_exact`), and the record of the ranks it simulated on the timeline (:func:`mark_represented`).
The lowering itself is :func:`schedsim.lower.training.represented_ranks`."""

from __future__ import annotations

from typing import Any

__all__ = ["mark_represented", "symmetric_exact"]


def symmetric_exact(profile: Any, gpu_model: str | None = None) -> bool:
    """Whether a symmetric lowering (:func:`schedsim.lower.training.represented_ranks`) times every rank as the full
    one on ``profile`` with ``gpu_model`` (default the profile's), but for the full simulation's ties between
    identical ranks (that function's docstring): the ``waves`` model on its compiled loop (which takes a
    collective's links from its whole group; the Op-list loops refuse a symmetric Program), and either no
    transfer across nodes shares links (:func:`schedsim.network.share.shares_links`) or each GPU of a node has a
    NIC of its own and the fabric does not oversubscribe, so that no NIC or leaf uplink carries the transfers of
    two ranks of one class (which the full lowering would share max-min and the symmetric one would not)."""
    from schedsim.network.share import shares_links
    from schedsim.sim.loop import compiled_loop

    if (gpu_model or profile.gpu_model) != "waves" or compiled_loop() is None:
        return False
    if not shares_links(profile):
        return True
    topo = profile.topology
    fabric = getattr(topo, "fabric", None)
    if fabric is not None and fabric.oversubscription > 1:
        return False
    g = topo.gpus_per_node
    nics = topo.nics
    per_node = getattr(nics, "per_node", None)
    m = nics.gpu_to_nic
    if m is not None:
        return len(set(m)) == len(m)
    return g is not None and per_node is not None and per_node >= g


def mark_represented(tl: Any, prog: Any) -> bool:
    """Record in ``tl.meta["represented"]`` the ranks a symmetric lowering of ``prog`` simulated (``{"ranks",
    "of"}``: the representatives, the world size), which the metrics and the training report expand to the world;
    returns whether it is one."""
    if prog.represented:
        tl.meta["represented"] = {"ranks": list(prog.represented), "of": prog.world_size}
    return bool(prog.represented)
