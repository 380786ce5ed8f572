"""Lowering of a ``pipeline:`` block into op instances (the block's meaning is documented in
:mod:`schedsim.spec.pipeline_block`, which defines its schema).

:func:`expand_pipeline` validates the compute order (:func:`schedsim.pipeline.validate`), places the p2p as
the framework that runs the schedule issues them (Megatron for 1F1B and interleaved 1F1B, torch's
``_add_send_recv`` otherwise), and writes one instance per op into a :class:`~schedsim.lower.table.Table`:
each stage's F/I/W op list is one template per op, instanced per (stage, microbatch) with its name, tags and
dependencies; sends and recvs share one template per kind.

Two emitters write the same table. :class:`_FastEmitter` works on the issue order as columns
(:class:`~schedsim.lower.pipeline_steps.StepCols`, p2p placed by :mod:`schedsim.lower.pipeline_steps`): every
op's template, name, tags, stream, peer, strings and dependencies come from numpy over all ranks at once and go
to the table as one :class:`~schedsim.lower.table.Block` per replica; the names, tag sets and strings take the
ids the per-op emitter gives them, as lazy runs of the interners (made on first read, registered for lookup
when an item that could be one of them is looked up). :class:`~schedsim.lower.pipeline_emitter._Emitter`, one
Python step per op, is the reference (``expand_pipeline(..., reference=True)``);
tests/pipeline/test_expand_columns.py asserts both give the same table for every schedule kind. Orders
without a column form (DualPipe's overlapped F&B pairs, torch's UNSHARD/RESHARD) and the rare cases the
columns do not reproduce (an action twice on one rank, one compute on two ranks, a pipeline-like tag set
interned before the block), and stages whose ops are placed on other streams or after named ops of their list
(collectives in stages: :func:`_stage_row`), go through the reference. Custom inline actions are also parsed,
checked and lowered to sends/recvs as columns (:func:`schedsim.lower.pipeline_plan.plan_of`,
:func:`schedsim.lower.pipeline_steps._torch_lower_cols`); every rejection still comes from the per-action
code, word for word. Megatron's interleaved order arrives as columns too
(:func:`schedsim.pipeline.comms.megatron_interleaved_cols`).

Two steps run in ``schedsim/sim/_cwaves.c`` (a BuildError when it is not built,
:func:`schedsim.lower.program.required`): the input lookups (``first_set``, driven by the rule table
:data:`_INPUT_RULES`; orders where two ranks set one key, hand-written p2p, take the sorted numpy lookups) and
torch's sweeps and rows (``torch_rows``). Their numpy forms are test oracles (``tests/oracle/numpy_helpers.py``:
``first_set``, ``torch_lower_cols``); tests/pipeline/test_emitter_inputs_c.py pins the package to them.
"""

from __future__ import annotations

import difflib
from dataclasses import replace
from itertools import compress
from typing import Any

import numpy as np
from pydantic import ValidationError

from schedsim.coded import Parts, TagColumns
from schedsim.graph.info import PipelineInfo
from schedsim.graph.ops import Op, RankGroup
from schedsim.kinds import COLLECTIVE_KINDS, KINDS
from schedsim.lower.pipeline_emitter import ProtoPlace, _Emitter, last_backward, reduce_after_last_backward
from schedsim.lower.pipeline_plan import (
    PipelinePlan,
    StageCost,
    block_error,
    block_info,
    pipeline_block,
    plan_of,
    stage_cost,
)
from schedsim.lower.pipeline_steps import StepCols, _interleaved_cols, _interleaved_steps, _lowered_steps, _step_cols
from schedsim.lower.program import required
from schedsim.lower.table import Block, Table
from schedsim.lower.written import op_instance
from schedsim.pipeline.actions import ComputationType as CT
from schedsim.spec.model import OP_MODELS, ScheduleSpec
from schedsim.spec.pipeline_block import PipelineSpec

__all__ = ["expand_pipeline"]


#: Default stream of a collective in a stage's op list (FSDP's all-gather / reduce-scatter beside compute).
STAGE_COMM_STREAM = "fsdp"

#: The groups a collective in a stage's op list may name (``group:``).
STAGE_GROUPS = ("dp",)

#: The ``stage:`` key of each phase's op list, as errors name the field (F, I, W: the schedule's phases).
PHASE_KEYS = {"F": "forward", "I": "backward_input", "W": "backward_weight"}


def _stage_group(spec: ScheduleSpec, o: dict[str, Any], where: str,
                 dp_group: tuple[int, ...] | None) -> tuple[int, ...]:
    """The ranks of a stage collective's ``group:`` (``dp``: the ranks that hold the same stage in every
    data-parallel replica, ``dp_group``); a missing or unknown group is a SpecError naming the field."""
    g = o.get("group")
    if g is None:
        raise block_error(spec, f"the collective {o.get('kind')!r} in a stage has no `group`: a stage runs on one "
                          "rank of each pipeline replica, so its communicator must be named", f"{where}.group",
                          "add `group: dp` (the ranks holding this stage in the other data-parallel replicas)")
    if g not in STAGE_GROUPS or dp_group is None:
        raise block_error(spec, f"group {g!r} is not a group of the pipeline block (a stage collective names one: "
                          f"{', '.join(STAGE_GROUPS)})", f"{where}.group",
                          "write `group: dp` (the ranks holding the same stage in the other data-parallel "
                          "replicas, `data_parallel` of them)")
    return dp_group


