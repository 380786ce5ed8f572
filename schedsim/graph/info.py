"""What a schedule graph knows beyond its nodes and edges, as typed records: :class:`GraphInfo` and the
pipeline block's :class:`PipelineInfo`.

:func:`schedsim.graph.build.graph_of` makes one :class:`GraphInfo` from the lowered program and writes it
into ``G.graph`` (networkx's graph attribute dict) with :meth:`GraphInfo.graph_attrs`, as plain data (the
pipeline block in its JSON form), so networkx users and writers see plain keys; :meth:`GraphInfo.of` reads
them back. The two are inverses (``GraphInfo.of(G).graph_attrs() == G.graph`` for a built graph), and
this module is the one place that names the keys. ``of`` copies nothing but the pipeline block: the
mappings and lists are the graph's own (a 100k-rank schedule has 100k-member collectives), so treat them
as read-only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schedsim.made import MadeOnRead
from schedsim.results import from_dict, to_dict

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = ["ActionTexts", "GraphInfo", "PipelineInfo", "StaticMemory"]


class ActionTexts(MadeOnRead, Mapping[int, list[str]]):
    """Per pipeline rank its compute actions as text (``0F0``, ``1B2``, ...), made on first read: the
    interleaved 1F1B of pp=32, m=512, v=4 lists 136k actions, which a timeline file writes from the ranks'
    lines (:meth:`json_bytes`) without one string each. Equal to, and pickled and copied as, the plain dict.

    Parameters
    ----------
    make : callable
        Returns the dict (rank -> list of action texts); called once, on first read.
    lines : dict[int, str], optional
        Per rank (the dict's keys, in its order) its steps joined by single spaces, each an action of digits
        and F/I/B/W or an idle step (``_``, ``.``, left out of the texts): then :meth:`json_bytes` joins the
        JSON from them.
    """

    __slots__ = ("_make", "_lines", "_made")
    _PLAIN, _COMPARES = dict, Mapping

    def __init__(self, make: Callable[[], dict[int, list[str]]], lines: dict[int, str] | None = None) -> None:
        self._make, self._lines = make, lines
        self._made: dict[int, list[str]] | None = None

    def made(self) -> dict[int, list[str]]:
        """The plain dict (made once)."""
        if self._made is None:
            self._made = self._make()
        return self._made

    def json_bytes(self) -> bytes:
        """The dict's compact JSON (``{"0":["0F0",...],...}``, what orjson writes of it): joined from the lines
        when they were given and the dict is not made (no string per action), else written from the dict."""
        if self._made is not None or self._lines is None:
            from schedsim.io import dumps_json

            return dumps_json(self.made())
        out = []
        for r, line in self._lines.items():
            if "_" in line or "." in line:
                line = (" " + line).replace(" _", "").replace(" .", "")[1:]
            texts = '"' + line.replace(" ", '","') + '"' if line else ""
            out.append(f'"{r}":[{texts}]')
        return ("{" + ",".join(out) + "}").encode()


@dataclass(frozen=True)
class StaticMemory:
    """Parameters and static bytes (weights, gradients, optimizer state) per pipeline rank, as
    :func:`schedsim.pipeline.memory.static_memory` computes them (its docstring gives the model and source).

    Attributes
    ----------
    params : dict[int, int]
        Rank → parameter count.
    bytes : dict[int, int]
        Rank → ``params × bytes_per_param``, bytes.
    breakdown : dict[int, dict[str, int]]
        Rank → parameter counts of ``layers``, ``embedding`` and ``lm_head``.
    bytes_per_param : int
        Static bytes per parameter.
    source : str
        Where ``bytes_per_param`` comes from.
    """

    params: dict[int, int]
    bytes: dict[int, int]
    breakdown: dict[int, dict[str, int]]
    bytes_per_param: int
    source: str


@dataclass(frozen=True)
class PipelineInfo:
    """What a ``pipeline:`` block lowered to: the Program's ``pipeline``, ``G.graph["pipeline"]`` (JSON
    form), a predicted timeline's ``meta["pipeline"]`` (JSON form; :attr:`schedsim.sim.timeline.Timeline.pipeline`
    reads it) and :attr:`schedsim.sim.pipeline_metrics.PipelineMetrics.info`.

    Made by :func:`schedsim.lower.pipeline_plan.block_info`. A timeline another tool wrote may carry only
    some keys; the missing ones read as the defaults (``p``, ``m``, ``num_stages`` 0 for unknown).

    Attributes
    ----------
    schedule : str
        The schedule's canonical name (``1f1b``, ``interleaved_1f1b``, ``zbv``, ``custom``, ...).
    p, m, v : int
        Pipeline ranks, microbatches, virtual stages (chunks) per rank.
    num_stages : int
        Stages p·v.
    dp : int
        Pipeline replicas (``data_parallel``).
    static_memory : StaticMemory or None
        Parameters and static bytes per rank (:func:`schedsim.pipeline.memory.static_memory`), with a
        ``transformer:`` description only.
    stage_to_rank : dict[int, int]
        Stage → pipeline rank.
    p2p : str
        How the p2p is issued (``batched``, ``overlapped``, ``lone``, ...; empty for a custom order's own).
    activation_bytes : int
        Bytes of one p2p message (activation or its gradient).
    activation_memory_bytes : int
        Bytes one stage chunk stores per microbatch until its backward ends; where the stages differ
        (``stage_activation_memory_bytes``), the largest stage's (an old reader's upper bound).
    stage_activation_memory_bytes : dict[int, int]
        Stage → the bytes that stage's chunk stores per microbatch, where stages hold unequal layer counts (a
        ``training:`` block's uneven first/last stages, ``allow_padding_num_layers``); empty when every stage
        stores ``activation_memory_bytes``, and then left out of the JSON form. Read through
        :meth:`activation_memory_of`.
    order : dict[int, list[str]]
        Per pipeline rank, its compute actions as text (``0F0``, ``1B2``, ...); the lowering gives an
        :class:`ActionTexts` (made on first read, equal to the dict).
    rank_stride : int
        Global rank of pipeline rank r of the first replica: ``r · rank_stride`` (1: replicas of p consecutive
        ranks, as a ``pipeline:`` block places them; tp·cp·dp for a ``training:`` block, Megatron's order).
        Left out of the JSON form when 1.
    recompute_group_layers, recompute_layer_bytes : int
        Full recomputation of a ``training:`` block (``recompute_granularity: full``): the layers of one
        checkpointed group (``recompute_num_layers`` under ``recompute_method: uniform``, 1 under ``block``) and the
        bytes one layer's forward holds per microbatch when re-run (all its activations,
        :func:`schedsim.spec.training_block.act_bytes_per_layer` without recomputation). The backward re-runs a
        group's forward and its activations live until the group's backward ends (Megatron-LM
        ``tensor_parallel/random.py`` ``CheckpointFunction.backward``: the forward again, then
        ``torch.autograd.backward`` through it): :func:`schedsim.sim.pipeline_metrics.recompute_events`. 0 (and
        left out of the JSON form) without full recomputation.

    Examples
    --------
    >>> info = PipelineInfo.from_dict({"schedule": "1f1b", "p": 2, "m": 4, "stage_to_rank": {"1": 1}})
    >>> info.stage_to_rank, info.v, PipelineInfo.from_dict(info.to_dict()) == info
    ({1: 1}, 1, True)
    """

    schedule: str = ""
    p: int = 0
    m: int = 0
    v: int = 1
    num_stages: int = 0
    dp: int = 1
    static_memory: StaticMemory | None = None
    stage_to_rank: dict[int, int] = field(default_factory=dict)
    p2p: str = ""
    activation_bytes: int = 0
    activation_memory_bytes: int = 0
    order: dict[int, list[str]] = field(default_factory=dict)
    rank_stride: int = 1
    stage_activation_memory_bytes: dict[int, int] = field(default_factory=dict)
    recompute_group_layers: int = 0
    recompute_layer_bytes: int = 0

    def activation_memory_of(self, stages: ArrayLike) -> NDArray[np.float64]:
        """Bytes a chunk of each of ``stages`` (an int array of shape (n,)) stores per microbatch: its
        ``stage_activation_memory_bytes`` figure, else ``activation_memory_bytes`` (float64 array, shape (n,))."""
        import numpy as np

        unit = float(self.activation_memory_bytes)
        per = self.stage_activation_memory_bytes
        st = np.asarray(stages, np.int64)
        if not per:
            return np.full(st.shape, unit)
        table = np.array([float(per.get(k, unit)) for k in range(max(per) + 1)])
        inside = (st >= 0) & (st < len(table))
        return np.where(inside, table[np.clip(st, 0, len(table) - 1)], unit)

    def first_replica(self, rank: int) -> bool:
        """Whether global ``rank`` runs a pipeline rank of the first replica (see ``rank_stride``)."""
        return rank % self.rank_stride == 0 and rank // self.rank_stride < self.p

    def to_dict(self, *, lazy_order: bool = False) -> dict[str, Any]:
        """The JSON form (keys in field order; ``static_memory`` null without a transformer). ``order`` is a
        plain dict unless ``lazy_order``, which keeps an :class:`ActionTexts` unmade (a timeline's meta: its
        writer joins the JSON from the lines)."""
        d: dict[str, Any] = to_dict(self)
        if self.rank_stride == 1:
            d.pop("rank_stride", None)
        if not self.stage_activation_memory_bytes:  # even stages: the JSON form as before the field
            d.pop("stage_activation_memory_bytes", None)
        for k in ("recompute_group_layers", "recompute_layer_bytes"):  # no full recompute: the form as before
            if not d.get(k):
                d.pop(k, None)
        if isinstance(self.order, ActionTexts) and not lazy_order:
            d["order"] = {r: list(x) for r, x in self.order.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PipelineInfo:
        """Read :meth:`to_dict`'s form (rank and stage keys may be JSON strings)."""
        return from_dict(cls, d)

    @classmethod
    def of_meta(cls, meta: Mapping[str, Any] | None) -> PipelineInfo | None:
        """The ``pipeline`` entry of a timeline's ``meta`` (or of ``G.graph``), typed; None when absent or empty."""
        raw = (meta or {}).get("pipeline")
        if not raw:
            return None
        return raw if isinstance(raw, PipelineInfo) else cls.from_dict(raw)


