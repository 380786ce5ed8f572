"""The symmetric lowering of a ``training:`` block at prediction time: whether it is exact on a profile
(:func:`symmetric_exact`), and the record of the ranks it simulated on the timeline (:func:`mark_represented`).
The lowering itself is :func:`schedsim.lower.training.represented_ranks`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypedDict

if TYPE_CHECKING:
    from schedsim.hardware.profile import HardwareProfile
    from schedsim.lower.program import Program
    from schedsim.spec.model import ScheduleSpec

__all__ = ["HasMeta", "Represented", "layout_alike", "mark_represented", "symmetric_exact"]


class Represented(TypedDict, total=False):
    """``Timeline.meta["represented"]`` of a symmetric prediction (:func:`mark_represented`): the representative
    ``ranks`` simulated, the world size they stand for (``of``) and, added by :func:`schedsim.api.simulate_spec`,
    each rank's representative (``classes``)."""

    ranks: list[int]
    of: int
    classes: list[int]


class HasMeta(Protocol):
    """What :func:`mark_represented` writes to: a :class:`schedsim.sim.timeline.Timeline` (the layer above this
    module's) or anything with its ``meta`` dict."""

    meta: dict[str, Any]


def symmetric_exact(profile: HardwareProfile, gpu_model: str | None = None, spec: ScheduleSpec | None = None) -> bool:
    """Whether a symmetric lowering (:func:`schedsim.lower.training.represented_ranks`) times every rank as the full
    one on ``profile`` with ``gpu_model`` (default the profile's; ties between identical ranks included: that
    function's docstring): the ``waves`` model on its compiled loop (which takes a
    collective's links from its whole group; the Op-list loops refuse a symmetric Program), and either no
    transfer across nodes shares links (:func:`schedsim.network.share.shares_links`) or each GPU of a node has a
    NIC of its own and the fabric does not oversubscribe, so that no NIC or leaf uplink carries the transfers of
    two ranks of one class (which the full lowering would share max-min and the symmetric one would not). With
    ``spec`` (a schedule with a ``training:`` block), also that every rank's groups lie on the nodes and NICs
    as its representative's do (:func:`layout_alike`): a placement, or group sizes that do not divide
    ``gpus_per_node``, can put one rank's group inside a node and another's of the same class across two; and that
    the schedule has no hand-written ``ops`` beside its ``training:`` block (they may differ between the ranks of a
    class, and the symmetric lowering writes only the representatives' training ops)."""
    from schedsim.network.share import shares_links
    from schedsim.sim.loop import compiled_loop

    if (gpu_model or profile.gpu_model) != "waves" or compiled_loop() is None:
        return False
    if spec is not None and getattr(spec, "training", None) is not None and (
            getattr(spec, "ops", None) or not layout_alike(profile, spec)):
        return False
    if not shares_links(profile):
        return True
    topo = profile.topology
    fabric = getattr(topo, "fabric", None)
    if fabric is not None and fabric.oversubscription > 1:
        return False
    g = topo.gpus_per_node
    nics = topo.nics
    assert nics is not None  # shares_links: a topology with NICs
    per_node = getattr(nics, "per_node", None)
    m = nics.gpu_to_nic
    if m is not None:
        return len(set(m)) == len(m)
    return g is not None and per_node is not None and per_node >= g


def mark_represented(tl: HasMeta, prog: Program) -> bool:
    """Record in ``tl.meta["represented"]`` the ranks a symmetric lowering of ``prog`` simulated (``{"ranks",
    "of"}``: the representatives, the world size; :func:`schedsim.api.simulate_spec` adds ``classes``, the
    representative of every rank), which the metrics and the training report expand to the world; returns whether
    it is one."""
    if prog.represented:
        rep: Represented = {"ranks": list(prog.represented), "of": prog.world_size}
        tl.meta["represented"] = rep
    return bool(prog.represented)


def layout_alike(profile: HardwareProfile, spec: ScheduleSpec) -> bool:
    """Whether every rank of the ``training:`` block of ``spec`` sees its groups
    (:func:`schedsim.lower.training.rank_groups`) laid out on ``profile`` as the representative of its class
    (:func:`schedsim.lower.training.rank_classes`) sees its own: for each group, the same pattern of nodes
    (``topology.placement``, else rank // ``gpus_per_node``), fabric leaves and NICs among its members, in the
    group's order. The cost of a collective or a send/recv depends on that pattern only (ranks, nodes, NICs and
    leaves it spans: :class:`schedsim.network.GroupShape`), so ranks of one class then run alike."""
    from schedsim.lower.training import rank_classes, rank_groups
    from schedsim.network import NcclNetwork, rank_nodes
    from schedsim.spec.training_block import training_plan

    world = spec.world_size
    topo = profile.topology
    gpn = topo.gpus_per_node
    nodes = rank_nodes(profile, world)
    if nodes is None:
        nodes = [r // gpn for r in range(world)]
        nics = [0] * world
    else:
        net = NcclNetwork(profile)
        nics = [net.nic_of(net.gpu_of(r) % gpn) for r in range(world)]
    fab = topo.fabric
    # leaves count where crossing them costs: a switch latency or an oversubscribed uplink (NcclNetwork._lat_hop,
    # _nic_bw)
    per_leaf = fab.nodes_per_leaf if fab is not None and fab.kind == "leaf_spine" and fab.nodes_per_leaf and (
        fab.latency_us > 0 or fab.oversubscription > 1) else 0
    labels = [(nd // per_leaf if per_leaf else 0, nd, nic) for nd, nic in zip(nodes, nics, strict=True)]
    assert spec.training is not None  # the caller's (symmetric_exact: a schedule with a training: block)
    plan = training_plan(spec.training, world)
    seen: dict[tuple[int, ...], tuple[tuple[int, ...], ...]] = {}

    def pattern(group: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The group's leaves, nodes and NICs, each numbered in order of first appearance."""
        got = seen.get(group)
        if got is None:
            ids: list[dict[int, int]] = [{}, {}, {}]
            got = seen[group] = tuple(tuple(ids[k].setdefault(labels[r][k], len(ids[k])) for r in group)
                                      for k in range(3))
        return got

    classes = rank_classes(spec).tolist()
    rep_groups: dict[int, dict[str, tuple[int, ...]]] = {}
    for g, c in enumerate(classes):
        if g == c:
            continue
        mine = rank_groups(plan, g)
        theirs = rep_groups.get(c)
        if theirs is None:
            theirs = rep_groups[c] = rank_groups(plan, c)
        if any(pattern(mine[k]) != pattern(theirs[k]) for k in mine):
            return False
    return True