def _stage_proto(spec: ScheduleSpec, o: dict[str, Any], k: int, phase: str,
                 dp_group: tuple[int, ...] | None = None) -> Op:
    """The template of one stage op (validated as an ordinary op of its kind). A collective takes its group
    from the block (``group: dp`` is ``dp_group``) and its stream ``stream`` (default
    :data:`STAGE_COMM_STREAM`); other ops run on stream ``compute`` unless they set ``stream``."""
    d = {kk: vv for kk, vv in o.items() if kk not in ("name", "deps", "group")}
    kind = d.get("kind")
    where = f"pipeline.stage.{PHASE_KEYS[phase]}[{k}]"
    if d.get("tags"):
        raise block_error(spec, "stage ops cannot set 'tags': the pipeline tags each instance itself (stage, "
                          "microbatch, phase, chunk), and a stage op's own tags would be lost", where,
                          "remove 'tags' from the stage op (tag the schedule's other ops instead)")
    if "ranks" in d:
        raise block_error(spec, "stage ops cannot set 'ranks': the pipeline places them on the rank of the "
                          "stage", where, "remove 'ranks' from the stage op")
    coll = kind in COLLECTIVE_KINDS
    local = [k for k, info in KINDS.items() if info.resource != "comm"]
    if kind not in local and not coll:
        raise block_error(spec, f"stage ops must be compute work ({', '.join(local)}) or a collective over a "
                          f"group of the block ({', '.join(COLLECTIVE_KINDS)}), got {kind!r}", where,
                          "model p2p with the block's activation_bytes (the pipeline adds the sends and "
                          "recvs), or write it as hand-written ops")
    if not coll and "group" in o:
        raise block_error(spec, f"`group` is for collectives, not {kind!r}", f"{where}.group", "remove `group`")
    if coll and d.get("send_bytes") is not None:
        raise block_error(spec, "an all_to_all in a stage cannot take per-peer sizes (send_bytes): one stage op "
                          "list is written once for every member of its group, so the sizes could not differ "
                          "per rank as all_to_all_single's split sizes do", f"{where}.send_bytes",
                          "give the stage's all_to_all uniform `bytes`, or write the per-peer all_to_all as "
                          "hand-written ops with `ranks`")
    group = _stage_group(spec, o, where, dp_group) if coll else ()
    try:
        model = OP_MODELS[str(kind)].model_validate({**d, "name": "x"})
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        raise block_error(spec, f"{err['msg']} at {'.'.join(map(str, err['loc']))}", where,
                   "stage ops take the fields of ordinary ops (kind, m/n/k, duration_us, bytes, ...)") from None
    if model.stream and spec.streams is not None and model.stream not in spec.streams:
        near = difflib.get_close_matches(model.stream, spec.streams, n=1)
        raise block_error(spec, f"stream {model.stream!r} is not declared in `streams` {spec.streams}",
                          f"{where}.stream", f"did you mean {near[0]!r}?" if near
                          else f"add {model.stream!r} to `streams`, or fix the stage op's `stream:`")
    stream = model.stream or (STAGE_COMM_STREAM if coll else "compute")
    op = op_instance(model, 0, 0, stream=stream, group=group, tags=(), source="pipeline")
    if coll and KINDS[str(kind)].rooted:  # root: the data-parallel replica whose rank of the stage is the root
        if not 0 <= op.root < len(group):  # type: ignore[operator]
            raise block_error(spec, f"root {op.root} of a stage collective is not a replica of its group (0 .. "
                              f"{len(group) - 1})", f"{where}.root", "write the data-parallel replica index of "
                              "the root (0 for the first replica), not a global rank")
        op = replace(op, root=group[op.root])  # type: ignore[index]
    return op


def _stage_row(spec: ScheduleSpec, o: dict[str, Any], k: int, phase: str, lst: list[dict[str, Any]],
               proto: Op, table: Table) -> tuple[Any, ...]:
    """One row of a stage phase's op list: ``(name, template)``, or with a third item, its
    :class:`~schedsim.lower.pipeline_emitter.ProtoPlace` when it runs on another stream than ``compute`` (then
    ``side``: the phase ends with its last op on ``compute``) or waits for earlier ops of its list (``deps:``, by
    name)."""
    name = str(o.get("name", k))
    deps = o.get("deps") or []
    where = f"pipeline.stage.{PHASE_KEYS[phase]}[{k}].deps"
    if not isinstance(deps, list) or not all(isinstance(x, str) for x in deps):
        raise block_error(spec, f"deps must be a list of op names of the same list, got {deps!r}", where,
                          "write e.g. deps: [ag] (names of ops written earlier in this phase's list)")
    earlier = {str(x.get("name", i)): i for i, x in enumerate(lst[:k])}
    after = []
    for x in deps:
        if x not in earlier:
            later = any(str(y.get("name", i)) == x for i, y in enumerate(lst))
            raise block_error(spec, f"stage op {name!r} waits for {x!r}, which is "
                              + ("written after it" if later else "not an op of this list"), where,
                              "name an op written earlier in the same list (the executor issues them in order); "
                              f"ops of this list: {', '.join(earlier) or 'none before it'}")
        after.append(earlier[x])
    tid = table.template(proto)
    if proto.stream == "compute" and not after:
        return (name, tid)
    sid = -1 if proto.stream == "compute" else table.streams(proto.stream)
    return (name, tid, ProtoPlace(stream=sid, after=tuple(sorted(set(after))), side=sid >= 0))


def _stage_templates(spec: ScheduleSpec, cost: StageCost, plan: PipelinePlan, dp: int,
                     table: Table) -> dict[tuple[int, str], list[tuple[Any, ...]]]:
    """Per (stage, phase): the stage's ops as ``(name, template id)`` rows (a third item places an op on its own
    stream or after earlier ops of its list: :func:`_stage_row`); an empty phase is one zero-time op."""
    protos: dict[tuple[int, str], list[tuple[Any, ...]]] = {}
    p = plan.p
    for st_idx in range(plan.num_stages):
        r = plan.s2r[st_idx]
        dp_group = RankGroup(d * p + r for d in range(dp))
        for phase in ("F", "I", "W"):
            lst = cost.templates[st_idx][phase] or [{"name": "noop", "kind": "compute", "duration_us": 0}]
            protos[(st_idx, phase)] = [_stage_row(spec, o, k, phase, lst, _stage_proto(spec, o, k, phase, dp_group),
                                                  table) for k, o in enumerate(lst)]
    return protos


_TYPES = (CT.F, CT.I, CT.B, CT.W, CT.SEND_F, CT.RECV_F, CT.SEND_B, CT.RECV_B)


#: What the first op of an event waits for, per event class (:data:`_INPUT_CLASS`): the keys tried in order, each
#: (stage offset, code, rule), the first one set by an earlier event on the event's rank winning (the per-op
#: emitter's ``_input`` and a send's source). Codes as :meth:`_FastEmitter._key`'s: F 0, I 1, W 2, SEND_F 3,
#: RECV_F 4, SEND_B 5, RECV_B 6; rule 0 any stage, 1 not on the first stage, 2 not on the last.
_INPUT_RULES = (
    ((0, 4, 0), (-1, 0, 1)),  # F: its recv, else the previous stage's F
    ((0, 6, 0), (1, 1, 2), (0, 0, 0)),  # I (and a full B's I part): its recv, else the next stage's I, else its F
    ((0, 1, 0),),  # W: its I
    ((0, 0, 0),),  # SEND_F: the F whose output it carries
    ((0, 1, 0),),  # SEND_B: the I whose output it carries
)
#: The rules as one int64 table (class, candidate, 3), a code of -1 ending a class's list (for the C lookups).
_INPUT_CANDS = np.array([list(r) + [(0, -1, 0)] * (3 - len(r)) for r in _INPUT_RULES], np.int64)
#: Event class by (type code, part): F 0; I 1; a full B's I part 1, its W part none (-1: it waits for its I
#: part); W 2; SEND_F 3; SEND_B 4; recvs none.
_INPUT_CLASS = np.array([0, -1, 1, -1, 1, -1, 2, -1, 3, -1, -1, -1, 4, -1, -1, -1], np.int64)