@dataclass(frozen=True)
class GraphInfo:
    """The graph-level facts of a schedule DAG.

    Attributes
    ----------
    name : str
        The schedule's name.
    world_size : int
        Ranks.
    launch : str
        ``"eager"`` or ``"cuda_graph"``.
    collectives : Mapping[str, Sequence[str]]
        Rendezvous key (collective name, and group when given) → the op ids of its members, one per rank.
    p2p : Sequence[tuple[str, str]]
        Matched (send op id, recv op id) pairs.
    warnings : Sequence[str]
        Warnings of the build (e.g. send/recv orders that may hang).
    issue_order : Mapping[int, Sequence[Sequence[str]]] or None
        Per rank, the NCCL launches in issue order (a launch is one op, or the ops of one p2p batch); set by
        :func:`schedsim.graph.build.info_of` (:func:`schedsim.lower.checks.launches`) for a checked Program.
    pipeline : PipelineInfo or None
        The pipeline block's description, for pipeline schedules.
    max_connections : int or None
        ``CUDA_DEVICE_MAX_CONNECTIONS`` from the schedule's ``env``.

    Examples
    --------
    >>> import networkx as nx
    >>> G = nx.DiGraph(name="x", world_size=2, launch="eager")
    >>> G.graph.update(collectives={"ar": ["ar@r0", "ar@r1"]}, p2p=[], warnings=[])
    >>> info = GraphInfo.of(G)
    >>> info.world_size, len(info.collectives), info.pipeline is None
    (2, 1, True)
    """

    name: str
    world_size: int
    launch: str
    collectives: Mapping[str, Sequence[str]]
    p2p: Sequence[tuple[str, str]]
    warnings: Sequence[str]
    issue_order: Mapping[int, Sequence[Sequence[str]]] | None = None
    pipeline: PipelineInfo | None = None
    max_connections: int | None = None

    @classmethod
    def of(cls, G: Any) -> GraphInfo:
        """Read ``G.graph`` (a graph of :func:`~schedsim.graph.build.build_graph`; keys it lacks read as
        empty or None)."""
        g = G.graph
        mc = g.get("max_connections")
        return cls(name=str(g.get("name", "")), world_size=int(g.get("world_size", 1)),
                   launch=str(g.get("launch", "eager")), collectives=g.get("collectives") or {},
                   p2p=g.get("p2p") or [], warnings=g.get("warnings") or [], issue_order=g.get("issue_order"),
                   pipeline=PipelineInfo.of_meta(g), max_connections=None if mc is None else int(mc))

    def graph_attrs(self) -> dict[str, Any]:
        """The ``G.graph`` entries of this record, as plain data: ``name``, ``world_size``, ``launch``,
        ``max_connections`` and ``pipeline`` (its JSON form) when set, ``collectives``, ``warnings``, ``p2p``,
        and ``issue_order`` when set."""
        g: dict[str, Any] = {"name": self.name, "world_size": self.world_size, "launch": self.launch}
        if self.max_connections is not None:
            g["max_connections"] = self.max_connections
        if self.pipeline is not None:
            g["pipeline"] = self.pipeline.to_dict()
        g.update(collectives=self.collectives, warnings=self.warnings, p2p=self.p2p)
        if self.issue_order is not None:
            g["issue_order"] = self.issue_order
        return g