def _intern_bulk(interner: Any, seq: list[Any]) -> np.ndarray:
    """Ids of ``seq`` in ``interner``, interning new items in first-seen order (as calling it per item)."""
    ids, items = interner.ids, interner.items
    base = len(items)
    fresh = [x for x in dict.fromkeys(seq) if x not in ids]
    ids.update(zip(fresh, range(base, base + len(fresh)), strict=True))
    items.extend(fresh)
    if len(fresh) == len(seq):
        return np.arange(base, base + len(seq), dtype=np.int64)
    return np.fromiter(map(ids.__getitem__, seq), dtype=np.int64, count=len(seq))


def _is_pipeline_name(x: Any) -> bool:
    """Whether ``x`` could be a pipeline op's name (``F0.1.x``, ``B0.1.I.x``, ``sendF0.1``): a letter of
    F/I/W/B/s/r first and a dot."""
    return isinstance(x, str) and x[:1] in ("F", "I", "W", "B", "s", "r") and "." in x


def _is_pipeline_tags(x: Any) -> bool:
    """Whether ``x`` could be a pipeline compute phase's tag set (five pairs, ``chunk`` first)."""
    return isinstance(x, tuple) and len(x) == 5 and x[0][:1] == ("chunk",)


def _is_pipeline_str(x: Any) -> bool:
    """Whether ``x`` could be a pipeline p2p op's batch name (``b<id>``) or message (``F<stage>.<mb>``,
    ``B<stage>.<mb>``)."""
    return isinstance(x, str) and x[:1] in ("b", "F", "B")


def _pipeline_like(names: Any) -> set[str]:
    """Those of ``names`` that could be a pipeline op's name (``F0.1.x``, ``B0.1.I.x``, ``sendF0.1``)."""
    return set(filter(_is_pipeline_name, names))


def _obj(xs: list[Any]) -> np.ndarray:
    """A 1-d object array of ``xs`` (tuples stay elements)."""
    return np.fromiter(xs, dtype=object, count=len(xs))


def _by_position(items: np.ndarray, pos: np.ndarray, n: int) -> np.ndarray:
    """``items`` ordered by ``pos`` (distinct ints in 0..n-1): ``items[np.argsort(pos)]`` by a table of n."""
    slot = np.full(n, -1, np.int64)
    slot[pos] = np.arange(len(pos))
    return items[slot[slot >= 0]]


def _first_seen(code: np.ndarray, space: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(uniq, inv, first)``: the distinct values of ``code`` (ints in 0..space-1) in order of first appearance,
    each entry's index into them, and the index of each one's first appearance; dense tables, no sort (the
    first appearances are distinct positions, put in order by a table of them)."""
    n = len(code)
    first = np.full(space, n, np.int64)
    first[code[::-1]] = np.arange(n - 1, -1, -1)
    present = np.flatnonzero(first < n)
    uniq = _by_position(present, first[present], n)
    rank = np.empty(space, np.int64)
    rank[uniq] = np.arange(len(uniq))
    return uniq, rank[code], first[uniq]


class _FastEmitter:
    """The per-op emitter's output computed with numpy over all ranks' steps at once (same ops, names,
    tags, dependencies, streams and interning order as :class:`~schedsim.lower.pipeline_emitter._Emitter`, which stays
    the reference)."""

    def __init__(self, table: Table, plan: PipelinePlan, c: StepCols) -> None:
        self.table, self.plan = table, plan
        self.M = int(c.mb.max()) + 1 if len(c.mb) else 1  # microbatch ids are < M
        self.compute_stream = -1
        self._dense_ok = True  # cleared when an action repeats on one rank (the per-op emitter takes the order)

    @classmethod
    def prepare(cls, table: Table, plan: PipelinePlan, protos: dict[tuple[int, str], list[tuple[str, int]]],
                p2p_tmpl: dict[str, int], chunk_of: dict[int, int], c: StepCols) -> _FastEmitter | None:
        """The replica-independent part of the emission (replica 0's names, strings and tag sets interned);
        None when the order needs the per-op emitter (see the module docstring)."""
        self = cls(table, plan, c)
        n = len(c.typ)
        if n and (c.stage.min() < 0 or c.stage.max() >= plan.num_stages or c.mb.min() < 0):
            return None
        if any(len(k) == 5 and k[0][:1] == ("chunk",) for k in table.tags.ids if isinstance(k, tuple)):
            return None  # a tag set already interned could equal a pipeline op's: the per-op path keeps it exact
        self._events(c, protos, p2p_tmpl)
        dep = self._inputs()
        if dep is None:
            return None
        self._names()
        self._dependencies(dep)
        self._tags(chunk_of)
        self._p2p()
        self.compute_stream = table.streams("compute")
        return self

    def _events(self, c: StepCols, protos: dict[tuple[int, str], list[tuple[str, int]]],
                p2p_tmpl: dict[str, int]) -> None:
        """One event per p2p action and per compute phase (a full backward B is two: its I part and its W part),
        and the ops of each (a compute phase has its stage's op list for that phase)."""
        NS = self.plan.num_stages
        full_b = c.typ == 2
        cnt = full_b + 1
        self.et, self.es, self.ej, self.er, self.eb = (np.repeat(x, cnt) for x in (c.typ, c.stage, c.mb, c.rank, c.bid))
        self.E = E = len(self.et)
        self.part = np.zeros(E, np.int64)  # 1: the second event of a full B (its W part)
        self.part[(np.cumsum(cnt) - 1)[full_b]] = 1
        ph = np.array([0, 1, 1, 2, -1, -1, -1, -1])[self.et]
        ph[self.part == 1] = 2
        self.ph, self.comp, self.is_b = ph, ph >= 0, self.et == 2
        # op counts, template ids and name suffixes per (stage, phase, k)
        self.lists = lists = [protos[(st, phase)] for st in range(NS) for phase in "FIW"]
        nops_tab = np.array([len(x) for x in lists], np.int64)
        tstart = np.cumsum(nops_tab) - nops_tab
        tmpl_flat = np.array([tid for x in lists for _n, tid in x] + [p2p_tmpl["send"], p2p_tmpl["recv"]],
                             np.int32)  # the table's id type: the block's column without a copy
        self.sfx = sfx = [f".{nm}" for x in lists for nm, _t in x]
        phase_of_flat = np.repeat(np.tile(np.arange(3), NS), nops_tab)
        self.sfx_b = [f".{'FIW'[phf]}{x}" for phf, x in zip(phase_of_flat.tolist(), sfx, strict=True)]
        slot = self.es * 3 + np.maximum(ph, 0)
        self.idx = np.arange(E)
        recv = (self.et == 5) | (self.et == 7)
        if bool((nops_tab == 1).all()):  # one op per phase: op k is event k (the arrays shared, never written)
            self.N = E
            self.first = self.last = self.op_ev = self.idx
            self.flat_i = np.where(self.comp, slot, len(sfx) + recv)  # tstart is 0, 1, 2, ...
            self.rank_l = self.er
        else:
            nops = np.where(self.comp, nops_tab[slot], 1)
            self.first = np.cumsum(nops) - nops
            self.last = self.first + nops - 1
            self.N = N = int(nops.sum())
            self.op_ev = op_ev = np.repeat(self.idx, nops)
            k_in = np.arange(N) - self.first[op_ev]
            self.flat_i = np.where(self.comp[op_ev], tstart[slot[op_ev]] + k_in, len(sfx) + recv[op_ev])
            self.rank_l = self.er[op_ev]
        self.tmpl = tmpl_flat[self.flat_i]

    def _per_op(self, a: np.ndarray) -> np.ndarray:
        """A per-event column per op (the column itself when op k is event k)."""
        return a if self.N == self.E else a[self.op_ev]

    def _key(self, r: np.ndarray, st: np.ndarray, cd: Any, j: np.ndarray) -> np.ndarray:
        """The key of what an event sets or looks up: (rank, stage, code, mb), code F 0, I 1, W 2, SEND_F 3,
        RECV_F 4, SEND_B 5, RECV_B 6 (stages -1 and NS are valid keys that nothing sets)."""
        return ((r * (self.plan.num_stages + 2) + st + 1) * 7 + cd) * self.M + j

    def _inputs(self) -> np.ndarray | None:
        """Per event, the op its first op waits for (the per-op emitter's ``_input`` and a send's source), -1
        none; None when an action repeats on one rank or a compute runs on two ranks."""
        NS, M, E = self.plan.num_stages, self.M, self.E
        et, es, ej, er, ph, comp, is_b, part, last = (self.et, self.es, self.ej, self.er, self.ph, self.comp,
                                                      self.is_b, self.part, self.last)
        code = np.where(comp, ph, et - 1)
        val = last.copy()  # what each event's key holds: its last op; a full B's I key its W part's last op
        b0 = np.flatnonzero(is_b & (part == 0))
        val[b0] = last[b0 + 1]
        ck = ((es * 3 + ph) * M + ej)[comp]
        if len(ck) > 1 and int(np.bincount(ck, minlength=NS * 3 * M).max()) > 1:
            return None  # one compute on two ranks: its tag set is shared, which the per-op path interns
        dep = np.full(E, -1, np.int64)
        k2 = ((es + 1) * 7 + code) * M + ej  # the key each event sets, by (stage, code, mb)
        cls = _INPUT_CLASS[et * 2 + part]
        first_set = required("first_set")
        if E and not first_set(k2, cls, er, es, ej, val, _INPUT_CANDS, _INPUT_CANDS.shape[1], NS, M, dep):
            self._inputs_sorted(dep, cls, code, val)  # a key set on two ranks (hand-written p2p)
        b1 = np.flatnonzero(is_b & (part == 1))
        dep[b1] = last[b1 - 1]  # a full backward's W part: its I part
        return dep if self._dense_ok else None

    def _inputs_sorted(self, dep: np.ndarray, cls: np.ndarray, code: np.ndarray, val: np.ndarray) -> None:
        """:data:`_INPUT_RULES` on the sorted (rank, key) pairs, for orders where two ranks set one (stage, code, mb)
        key, which the compiled ``_cwaves.first_set`` (a dense table by key; its numpy form is the test oracle
        ``tests/oracle/numpy_helpers.first_set``) declines: ``dep`` per event; clears ``_dense_ok`` when an action
        repeats on one rank."""
        NS, E = self.plan.num_stages, self.E
        er, es, ej = self.er, self.es, self.ej
        dep[:] = -1
        ks = self._key(er, es, code, ej)
        order = np.argsort(ks, kind="stable")
        sk = ks[order]
        if E > 1 and bool((sk[1:] == sk[:-1]).any()):
            self._dense_ok = False  # an action twice on one rank: only the per-op path follows its overwrites
            return
        sval = val[order]
        for c, cands in enumerate(_INPUT_RULES):
            pend = np.flatnonzero(cls == c)
            for ds, cd, rule in cands:  # each candidate looked up for the events still without one
                if not len(pend):
                    break
                r_s, s_s, j_s = er[pend], es[pend], ej[pend]
                q = self._key(r_s, s_s + ds, cd, j_s)
                i = np.minimum(np.searchsorted(sk, q), len(sk) - 1)
                ok = (sk[i] == q) & (order[i] < pend)
                if rule:
                    ok &= s_s > 0 if rule == 1 else s_s < NS - 1
                dep[pend[ok]] = sval[i][ok]
                pend = pend[~ok]

    def _names(self) -> None:
        """Op names (``<label><stage>.<mb>.<op>``, ``B<stage>.<mb>.<I|W>.<op>``, p2p
        ``<send|recv><F|B><stage>.<mb>``), interned in issue order."""
        NS, M, N = self.plan.num_stages, self.M, self.N
        self.js = js = np.array([str(j) for j in range(M)], dtype=object)
        pre_tab = np.array([f"{lab}{st}." for lab in ("F", "I", "B", "W", "sendF", "recvF", "sendB", "recvB")
                            for st in range(NS)], dtype=object)
        per_op = self._per_op
        et_es = per_op(self.et * NS + self.es)  # per op: its label and stage, an index into pre_tab
        sfx_all = self.sfx + self.sfx_b + [""]
        sfx_i = np.where(~per_op(self.comp), len(sfx_all) - 1,
                         np.where(per_op(self.is_b), len(self.sfx) + self.flat_i, self.flat_i))
        usfx = list(dict.fromkeys(sfx_all))
        ej_op = per_op(self.ej)
        if len(usfx) * M <= N:  # "<mb><suffix>" made once per (mb, suffix): one concatenation per name
            u_of = {x: i for i, x in enumerate(usfx)}
            sfx_u = np.array([u_of[x] for x in sfx_all], np.int64)[sfx_i]
            tail_code = ej_op * len(usfx) + sfx_u

            def make() -> list[str]:
                tail = np.array([jj + x for jj in js.tolist() for x in usfx], dtype=object)
                return (pre_tab[et_es] + tail[tail_code]).tolist()
        else:
            def make() -> list[str]:
                return (pre_tab[et_es] + js[ej_op] + np.array(sfx_all, dtype=object)[sfx_i]).tolist()
        nm = self.table.names
        # distinct (label, stage, mb, op) give distinct names (stage and mb are digits, the label leads), so the
        # names are new and distinct unless a stage lists an op name twice or an earlier op took one; then they
        # are made and registered for lookup only when needed (a report, an error, a written op naming one)
        if all(len({x for x, _t in lst}) == len(lst) for lst in self.lists) and not _pipeline_like(nm.ids):
            def parts() -> Parts:  # the same names, coded: <label><stage>. + <mb> + <suffix>
                return Parts([(pre_tab.tolist(), et_es), (js.tolist(), ej_op), (sfx_all, sfx_i)])

            base = nm.reserve(N, make, _is_pipeline_name, columns=parts)
            self.name_id = np.arange(base, base + N, dtype=np.int32)  # the table's id type: no copy when added
        else:
            self.name_id = _intern_bulk(nm, make())

    def _dependencies(self, dep: np.ndarray) -> None:
        """Per op its dependency name ids: the input first, then (batched p2p) the last compute before a p2p
        op, or the sends a compute's batch waited for."""
        E, first, name_id, comp, er, idx = self.E, self.first, self.name_id, self.comp, self.er, self.idx
        has = dep >= 0
        d_op = [first[has]]
        d_ord = [np.zeros(len(d_op[0]), np.int64)]
        d_nm = [name_id[dep[has]]]
        if self.plan.mode == "batched" and E:
            # Megatron batch_p2p_sync: a p2p op also waits for the last compute issued before it on its rank
            pc = np.maximum.accumulate(np.where(comp, idx, -1))
            sel = ~comp & (pc >= 0)
            sel[sel] &= er[pc[sel]] == er[sel]
            lc = name_id[self.last[pc[sel]]]
            prim = dep[sel]
            keep = (prim < 0) | (name_id[np.maximum(prim, 0)] != lc)
            d_op.append(first[sel][keep])
            d_ord.append(np.ones(int(keep.sum()), np.int64))
            d_nm.append(lc[keep])
            # a batch returns when its sends completed: the next compute on the rank waits for them
            nc = np.minimum.accumulate(np.where(comp, idx, E + 1)[::-1])[::-1]
            sel = np.isin(self.et, (4, 6)) & (nc <= E)
            sel[sel] &= er[np.minimum(nc[sel], E - 1)] == er[sel]
            d_op.append(first[nc[sel]])
            d_ord.append(2 + idx[sel])
            d_nm.append(name_id[first[sel]])
        d_op_a = np.concatenate(d_op)
        d_nm_a = np.concatenate(d_nm)
        if len(d_op) > 1:  # the input dependency, then the others in order
            d_nm_a = d_nm_a[np.lexsort((np.concatenate(d_ord), d_op_a))]
        self.dep_ptr = np.zeros(self.N + 1, np.int64)
        if len(d_op) == 1 and self.N == E:  # at most one dependency per op, op k event k: a prefix count
            np.cumsum(has, out=self.dep_ptr[1:])
        else:
            np.cumsum(np.bincount(d_op_a, minlength=self.N), out=self.dep_ptr[1:])
        self.dep_name = d_nm_a

    def _tags(self, chunk_of: dict[int, int]) -> None:
        """Tag sets (a p2p op's its own, naming its message; a compute phase's shared by its ops) appended in
        issue order, and the p2p ops' strings interned."""
        NS, M, table = self.plan.num_stages, self.M, self.table
        # the lazy makers below (kept by the table's interners) hold these arrays, never ``self``: the emitter's
        # other per-event arrays are freed once the Program is built
        et, es, ej, comp, ph, js = self.et, self.es, self.ej, self.comp, self.ph, self.js
        chunk = np.array([chunk_of[st] for st in range(NS)], np.int64)
        p2p = ~comp
        self.p2p_ev = p2p_ev = np.flatnonzero(p2p)
        t, s = et[p2p_ev], es[p2p_ev]
        # the message a p2p op carries: <F|B><stage that produced it>.<mb>, one string per message (SEND_F 4,
        # RECV_F 5, SEND_B 6, RECV_B 7: a send's own stage, a recv's neighbour)
        back = t >= 6
        src = np.where(t % 2 == 0, s, np.where(back, s + 1, s - 1))
        msg_code = ((back * (NS + 2) + src + 1) * M + ej[p2p_ev])
        msg_u, msg_inv, msg_first = _first_seen(msg_code, 2 * (NS + 2) * M)
        strs_made: list[list[str]] = []

        def msg_strs() -> list[str]:
            """The messages' strings, in order of first appearance (made once, on first use)."""
            if not strs_made:
                msg_tab = np.array([f"{d}{st}." for d in "FB" for st in range(-1, NS + 1)], dtype=object)
                strs_made.append((msg_tab[msg_u // M] + js[msg_u % M]).tolist())
            return strs_made[0]

        made: list[list[tuple]] = []

        def make() -> list[tuple]:
            """The tag sets, in event order (made once, on first read)."""
            if not made:
                ch = _obj([("chunk", x) for x in range(int(chunk.max()) + 1 if NS else 1)])[chunk[es]]
                mb = _obj([("mb", j) for j in range(M)])[ej]
                val_tab = _obj([("pp_op", t.value) for t in _TYPES])  # a compute phase's label (B for both parts)
                st_pairs = _obj([("stage", st) for st in range(NS)])[es]
                mid = _obj([("phase", x) for x in "FIW"])[np.maximum(ph, 0)]
                mid[p2p] = _obj([("msg", x) for x in msg_strs()])[msg_inv]
                made.append(list(zip(ch.tolist(), mb.tolist(), mid.tolist(), val_tab[et].tolist(),
                                     st_pairs.tolist(), strict=True)))
            return made[0]

        self.make_tags_p2p = lambda: list(compress(make(), p2p.tolist()))
        cols: list[TagColumns] = []

        def tag_cols() -> TagColumns:
            """The same tag sets, coded per key (-1: the event has no such tag); made once, on first use."""
            if not cols:
                msg_of = np.full(len(et), -1, np.int64)
                msg_of[p2p] = msg_inv
                # the messages as parts, <F|B><stage>. + <mb>: no string made until a report reads one
                msgs = Parts([([f"{d}{st}." for d in "FB" for st in range(-1, NS + 1)], msg_u // M),
                              (js.tolist(), msg_u % M)])
                cols.append(TagColumns({
                    "chunk": (list(range(int(chunk.max()) + 1 if NS else 1)), chunk[es]), "mb": (list(range(M)), ej),
                    "phase": (list("FIW"), np.where(p2p, -1, np.maximum(ph, 0))), "msg": (msgs, msg_of),
                    "pp_op": ([t.value for t in _TYPES], et), "stage": (list(range(NS)), es)}, len(et)))
            return cols[0]

        self.tag_cols = tag_cols
        # made when read; a compute phase's tag set (not a p2p op's, which no other op shares) is registered
        # for lookup when a written op's or a template's pipeline-like tag set is interned
        base = table.tags.reserve(self.E, make, _is_pipeline_tags, np.flatnonzero(comp), columns=tag_cols)
        table.mark_msg_tags(base, p2p)
        self.ev_tag = np.arange(base, base + self.E, dtype=np.int32)  # the table's id type
        # strings: per p2p op its batch name ("b<id>", when batched) then its message, in issue order
        self.batch_sid, self.msg_sid = self._strs(table, self.eb[p2p_ev], msg_u, msg_inv, msg_first, msg_strs)

    def _p2p(self) -> None:
        """Per p2p op its peer (pipeline rank), kind (0 send, 1 recv), direction (0 F, 1 B) and rank."""
        es, et, p2p = self.es, self.et, ~self.comp
        s2r = np.array([self.plan.s2r[st] for st in range(self.plan.num_stages)] + [0, 0], np.int64)
        t, s = et[p2p], es[p2p]
        recv = (t == 5) | (t == 7)  # SEND_F 4, RECV_F 5, SEND_B 6, RECV_B 7
        back = t >= 6
        self.peer_l = s2r[s + 1 - 2 * (recv ^ back)]  # the next stage for a forward send or a backward recv
        self.p2p_kind = recv.astype(np.int64)
        self.p2p_dir = back.astype(np.int64)
        self.p2p_rank = self.er[p2p]

    @staticmethod
    def _strs(table: Table, bid: np.ndarray, msg_u: np.ndarray, msg_inv: np.ndarray, msg_first: np.ndarray,
              msg_strs: Any) -> tuple[np.ndarray, np.ndarray]:
        """Intern the p2p ops' strings as the per-op emitter does (per op its batch name ``b<id>`` when it has
        one, then its message) and return (batch ids, message ids), -1 where an op has no batch.
        ``msg_strs()``: the messages' strings (``msg_u``'s, in order of first appearance at ``msg_first``)."""
        st = table.strs
        has_b = bid >= 0
        n = len(bid)
        if st.ids:  # strings from elsewhere first: intern one by one
            msg_str = msg_strs()
            seq: list[str] = []
            for b, mi in zip(bid.tolist(), msg_inv.tolist(), strict=True):
                if b >= 0:
                    seq.append(f"b{b}")
                seq.append(msg_str[mi])
            sid = _intern_bulk(st, seq)
            pos_msg = np.cumsum(has_b.astype(np.int64) + 1) - 1
            return np.where(has_b, sid[np.maximum(pos_msg - 1, 0)], -1), sid[pos_msg]
        if not bool(has_b.any()):  # the messages alone, in order of first appearance: msg_u's order
            base = st.reserve(len(msg_u), msg_strs, _is_pipeline_str)
            return np.full(n, -1, np.int64), base + msg_inv
        # first appearance of each string in the op sequence b?, msg, b?, msg, ... (positions 2i and 2i + 1)
        hb = np.flatnonzero(has_b)
        b_u, b_inv, b_at = _first_seen(bid[hb], int(bid.max()) + 1)
        firsts = np.concatenate([2 * hb[b_at], 2 * msg_first + 1])
        order = _by_position(np.arange(len(firsts)), firsts, 2 * n)  # argsort of distinct positions
        nb = len(b_u)

        def make() -> list[str]:
            labels = np.array([f"b{x}" for x in b_u.tolist()] + msg_strs(), dtype=object)
            return labels[order].tolist()

        # made when read, registered for lookup when a written op's batch or message could be one of them
        base = st.reserve(len(order), make, _is_pipeline_str)
        id_of = np.empty(len(order), np.int64)
        id_of[order] = base + np.arange(len(order))
        batch_sid = np.full(n, -1, np.int64)
        batch_sid[hb] = id_of[:nb][b_inv]
        return batch_sid, id_of[nb:][msg_inv]

    def emit(self, off: int) -> None:
        """Write one replica's ops (ranks ``off`` .. ``off + p - 1``) into the table."""
        table, plan = self.table, self.plan
        N = self.N
        if off:  # a replica after the first: same names, strings and compute tags; new p2p tag sets
            p2p_ev, tag_cols = self.p2p_ev, self.tag_cols
            base = table.tags.reserve(len(p2p_ev), self.make_tags_p2p, None, np.zeros(0, np.int64),
                                      columns=lambda: tag_cols().reindex(p2p_ev))
            table.mark_msg_tags(base, np.ones(len(self.p2p_ev), bool))
            ev_tag = self.ev_tag.copy()
            ev_tag[self.p2p_ev] = base + np.arange(len(self.p2p_ev))
        else:
            ev_tag = self.ev_tag
        # streams: "compute", then each rank's p2p streams in order of first use (the emitter's interning)
        p2p_stream = np.empty(len(self.p2p_ev), np.int64)
        key = (self.p2p_rank * 4 + self.p2p_kind * 2 + self.p2p_dir) * (plan.p + 1) + self.peer_l
        uk, inv, first_i = _first_seen(key, plan.p * 4 * (plan.p + 1))  # (distinct keys in order of first use)
        sid_of = np.empty(len(uk), np.int64)
        by_rank: dict[int, list[int]] = {}
        for u in range(len(uk)):
            by_rank.setdefault(int(self.p2p_rank[first_i[u]]), []).append(u)
        for r in range(plan.p):
            table.streams("compute")
            for u in by_rank.get(r, ()):
                i = first_i[u]
                kind = "send" if self.p2p_kind[i] == 0 else "recv"
                d = "F" if self.p2p_dir[i] == 0 else "B"
                nm = f"pp_{kind}" if plan.mode == "batched" else f"pp_{kind}{d}_r{int(self.peer_l[i]) + off}"
                sid_of[u] = table.streams(nm)
        p2p_stream[:] = sid_of[inv]
        ident = N == self.E  # op k is event k
        comp_op = self.comp if ident else self.comp[self.op_ev]
        i32 = np.int32  # the table's column type (ids below 2**31)
        stream = np.full(N, self.compute_stream, i32)
        peer = np.full(N, -1, i32)
        batch = np.full(N, -1, i32)
        msg = np.full(N, -1, i32)
        p2p_ops = np.flatnonzero(~comp_op)
        stream[p2p_ops] = p2p_stream
        peer[p2p_ops] = self.peer_l + off
        batch[p2p_ops] = self.batch_sid
        msg[p2p_ops] = self.msg_sid
        table.add_block(Block(self.tmpl, self.rank_l + off, self.name_id, ev_tag if ident else ev_tag[self.op_ev],
                              stream, peer, batch, msg, self.dep_ptr, self.dep_name))


def _collective(table: Table, name: str, group: tuple[int, ...], nbytes: float, dtype: str, stream: str = "compute",
                deps: dict[int, tuple[str, ...]] | None = None) -> None:
    """An all_reduce of the block (tied embedding, data-parallel gradients) on every rank of ``group``, on
    ``stream``; ``deps``: per rank, the names its instance waits for."""
    proto = Op(name=name, rank=group[0], kind="all_reduce", stream=stream, seq=0, group=group,
               nbytes=float(nbytes), dtype=dtype, tags=(("pp_op", "allreduce"),), source="pipeline")
    t = table.template(proto)
    for rr in group:
        table.add_one(t, rr, name, table.tag_id(proto.tags), stream, (deps or {}).get(rr, ()))


#: Stream of the data-parallel gradient all-reduce: the data-parallel group's NCCL stream.
DP_STREAM = "dp_comm"


def _last_compute(plan: PipelinePlan, protos: dict[tuple[int, str], list[tuple[str, int]]]) -> dict[int, str]:
    """Per pipeline rank, the name of its last compute op (named as the emitters name it: ``F<s>.<mb>.<op>``,
    ``I``/``W`` likewise, ``B<s>.<mb>.W.<op>`` for a full backward's last part): the gradients of the rank's
    stages are complete when it ends (every compute op runs on the one ``compute`` stream)."""
    last: dict[int, tuple[int, int, int]] = {}  # rank -> (type code 0..3 F, I, B, W; stage; microbatch)
    c = plan.cols
    if c is not None:
        busy = np.flatnonzero(c.typ >= 0)
        for i in busy[np.r_[c.rank[busy][1:] != c.rank[busy][:-1], True]].tolist():  # each rank's last busy row
            last[int(c.rank[i])] = (int(c.typ[i]), int(c.stage[i]), int(c.mb[i]))
    else:
        code = {CT.F: 0, CT.I: 1, CT.B: 2, CT.W: 3}
        for r, acts in plan.actions().items():
            subs = [x for a in acts if a is not None for x in a.sub_actions if x.type in code]
            if subs:
                last[r] = (code[subs[-1].type], subs[-1].stage, subs[-1].microbatch)
    out = {}
    for r, (typ, st, j) in last.items():
        phase = "FIWW"[typ]  # a full backward ends with its W part
        op = protos[(st, phase)][-1][0]
        out[r] = f"B{st}.{j}.W.{op}" if typ == 2 else f"{phase}{st}.{j}.{op}"
    return out


def _dp_tail(pb: PipelineSpec, plan: PipelinePlan, cost: StageCost, table: Table,
             protos: dict[tuple[int, str], list[tuple[str, int]]]) -> None:
    """The data-parallel gradient all-reduce of each pipeline rank across the ``data_parallel`` replicas,
    after its last compute op, on :data:`DP_STREAM`; each replica's end of step (:func:`_end_of_step`)
    waits for it. Megatron-LM's ``finalize_model_grads`` (``megatron/core/distributed/finalize_model_grads.py``)
    runs the data-parallel all-reduce (``finish_grad_sync``), then the embedding all-reduce between the first
    and last stage, and ``train_step`` then the optimizer step. Size: ``grad_allreduce_bytes``, else 2 bytes ×
    the parameters the rank's stages hold, the embedding on the first stage and the output layer on the last
    included (``megatron/core/models/gpt/gpt_model.py``: ``pre_process`` builds the embedding,
    ``post_process`` the output layer, a copy of the word embedding when tied)."""
    p, dp = plan.p, pb.data_parallel
    last = _last_compute(plan, protos)
    for r in range(p):
        gbytes = pb.grad_allreduce_bytes if pb.grad_allreduce_bytes is not None else 2 * cost.rank_params(plan.s2r, r)
        _collective(table, f"dp_grad_allreduce_r{r}", tuple(d * p + r for d in range(dp)), gbytes, cost.dtype,
                    DP_STREAM, {d * p + r: (last[r],) for d in range(dp) if r in last})


def _dp_names(pb: PipelineSpec, plan: PipelinePlan, r: int) -> tuple[str, ...]:
    """The names of pipeline rank ``r``'s data-parallel gradient all-reduces: one (:func:`_dp_tail`), or with
    ``overlap_grad_reduce`` one per model chunk in chunk order (:func:`_chunk_reductions`); () without data
    parallelism."""
    if pb.data_parallel <= 1:
        return ()
    if not pb.overlap_grad_reduce:
        return (f"dp_grad_allreduce_r{r}",)
    return tuple(f"dp_grad_allreduce_r{r}_c{c}" for c in range(plan.num_stages // plan.p))


def _chunk_reductions(pb: PipelineSpec, plan: PipelinePlan, cost: StageCost, table: Table,
                      protos: dict[tuple[int, str], list[tuple[str, int]]], last: dict[int, int],
                      stages: list[int], em: _Emitter, r: int) -> None:
    """``overlap_grad_reduce``: pipeline rank ``r``'s data-parallel gradient all-reduce split per model chunk
    (``stages``, chunk c = ``stages[c]``), each issued on :data:`DP_STREAM` right after its chunk's last backward
    (the last op of the W phase, or of a full B's W part, of the chunk's last backward microbatch ``last``), by
    the training block's rule (:func:`~schedsim.lower.pipeline_emitter.reduce_after_last_backward`), in program
    order: Megatron-LM issues them as each chunk's gradients become ready (``param_and_grad_buffer.py``,
    ``start_grad_sync``), the later chunks' first in the interleaved schedule's backward. Each instance is named
    ``dp_grad_allreduce_r<r>_c<c>`` and spans the ``data_parallel`` replicas of rank ``r``; ``em``'s rank is
    the one this call writes. Size of chunk c: ``grad_allreduce_bytes`` / (chunks per rank) when given, else
    2 bytes × the parameters stage ``stages[c]`` holds (:attr:`StageCost.params`, 0 without a ``transformer``)."""
    p, dp = plan.p, pb.data_parallel
    group = tuple(d * p + r for d in range(dp))
    tag = table.tag_id((("pp_op", "allreduce"),))
    stream = table.streams(DP_STREAM)
    tmpl: dict[int, tuple[int, int]] = {}  # stage -> (template id, name id)
    for c, st in enumerate(stages):
        name = f"dp_grad_allreduce_r{r}_c{c}"
        nbytes = pb.grad_allreduce_bytes / len(stages) if pb.grad_allreduce_bytes is not None \
            else 2 * cost.params.get(st, 0)
        tmpl[st] = (table.template(Op(name=name, rank=group[0], kind="all_reduce", stream=DP_STREAM, seq=0,
                                      group=group, nbytes=float(nbytes), dtype=cost.dtype,
                                      tags=(("pp_op", "allreduce"),), source="pipeline")), table.names(name))
    ready = {st: {protos[(st, "W")][-1][0]: st} for st in stages}

    def issue(st: int, _: int, nid: int) -> None:
        t, name = tmpl[st]
        table.add_ids(t, em.rank, name, tag, stream, (nid,), -1, -1, -1)

    reduce_after_last_backward(em, last, ready, issue)


def _end_of_step(pb: PipelineSpec, plan: PipelinePlan, cost: StageCost, table: Table, off: int) -> None:
    """Per replica: the tied-embedding all_reduce between first and last stage, and the optimizer step, on the
    compute stream, after the rank's data-parallel gradient all-reduce (:func:`_dp_tail`), or all its chunks'
    (:func:`_chunk_reductions`, ``overlap_grad_reduce``), when there is one (:func:`_dp_names`)."""
    p, s2r, num_stages = plan.p, plan.s2r, plan.num_stages
    dp = pb.data_parallel > 1
    if pb.tied_embedding_allreduce and cost.emb_bytes and p > 1:
        grp = tuple(sorted({off + s2r[0], off + s2r[num_stages - 1]}))
        _collective(table, "tied_embedding_allreduce", grp, cost.emb_bytes, cost.dtype,
                    deps={rr: _dp_names(pb, plan, rr - off) for rr in grp} if dp else None)
    if pb.optimizer and cost.params_stage:
        for r in range(p):
            proto = Op(name="optimizer_step", rank=off + r, kind="compute", stream="compute", seq=0,
                       nbytes=float(18 * cost.rank_params(s2r, r)), dtype="fp32", tags=(("pp_op", "optimizer"),),
                       source="pipeline")
            table.add_one(table.template(proto), off + r, proto.name, table.tag_id(proto.tags), "compute",
                          _dp_names(pb, plan, r))


def expand_pipeline(spec: ScheduleSpec, table: Table, *, reference: bool = False) -> PipelineInfo:
    """Write the op instances of the spec's pipeline block into ``table`` (program order per rank).

    Returns the block's :class:`~schedsim.graph.info.PipelineInfo` (schedule, p, v, m, placement, p2p mode,
    activation sizes, the compute order as text), the Program's ``pipeline``.

    Raises
    ------
    SpecError
        Invalid block (unknown key, unknown schedule, bad sizes).
    schedsim.pipeline.PipelineScheduleError
        The order would hang or is wrong (missing/duplicate microbatch, W before I,
        a stage on two ranks, too few microbatches, p2p wait cycle); the message
        shows the rank × step grid.
    """
    pb = pipeline_block(spec)
    p, dp = pb.p, pb.data_parallel
    if spec.world_size != p * dp:
        raise block_error(spec, f"world_size is {spec.world_size} but the pipeline needs p × data_parallel = "
                          f"{p} × {dp} = {p * dp}", "world_size", f"set world_size: {p * dp}")
    if pb.overlap_grad_reduce and dp == 1:
        raise block_error(spec, "overlap_grad_reduce overlaps the data-parallel gradient all-reduce with the "
                          "backward, but data_parallel is 1: there is no gradient all-reduce",
                          "pipeline.overlap_grad_reduce", "set data_parallel: 2 or more, or remove overlap_grad_reduce")
    plan = plan_of(spec, pb, reference=reference)
    megatron = plan.name == "interleaved_1f1b" and not plan.torch_rules  # torch's name: torch's p2p
    if megatron:
        steps = _interleaved_steps(spec, pb, plan) if reference else _interleaved_cols(spec, pb, plan)
    else:
        steps = _lowered_steps(plan)
    cost = stage_cost(spec, pb, plan.num_stages)
    protos = _stage_templates(spec, cost, plan, dp, table)
    p2p_tmpl = {k: table.template(Op(name=k, rank=0, kind=k, stream="", seq=0, nbytes=float(cost.act_bytes),
                                     dtype=cost.dtype, source="pipeline")) for k in ("send", "recv")}
    rank_stages = {r: sorted(st for st, rr in plan.s2r.items() if rr == r) for r in range(p)}
    chunk_of = {st: rank_stages[r].index(st) for st, r in plan.s2r.items()}
    placed = any(len(row) > 2 for rows in protos.values() for row in rows)  # the per-op emitter places them
    overlap = pb.overlap_grad_reduce  # its reductions go between a backward's ops: the per-op emitter
    # Megatron's overlap_p2p_comm waits (the training block's, _Emitter.megatron_overlap): the per-op emitter
    mo = megatron and plan.mode == "overlapped" and plan.v > 1
    cols = None if reference or placed or overlap or mo else _step_cols(steps, plan)
    fast = None if cols is None else _FastEmitter.prepare(table, plan, protos, p2p_tmpl, chunk_of, cols)
    if fast is None and isinstance(steps, StepCols):  # the per-op emitter takes actions
        steps = _interleaved_steps(spec, pb, plan) if megatron else _lowered_steps(plan, columns=False)
    last = last_backward(plan) if overlap else {}
    for d in range(dp):
        off = d * p
        if fast is not None:
            fast.emit(off)
        else:
            for r in range(p):
                em = _Emitter(table, plan, protos, p2p_tmpl, chunk_of, off + r, off, megatron_overlap=mo)
                if overlap:
                    _chunk_reductions(pb, plan, cost, table, protos, last, rank_stages[r], em, r)
                for act, batch_id in steps[r]:  # type: ignore[index]
                    em.action(act, batch_id)
    if dp > 1 and not overlap:
        _dp_tail(pb, plan, cost, table, protos)
    for d in range(dp):
        _end_of_step(pb, plan, cost, table, d * p)
    return block_info(pb, plan, cost)
